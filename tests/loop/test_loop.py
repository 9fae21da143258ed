"""The training loop on the backend app: resume after an interruption, held-out evals every k steps,
unscored groups reported (never dropped silently).

The loop is the subject, not the model: the backend is the real app on the fake engine and trainer
(``fake_backend``; real routes, token records, registry and checkpoints). The task is "What is a + b?"
answered in at most 4 sampled tokens, rewarded for brevity, 1 / (1 + characters): replies sampled at
temperature 1.0 almost never all have the same length, so every group has a spread to train on.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
from langchain_openai import ChatOpenAI

from art_adapters import ConfigError, TrainableModel, TrainConfig, Trajectory
from art_adapters._batch_store import BatchStore
from art_adapters._loop import LoopConfig, next_batch, train_loop
from art_adapters._scorers import ruler_scorer, verifiable_scorer
from art_adapters._trajectory import Message, load_groups
from art_adapters.observe._metrics import MetricsHistory
from tests.helpers.fake_backend import FakeBackend
from tests.helpers.models import registered


class Interrupted(Exception):
    """Stands for a crash or Ctrl-C after a finished step."""


def scenarios(prefix: str, n: int) -> list[dict[str, Any]]:
    return [{"id": f"{prefix}{i}", "a": 3 + i, "b": 11 + 2 * i} for i in range(n)]


def make_rollout(model: TrainableModel, keep_model: bool = False) -> Any:
    """The a + b rollout; ``keep_model`` keeps the reply's ``model`` as the response names it (as capture)."""
    client = model.openai_client()

    async def rollout(scenario: dict[str, Any]) -> Trajectory:
        history = [
            Message(role="system", content="Answer with only the number."),
            Message(role="user", content=f"What is {scenario['a']} + {scenario['b']}?"),
        ]
        response = await client.chat.completions.create(
            model=model.served_name(),
            messages=[m.to_openai() for m in history],
            temperature=1.0,
            max_tokens=4,
        )
        choice = response.choices[0]
        reply = Message(
            role="assistant", content=choice.message.content, completion_id=response.id,
            model=response.model if keep_model else None,
        )  # fmt: skip
        return Trajectory(messages=[*history, reply])

    return rollout


def brevity(trajectory: Trajectory, scenario: dict[str, Any]) -> float:
    if scenario["id"] == "bad":
        raise ValueError("this scenario's checker is broken")
    return 1.0 / (1.0 + len((trajectory.messages[-1].content or "").strip()))


def loop_config(run_dir: Path, steps: int, **kw: Any) -> LoopConfig:
    return LoopConfig(
        steps=steps, groups_per_step=2, rollouts_per_group=6, eval_rollouts=2, run_dir=run_dir,
        progress=False,
        train=TrainConfig(learning_rate=1e-4, lora_rank=4, lora_alpha=8, seed=0), **kw,
    )  # fmt: skip


