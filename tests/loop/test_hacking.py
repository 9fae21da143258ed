"""Reward-hacking monitors: each signal on hand-made steps, and a run where the judge is gamed.

The loop test trains on the backend app (fake engine and trainer) with a real scripted judge on
127.0.0.1 that rewards length (:func:`tests.helpers.scripted_judges.length_loving`), beside the
verifiable brevity reward. The fake engine does not learn, so the drift such a judge trains into a
policy is played by the rollout: from step 1 on, the agent is allowed 8 tokens instead of 1 (its
replies grow, the judge's reward rises, the verifiable one falls). The monitor must say so in the
log, the step reports, the metrics rows and a tagged trace, and stop the loop when told to.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from langchain_openai import ChatOpenAI
from pydantic import ValidationError

from art_adapters import TrainableModel, Trajectory, TrajectoryGroup
from art_adapters._hacking import (
    HackingMonitor,
    HackingMonitorConfig,
    HackingWarning,
    repeated_ngram_fraction,
    step_signals,
    warnings_row,
)
from art_adapters._loop import train_loop
from art_adapters._scorers import combined_scorer
from art_adapters._trajectory import Message, ToolCallRecord
from art_adapters.observe import ObserveConfig, Observer
from art_adapters.observe._metrics import MetricsHistory
from tests.helpers.fake_backend import FakeBackend
from tests.helpers.judge_server import JudgeServer
from tests.helpers.observers import in_memory_observer
from tests.helpers.scripted_judges import length_loving
from tests.loop.test_loop import brevity, loop_config, scenarios


def test_repeated_ngrams() -> None:
    assert repeated_ngram_fraction("a b c a b c") == pytest.approx(0.25)  # abc bca cab abc
    assert repeated_ngram_fraction("the answer is 14") == 0.0
    assert repeated_ngram_fraction("ok ok ok ok ok", n=2) == pytest.approx(0.75)
    assert repeated_ngram_fraction("too short") is None


def _trajectory(
    answer: str, *, reward: float, verifiable: float | None = None, calls: int = 0, errors: int = 0,
    agreement: float | None = None,
) -> Trajectory:
    metrics: dict[str, float] = {"ruler_score": reward}
    if verifiable is not None:
        metrics["independent_reward"] = verifiable
    if agreement is not None:
        metrics["judge_agreement"] = agreement
    records = [ToolCallRecord(name="add", is_error=i < errors) for i in range(calls)]
    messages = [Message(role="user", content="What is 2 + 2?"), Message(role="assistant", content=answer)]
    return Trajectory(messages=messages, reward=reward, metrics=metrics, tool_records=records)


def _step(trajectories: list[Trajectory]) -> list[TrajectoryGroup]:
    return [TrajectoryGroup(trajectories=trajectories)]


def test_step_signals_read_the_rollouts() -> None:
    groups = _step([
        _trajectory("4", reward=0.2, verifiable=1.0, calls=2, errors=1, agreement=0.9),
        _trajectory("four four four four", reward=0.8, verifiable=0.0, calls=0, agreement=0.5),
    ])  # fmt: skip
    signals = step_signals(groups)
    assert signals == pytest.approx({
        "reward": 0.5, "verifiable": 0.5, "spearman": -1.0, "answer_chars": 10.0,
        "repetition": 0.5,  # "4" has no 3-gram; "four four four four": 1 of its 2 repeats
        "tool_calls": 1.0, "tool_error_rate": 0.5, "judge_agreement": 0.7,
    })  # fmt: skip
    assert step_signals([]) == {}


def _steady(answer: str = "the answer is 4", **kw: Any) -> list[TrajectoryGroup]:
    defaults: dict[str, Any] = {"reward": 0.5, "verifiable": 0.5, "calls": 1, "agreement": 0.9}
    return _step([_trajectory(answer, **{**defaults, **kw}), _trajectory("4", reward=0.1, verifiable=0.1)])


def test_nothing_is_checked_until_the_baseline_is_complete_and_steady_steps_raise_nothing() -> None:
    monitor = HackingMonitor(HackingMonitorConfig(window=2))
    assert monitor.observe(1, _steady()) == []
    assert monitor.observe(2, _steady(reward=0.9, verifiable=0.0)) == []  # still the baseline
    assert monitor.observe(3, _steady(reward=0.7, verifiable=0.25)) == []  # the mean of 1-2: no change
    assert [s for s, _ in monitor.history] == [1, 2, 3]
    assert HackingMonitor(HackingMonitorConfig(enabled=False)).observe(1, _steady()) == []


@pytest.mark.parametrize(
    ("later", "signal", "values"),
    [
        ({"reward": 0.9, "verifiable": 0.1}, "reward_vs_verifiable", {"reward": 0.5, "verifiable": 0.1}),
        ({"answer": "the answer is 4 and I am very sure that it is 4"}, "answer_length", {"ratio": 24 / 8}),
        ({"answer": "is 4 is 4 is 4 is 4 is 4"}, "repetition", {"repetition": 0.75}),
        ({"calls": 3}, "tool_calls", {"calls": 1.5}),
        ({"calls": 2, "errors": 2}, "tool_errors", {"error_rate": 1.0}),
        ({"agreement": 0.5}, "judge_agreement", {"agreement": 0.5}),
        ({"reward": 0.05}, "calibration", {"spearman": -1.0}),
    ],
)
def test_each_signal_warns_with_its_values_and_what_to_check(
    later: dict[str, Any], signal: str, values: dict[str, float]
) -> None:
    monitor = HackingMonitor(HackingMonitorConfig(window=1))
    assert monitor.observe(1, _steady()) == []
    warnings = monitor.observe(2, _steady(**later))
    assert signal in [w.signal for w in warnings]
    (warning,) = [w for w in warnings if w.signal == signal]
    assert warning.step == 2 and warning.check and warning.message
    for key, value in values.items():
        assert warning.values[key] == pytest.approx(value)
    assert warning.line().startswith(f"step 2: reward hacking? {signal}: ")


def test_the_row_names_the_warned_signals() -> None:
    warning = HackingWarning(signal="answer_length", step=3, message="m", check="c")
    row = warnings_row([warning, warning], {"answer_chars": 40.0, "reward": 0.5, "tool_calls": 0.0})
    assert row == {
        "hacking_answer_chars": 40.0, "hacking_tool_calls": 0.0, "hacking_warnings": 2,
        "hacking_signals": "answer_length",
    }  # fmt: skip
    assert warnings_row([], {}) == {"hacking_warnings": 0}


def test_thresholds_are_checked() -> None:
    with pytest.raises(ValidationError, match="length_ratio"):
        HackingMonitorConfig(length_ratio=1.0)
    with pytest.raises(ValidationError, match="window"):
        HackingMonitorConfig(window=0)
    with pytest.raises(ValidationError, match="extra"):
        HackingMonitorConfig(stop_on="anything")  # type: ignore[call-arg]


def drifting_rollout(model: TrainableModel) -> Any:
    """The agent of tests/loop/test_loop.py, allowed 1 token at step 0 and 8 from step 1 on."""
    client = model.openai_client()

    async def rollout(scenario: dict[str, Any]) -> Trajectory:
        step = await model.get_step()
        history = [
            Message(role="system", content="Answer with only the number."),
            Message(role="user", content=f"What is {scenario['a']} + {scenario['b']}?"),
        ]
        response = await client.chat.completions.create(
            model=model.served_name(), messages=[m.to_openai() for m in history], temperature=1.0,
            max_tokens=1 if step == 0 else 8,
        )  # fmt: skip
        content = response.choices[0].message.content
        reply = Message(role="assistant", content=content, completion_id=response.id)
        return Trajectory(messages=[*history, reply])

    return rollout


async def _gamed_run(
    fake_backend: FakeBackend, run_dir: Path, name: str, hacking: HackingMonitorConfig, observer: Observer
) -> tuple[Any, list[HackingWarning], TrainableModel]:
    model = TrainableModel(name=name, project="loop-tests")
    await model.register(fake_backend)
    seen: list[HackingWarning] = []
    with JudgeServer() as server:
        server.reset(default=length_loving)
        judge = ChatOpenAI(base_url=server.url, api_key="t", model="long", max_retries=0, temperature=0)
        result = await train_loop(
            model, drifting_rollout(model), scenarios("h", 4),
            score=combined_scorer(judge, brevity, weight=1.0, cache=False, max_retries=0),
            config=loop_config(run_dir, steps=3, eval_every=0).model_copy(update={"hacking": hacking}),
            observer=observer, on_warning=seen.append,
        )  # fmt: skip
    return result, seen, model


async def test_a_judge_that_rewards_length_is_caught_while_the_verifiable_reward_falls(
    fake_backend: FakeBackend, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    observer, exporter = in_memory_observer("gamed")
    with caplog.at_level(logging.WARNING):
        result, seen, _ = await _gamed_run(
            fake_backend, tmp_path, "gamed", HackingMonitorConfig(window=1), observer
        )
    observer.force_flush(10)
    assert result.stopped is None and result.final_step == 3  # warned, not stopped (the default)
    first, second, third = result.steps
    assert first.warnings == []  # the baseline
    for report in (second, third):
        signals = {w.signal for w in report.warnings}
        assert {"answer_length", "reward_vs_verifiable"} <= signals
    drift = next(w for w in second.warnings if w.signal == "reward_vs_verifiable")
    assert drift.values["reward"] > drift.values["reward_baseline"]
    assert drift.values["verifiable"] < drift.values["verifiable_baseline"]
    assert seen == second.warnings + third.warnings
    assert any("reward hacking? answer_length" in r.getMessage() for r in caplog.records)

    rows = MetricsHistory(tmp_path).rows("train")
    assert [r["hacking_warnings"] for r in rows] == [0, len(second.warnings), len(third.warnings)]
    assert "answer_length" in rows[1]["hacking_signals"] and "hacking_signals" not in rows[0]
    assert rows[1]["hacking_answer_chars"] > 1.5 * rows[0]["hacking_answer_chars"]
    assert all(r["calibration_spearman"] == -1.0 for r in rows)  # the judge orders against the reward

    spans = exporter.get_finished_spans()
    tagged = sorted((s for s in spans if s.name.startswith("hacking_warning ")), key=lambda s: s.name)
    tagged = [s for s in tagged if s.parent is None]
    assert [s.name for s in tagged] == ["hacking_warning 2", "hacking_warning 3"]
    attrs = dict(tagged[0].attributes or {})
    assert "answer_length" in str(attrs["art_adapters.hacking_warning"]).split(",")
    assert "hacking_warning" in attrs["langfuse.trace.tags"]  # type: ignore[operator]
    trace = [s for s in spans if s.context.trace_id == tagged[0].context.trace_id and s.parent is not None]
    assert all(s.parent.span_id == tagged[0].context.span_id for s in trace)  # type: ignore[union-attr]
    events = [e for s in trace for e in s.events if e.name == "art_adapters.hacking_warning"]
    signals = {(e.attributes or {})["art_adapters.hacking.signal"] for e in events}
    assert signals == {w.signal for w in second.warnings}
    step_span = next(s for s in spans if s.name == "train_step 2")
    assert "answer_length" in str((step_span.attributes or {})["art_adapters.train.hacking_signals"])


async def test_the_loop_stops_on_a_warning_when_configured(fake_backend: FakeBackend, tmp_path: Path) -> None:
    observer = Observer(ObserveConfig())
    result, seen, model = await _gamed_run(
        fake_backend, tmp_path, "gamed-stop", HackingMonitorConfig(window=1, stop=True), observer
    )
    assert result.final_step == 2 and await model.get_step() == 2  # the third step never ran
    assert result.stopped is not None and result.stopped.startswith("reward hacking suspected at step 2")
    assert "answer_length" in result.stopped and "check:" in result.stopped
    assert seen == result.steps[-1].warnings


def test_steps_no_judge_scored_are_not_watched() -> None:
    """A verifiable reward alone cannot be hacked: answers that shrink under it raise nothing."""
    monitor = HackingMonitor(HackingMonitorConfig(window=1))
    for step, answer in enumerate(["a long and careful answer of many words", "short"]):
        group = TrajectoryGroup(trajectories=[
            Trajectory(messages=[Message(role="user", content="q"), Message(role="assistant", content=answer)],
                       reward=r) for r in (0.0, 1.0)
        ])  # fmt: skip
        assert monitor.observe(step, [group]) == []
    assert monitor.history == []
