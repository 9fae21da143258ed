"""The demo's judges and its table, without the demo's model: the judge line for none, one and two
judges (read from real environment variables); the demo's scorer with two scripted judges over HTTP
on 127.0.0.1 on hand-written rollouts of a demo question (the verifiable check kept beside RULER,
the judges' agreement on every trajectory, and the table rows they make); the judge rows of the
before/after table from a hand-written ``metrics.jsonl``; the table as rendered; and a reward-hacking
warning as printed.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pytest
from langchain_openai import ChatOpenAI
from rich.console import Console

from art_adapters import EvalReport, HackingWarning, Trajectory, TrajectoryGroup
from art_adapters._calibration import calibrate
from art_adapters._trajectory import FunctionCall, Message, ToolCall
from art_adapters.apps._demo import (
    _print_warning,
    demo_scorer,
    judge_line,
    judge_rows,
    resolve_judges,
    results_table,
)
from art_adapters.apps._demo_agent import AddScenario, check
from art_adapters.observe import MetricsHistory, group_metrics
from tests.helpers.judge_server import JudgeServer
from tests.helpers.oracle_judge import demo_oracle
from tests.helpers.scripted_judges import judge_by

VARIABLES = (
    "ART_ADAPTERS_JUDGE_MODEL", "ART_ADAPTERS_JUDGE_BASE_URL", "ART_ADAPTERS_JUDGE_API_KEY", "OPENAI_API_KEY",
    "ART_ADAPTERS_JUDGE_MODEL_2", "ART_ADAPTERS_JUDGE_BASE_URL_2", "ART_ADAPTERS_JUDGE_API_KEY_2",
)  # fmt: skip


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """None of the judge variables set."""
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_the_judge_line_says_what_scores_the_training_rollouts() -> None:
    assert judge_line([]) == (
        "rewards: the verifiable check (correct add call + correct answer); "
        "no $ART_ADAPTERS_JUDGE_MODEL or $OPENAI_API_KEY set"
    )
    assert judge_line([], no_judge=True).endswith("; --no-judge")
    assert judge_line(["a at X"]) == "rewards: RULER, judge a at X"
    assert judge_line(["a at X", "b at Y"]) == (
        "rewards: RULER, judges a at X and b at Y (their mean; the table shows how far they agree)"
    )


def test_two_judges_from_the_environment_score_together(clean_env: pytest.MonkeyPatch) -> None:
    assert resolve_judges() == ([], judge_line([]))
    clean_env.setenv("ART_ADAPTERS_JUDGE_MODEL", "judge-x")
    clean_env.setenv("ART_ADAPTERS_JUDGE_BASE_URL", "http://u:p@127.0.0.1:9/v1")
    judges, line = resolve_judges()
    assert [j.model_name for j in judges] == ["judge-x"]
    assert line == "rewards: RULER, judge judge-x at http://127.0.0.1:9/v1 ($ART_ADAPTERS_JUDGE_MODEL)"
    clean_env.setenv("ART_ADAPTERS_JUDGE_MODEL_2", "judge-y")
    clean_env.setenv("ART_ADAPTERS_JUDGE_BASE_URL_2", "http://127.0.0.1:10/v1")
    judges, line = resolve_judges()
    assert [j.model_name for j in judges] == ["judge-x", "judge-y"]
    assert line == (
        "rewards: RULER, judges judge-x at http://127.0.0.1:9/v1 ($ART_ADAPTERS_JUDGE_MODEL) and "
        "judge-y at http://127.0.0.1:10/v1 ($ART_ADAPTERS_JUDGE_MODEL_2) "
        "(their mean; the table shows how far they agree)"
    )
    judges, line = resolve_judges(no_judge=True)
    assert judges == [] and line.endswith("; --no-judge")


def write_rows(run_dir: Path, rows: list[dict[str, Any]]) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    lines = (json.dumps({"time": "2026-11-26T06:00:00+00:00", **r}) for r in rows)
    (run_dir / "metrics.jsonl").write_text("".join(f"{line}\n" for line in lines))


#: A rerun from step 2: an earlier run's rows (steps 1-2), then this run's SFT warm-up, two train
#: steps and evaluations. The last train row (step 5) is the one the table reads.
HISTORY = [
    {"step": 1, "split": "train", "judge_agreement_mean": 0.1, "calibration_spearman": -0.9},
    {"step": 2, "split": "train", "judge_agreement_mean": 0.2, "calibration_spearman": -0.8},
    {"step": 2, "split": "val", "correct_mean": 0.25},
    {"step": 3, "split": "train", "sft_warmup": 1, "loss": 1.2},
    {"step": 4, "split": "train", "judge_agreement_mean": 0.5, "calibration_spearman": 0.1,
     "calibration_pairwise": 0.5},
    {"step": 5, "split": "train", "judge_agreement_mean": 0.8125, "calibration_spearman": 0.75,
     "calibration_pairwise": 0.875, "reward_mean": 0.6},
    {"step": 5, "split": "val", "judge_agreement_mean": 0.0, "calibration_spearman": -1.0},
]  # fmt: skip


def test_the_judge_rows_are_the_last_training_steps_agreement_and_calibration(tmp_path: Path) -> None:
    write_rows(tmp_path, HISTORY)
    assert judge_rows(tmp_path, start=2) == [
        ("judge agreement (step 5 training)", "-", "0.81"),
        ("RULER vs the check: Spearman (step 5 training)", "-", "+0.75"),
        ("RULER vs the check: pairs in order (step 5 training)", "-", "88%"),
    ]
    # one judge: no agreement, the calibration only; the check alone: no judge rows
    write_rows(tmp_path, [{"step": 3, "split": "train", "calibration_spearman": -0.5, "reward_mean": 0.4}])
    assert judge_rows(tmp_path, start=2) == [("RULER vs the check: Spearman (step 3 training)", "-", "-0.50")]
    write_rows(tmp_path, [{"step": 3, "split": "train", "reward_mean": 0.4}, {"step": 3, "split": "val"}])
    assert judge_rows(tmp_path, start=2) == []
    # nothing trained in this run (an earlier run's rows only), or no history at all
    write_rows(tmp_path, HISTORY[:3])
    assert judge_rows(tmp_path, start=2) == []
    assert judge_rows(tmp_path / "nowhere", start=0) == []


def test_the_table_shows_the_held_out_numbers_then_the_judge_rows(tmp_path: Path) -> None:
    write_rows(tmp_path, HISTORY)
    held_out = {"correct_mean": 0.25, "add_call_ok_mean": 0.5, "answer_ok_mean": 0.375}
    before = EvalReport(step=2, reward_mean=0.25, scored=8, trajectories=8, exceptions=0, metrics=held_out)
    after = EvalReport(
        step=5, reward_mean=0.5, scored=8, trajectories=8, exceptions=0,
        metrics={"correct_mean": 0.5, "add_call_ok_mean": 0.75},
    )  # fmt: skip
    console = Console(record=True, width=120)
    console.print(results_table(before, after, judge_rows(tmp_path, start=2)))
    text = console.export_text()
    lines = [" ".join(line.translate(str.maketrans("│┃", "  ")).split()) for line in text.splitlines()]
    assert "step 2 step 5" in lines
    assert "correct (add call and answer) 25% 50%" in lines
    assert "correct final answer 38% -" in lines
    assert "rollouts 8 8" in lines
    assert "judge agreement (step 5 training) - 0.81" in lines
    assert "RULER vs the check: Spearman (step 5 training) - +0.75" in lines
    assert "RULER vs the check: pairs in order (step 5 training) - 88%" in lines
    assert lines.index("rollouts 8 8") < lines.index("judge agreement (step 5 training) - 0.81")


def test_the_table_shows_greedy_and_sampled_held_out_and_how_many_steps_trained() -> None:
    sampled = {"correct_mean": 0.125, "add_call_ok_mean": 0.875, "answer_ok_mean": 0.125}
    before = EvalReport(step=0, reward_mean=0.5, scored=48, trajectories=48, exceptions=0, metrics=sampled)
    after = EvalReport(
        step=8, reward_mean=0.9, scored=48, trajectories=48, exceptions=0,
        metrics={"correct_mean": 0.875, "add_call_ok_mean": 1.0, "answer_ok_mean": 0.875},
    )  # fmt: skip
    greedy = (
        {"correct_mean": 1 / 12, "add_call_ok_mean": 11 / 12, "answer_ok_mean": 1 / 12},
        {"correct_mean": 1.0, "add_call_ok_mean": 1.0, "answer_ok_mean": 1.0},
    )
    console = Console(record=True, width=120)
    console.print(results_table(before, after, greedy=greedy, sampled_label="T=1", steps="7 of 8"))
    lines = [" ".join(line.translate(str.maketrans("│┃", "  ")).split()) for line in console.export_text().splitlines()]
    assert "greedy: correct (add call and answer) 8% 100%" in lines
    assert "greedy: correct add(a, b) call 92% 100%" in lines
    assert "T=1: correct final answer 12% 88%" in lines
    assert "T=1 rollouts 48 48" in lines and "GRPO steps trained - 7 of 8" in lines
    assert lines.index("greedy: correct final answer 8% 100%") < lines.index("T=1: correct (add call and answer) 12% 88%")


def test_a_hacking_warning_is_printed_as_one_yellow_line() -> None:
    warning = HackingWarning(
        signal="answer_length", step=3, values={"ratio": 3.0},
        message="answers are 3.0x as long as at the baseline [40 -> 120 chars]",
        check="read a few [long] answers",
    )  # fmt: skip
    console = Console(record=True, width=300, force_terminal=True, color_system="standard")
    _print_warning(warning, console)
    assert "\x1b[33m" in console.export_text(styles=True, clear=False)  # yellow
    assert console.export_text() == (
        "step 3: reward hacking? answer_length: answers are 3.0x as long as at the baseline "
        "[40 -> 120 chars]. Check: read a few [long] answers\n"
    )  # the brackets are the message's, not markup


def rollout(scenario: AddScenario, answer: str, *, call: bool) -> Trajectory:
    """A hand-written run of the demo's agent: an ``add`` call of the question's numbers (or none), then
    ``answer``."""
    messages = [Message(role="user", content=scenario.question)]
    if call:
        arguments = json.dumps({"a": scenario.a, "b": scenario.b})
        tool_call = ToolCall(id="c1", function=FunctionCall(name="add", arguments=arguments))
        messages += [
            Message(role="assistant", content="", tool_calls=[tool_call]),
            Message(role="tool", content=str(scenario.answer), tool_call_id="c1"),
        ]
    return Trajectory(messages=[*messages, Message(role="assistant", content=answer)])


def says_42(body: dict[str, Any], text: str) -> float:
    """A judge that reads the answer: 0.9 when the reply says 42, else 0.2."""
    return 0.9 if "42" in text else 0.2


def long_answer(body: dict[str, Any], text: str) -> float:
    """A judge that likes a long final answer: its last line's length / 60 (a tool call is not the answer)."""
    return min(1.0, len(text.strip().splitlines()[-1]) / 60)