async def test_resume_after_interruption_continues_and_evaluates_every_k(
    fake_backend: FakeBackend, tmp_path: Path
) -> None:
    model = await registered(fake_backend, "loop-resume", "loop-tests")
    train = scenarios("t", 8)
    first = next_batch(train, 0, 2, seed=0)[0]
    train[train.index(first)] = {"id": "bad", "a": 1, "b": 2}  # in the first batch
    val = scenarios("v", 2)
    rollout, score = make_rollout(model), verifiable_scorer(brevity)
    seen: list[Any] = []

    def stop_after_first(report: Any) -> None:
        seen.append(report)
        if report.trained:
            raise Interrupted

    # Run 1: interrupted right after step 1 was trained (before its evaluation).
    with pytest.raises(Interrupted):
        await train_loop(
            model, rollout, train, score=score, val_scenarios=val,
            config=loop_config(tmp_path, steps=3, eval_every=2), on_step=stop_after_first,
        )  # fmt: skip
    assert await model.get_step() == 1
    step1 = seen[-1]
    assert seen[0].batch == 0 and seen[0].unscored == [
        {"group": seen[0].unscored[0]["group"], "scenario_id": "bad", "reason": seen[0].unscored[0]["reason"]}
    ]
    assert "broken" in seen[0].unscored[0]["reason"]

    # Run 2: the same call resumes at step 1 and does not redo it.
    result = await train_loop(
        model, rollout, train, score=score, val_scenarios=val,
        config=loop_config(tmp_path, steps=3, eval_every=2, eval_at_start=False),
    )  # fmt: skip
    assert result.start_step == 1 and result.final_step == 3 and result.stopped is None
    trained = [r for r in result.steps if r.trained]
    assert [r.step for r in trained] == [2, 3]
    assert result.steps[0].batch == step1.batch + 1  # the next scenarios, not step 1's again
    assert result.steps[0].scenario_ids == [s["id"] for s in next_batch(train, step1.batch + 1, 2, seed=0)]
    # eval_every=2: after step 2, and once at the end (step 3); run 1 evaluated step 0.
    assert [e.step for e in result.evals] == [2, 3]
    history = MetricsHistory(tmp_path)
    assert sorted(r["step"] for r in history.rows("train") if "loss" in r) == [1, 2, 3]
    assert [r["step"] for r in history.rows("val")] == [0, 2, 3]
    assert all(e.trajectories == 4 and e.reward_mean is not None for e in result.evals)
    # Each evaluation keeps its numbers per held-out scenario, so two can be compared question by question.
    for evaluation in result.evals:
        assert set(evaluation.scenarios) == {"v0", "v1"}, evaluation.scenarios
        means = [evaluation.scenarios[sid]["reward"] for sid in ("v0", "v1")]
        assert sum(means) / 2 == pytest.approx(evaluation.reward_mean)
    paired = result.evals[0].compare(result.evals[-1])
    assert paired.metric == "reward" and paired.gained + paired.lost + paired.unchanged == 2
    steps = [c.step for c in await model.checkpoints()]
    assert 3 in steps


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_groups_the_judge_cannot_score_are_reported(
    fake_backend: FakeBackend, tmp_path: Path
) -> None:
    model = await registered(fake_backend, "loop-unscored", "loop-tests")
    judge = ChatOpenAI(
        model="nobody", base_url=f"http://127.0.0.1:{closed_port()}/v1", api_key="x", max_retries=0, timeout=5
    )
    score = ruler_scorer(judge, max_retries=0, cache=False)
    reports: list[Any] = []
    result = await train_loop(
        model, make_rollout(model), scenarios("u", 4), score=score,
        config=loop_config(tmp_path, steps=1, max_untrained=1).model_copy(update={"rollouts_per_group": 2}),
        on_step=reports.append,
    )  # fmt: skip
    assert result.stopped is not None and "trained nothing" in result.stopped
    assert await model.get_step() == 0
    (report,) = reports
    assert not report.trained and report.reason == "no group could be scored"
    assert len(report.unscored) == 2 and all(u["reason"].startswith("judge:") for u in report.unscored)
    assert result.unscored == [{"step": 0, **u} for u in report.unscored]
    (row,) = MetricsHistory(tmp_path).rows("train")
    assert row["unscored_groups"] == 2


async def test_a_scorer_that_drops_groups_is_an_error(fake_backend: FakeBackend, tmp_path: Path) -> None:
    model = await registered(fake_backend, "loop-drop", "loop-tests")

    async def drops_one(groups: list[Any], scenarios: list[Any]) -> list[Any]:
        return groups[1:]

    with pytest.raises(ConfigError, match="returned 1 groups for 2"):
        await train_loop(
            model, make_rollout(model), scenarios("d", 2), score=drops_one,
            config=loop_config(tmp_path, steps=1).model_copy(update={"rollouts_per_group": 2}),
        )  # fmt: skip
    assert await model.get_step() == 0


async def test_rollouts_survive_a_scoring_crash_and_are_reused_not_rerun(
    fake_backend: FakeBackend, tmp_path: Path
) -> None:
    model = await registered(fake_backend, "loop-reuse", "loop-tests")
    train, sample = scenarios("r", 4), make_rollout(model)
    calls = 0

    async def counted(scenario: dict[str, Any]) -> Trajectory:
        nonlocal calls
        calls += 1
        return await sample(scenario)

    class JudgeDown(Exception):
        """Stands for a judge endpoint that is down, or a crash while scoring."""

    async def judge_down(groups: list[Any], scenarios: list[Any]) -> list[Any]:
        raise JudgeDown("the judge endpoint is down")

    config = loop_config(tmp_path, steps=1).model_copy(update={"rollouts_per_group": 3})
    with pytest.raises(JudgeDown):
        await train_loop(model, counted, train, score=judge_down, config=config)
    assert calls == 6 and await model.get_step() == 0
    store = BatchStore(tmp_path)
    saved = load_groups(store.path(0, scored=False))
    assert [g.metadata["scenario_id"] for g in saved] == [s["id"] for s in next_batch(train, 0, 2, seed=0)]
    assert not store.path(0, scored=True).exists()

    # Restarted with a working scorer: the saved rollouts are scored and trained on, none is run again.
    result = await train_loop(model, counted, train, score=verifiable_scorer(brevity), config=config)
    assert calls == 6 and result.final_step == 1 and result.steps[0].trained
    scored = load_groups(store.path(0, scored=True))
    assert [t.id for g in scored for t in g.trajectories] == [t.id for g in saved for t in g.trajectories]
    assert all(t.reward is not None for g in scored for t in g.trajectories)
    # Made at step 0, so never reused for step 1's policy.
    assert store.load(0, 1, [g.metadata["scenario_id"] for g in saved]) is None