async def test_the_demo_scorer_keeps_the_check_beside_two_judges_and_the_table_shows_their_agreement(
    tmp_path: Path,
) -> None:
    scenario = AddScenario(id="q", a=12, b=30)
    answers = [("The answer is 42.", True), ("It is 41.", True), ("42", False), ("I cannot say.", False)]
    group = TrajectoryGroup(trajectories=[rollout(scenario, text, call=call) for text, call in answers])
    with JudgeServer() as reader, JudgeServer() as lengthy:
        reader.reset(default=judge_by(says_42))  # type: ignore[arg-type]
        lengthy.reset(default=judge_by(long_answer))  # type: ignore[arg-type]
        judges = [
            ChatOpenAI(base_url=reader.url, api_key="t", model="reader", max_retries=0, temperature=0),
            ChatOpenAI(base_url=lengthy.url, api_key="t", model="lengthy", max_retries=0, temperature=0),
        ]
        (scored,) = await demo_scorer(judges)([group], [scenario])
        (single,) = await demo_scorer(judges[:1])([group], [scenario])
    assert scored.metadata["ruler"]["status"] == "scored"
    assert [j["model"] for j in scored.metadata["ruler"]["judges"]] == ["reader", "lengthy"]
    agreements = []
    for trajectory, (text, _) in zip(scored.trajectories, answers, strict=True):
        assert trajectory.metrics["independent_reward"] == check(trajectory, scenario)  # the check, kept
        mine = says_42({}, text), long_answer({}, text)
        assert trajectory.reward == pytest.approx(statistics.fmean(mine))  # RULER alone trains (weight 1)
        assert trajectory.metrics["judge_agreement"] == pytest.approx(1 - abs(mine[0] - mine[1]))
        agreements.append(1 - abs(mine[0] - mine[1]))
    # the loop's train row for these groups, and the table rows the demo makes of it
    calibration = calibrate([scored])
    assert calibration is not None and calibration.overall.spearman is not None
    MetricsHistory(tmp_path).append(1, {**group_metrics([scored]), **calibration.row()}, split="train")
    rows = dict((label, value) for label, _, value in judge_rows(tmp_path, start=0))
    assert rows["judge agreement (step 1 training)"] == f"{statistics.fmean(agreements):.2f}"
    assert rows["RULER vs the check: Spearman (step 1 training)"] == f"{calibration.overall.spearman:+.2f}"
    # one judge: RULER with the check kept beside it, no agreement; none: the check alone
    assert [j["model"] for j in single.metadata["ruler"]["judges"]] == ["reader"]
    for trajectory, (text, _) in zip(single.trajectories, answers, strict=True):
        assert trajectory.reward == pytest.approx(says_42({}, text))
        assert "judge_agreement" not in trajectory.metrics
        assert trajectory.metrics["independent_reward"] == check(trajectory, scenario)
    (checked,) = await demo_scorer([])([group], [scenario])
    assert [t.reward for t in checked.trajectories] == [1.0, 0.5, 0.5, 0.0]


async def test_the_oracle_judge_scores_the_demo_rollouts_as_the_check_does_and_the_swapped_one_shuffles() -> None:
    """The stand-in for a strong judge (tests/helpers/oracle_judge.py) through RULER over HTTP: its scores
    are the demo's check on every trajectory, the worked example's question ignored; with ``swap=1`` every
    group's scores are shuffled among its trajectories."""
    scenario = AddScenario(id="q", a=57, b=38)
    answers = [("57 + 38 = 95", True), ("12 + 30 = 42", True), ("95", False), ("The answer is 96.", True)]
    group = TrajectoryGroup(trajectories=[rollout(scenario, text, call=call) for text, call in answers])
    for trajectory in group.trajectories:  # the demo's prompt: the worked example before the question
        trajectory.messages[:0] = [
            Message(role="system", content="Use the add tool."),
            Message(role="user", content="What is 12 + 30?"),
            Message(role="assistant", content="12 + 30 = 42"),
        ]
    with JudgeServer() as server:
        server.reset(default=demo_oracle())  # type: ignore[arg-type]
        judge = ChatOpenAI(base_url=server.url, api_key="t", model="oracle", max_retries=0, temperature=0)
        (scored,) = await demo_scorer([judge])([group], [scenario])
        (request,) = server.requests
    assert [t.reward for t in scored.trajectories] == [check(t, scenario) for t in group.trajectories]
    assert [t.reward for t in scored.trajectories] == [1.0, 0.5, 0.5, 0.5]
    swapped = demo_oracle(swap=1.0, seed=3)
    orders = [[e["score"] for e in json.loads(swapped(request)["content"])["scores"]] for _ in range(6)]
    assert all(sorted(o) == [0.5, 0.5, 0.5, 1.0] for o in orders) and any(o[0] != 1.0 for o in orders)
    assert json.loads(demo_oracle(swap=0.0)(request)["content"]) == json.loads(
        demo_oracle(swap=0.0, seed=9)(request)["content"]
    )
