"""train_loop's named steps, each on its own and without a backend: where a run resumes, the batch's
scored groups (rolled out, scored, saved and reused), what is trained on, the metrics row, when to
stop and when to evaluate; then the whole loop with a stand-in for the user's model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import art_adapters as aa
from art_adapters._batch_store import BatchStore
from art_adapters._loop import (
    eval_due,
    next_batch,
    record_step,
    resume_batch,
    score_groups,
    scored_groups,
    split_unscored,
    stop_reason,
    train_loop,
    train_step,
)
from art_adapters._scorers import verifiable_scorer
from art_adapters._trajectory import load_groups
from art_adapters.observe._metrics import MetricsHistory

SCENARIOS = [{"id": f"s{i}", "n": i} for i in range(6)]


class Rollouts:
    """A plain async rollout: a one-message trajectory per call; counts its calls."""

    def __init__(self, failing: frozenset[str] = frozenset()) -> None:
        self.calls = 0
        self.failing = failing

    async def __call__(self, scenario: dict[str, Any]) -> aa.Trajectory:
        self.calls += 1
        if scenario["id"] in self.failing:
            raise RuntimeError(f"scenario {scenario['id']} is broken")
        reply = "x" * (self.calls % 3 + scenario["n"])  # replies differ in length: rewards have a spread
        return aa.Trajectory(messages=[aa.Message(role="assistant", content=reply)])


def length(trajectory: aa.Trajectory, scenario: Any) -> float:
    return float(len(trajectory.messages[-1].content or ""))


class Counted:
    """A scorer (the verifiable reward above) that counts its calls, or fails while ``down``."""

    def __init__(self) -> None:
        self.calls = 0
        self.down = False
        self._score = verifiable_scorer(length)

    async def __call__(
        self, groups: list[aa.TrajectoryGroup], scenarios: list[Any]
    ) -> list[aa.TrajectoryGroup]:
        self.calls += 1
        if self.down:
            raise ConnectionError("the judge endpoint is down")
        return await self._score(groups, scenarios)


def config(run_dir: Path | None = None, **settings: Any) -> aa.LoopConfig:
    return aa.LoopConfig(
        steps=2, groups_per_step=2, rollouts_per_group=2, progress=False, run_dir=run_dir, **settings
    )


def test_resume_batch_continues_after_the_last_logged_batch(tmp_path: Path) -> None:
    assert resume_batch(config(), 3) == 3  # no run_dir: at the model's step
    assert resume_batch(config(tmp_path), 1) == 1  # nothing logged yet
    history = MetricsHistory(tmp_path)
    for step, batch in ((1, 0), (1, 1), (2, 2)):  # batch 1 trained nothing: it still used its scenarios
        history.append(step, {"batch": batch})
    assert resume_batch(config(tmp_path), 2) == 3
    assert resume_batch(config(tmp_path), 7) == 7  # the model is further on than the log


async def test_scored_groups_rolls_out_scores_and_saves_the_batch(tmp_path: Path) -> None:
    rollout, score = Rollouts(), Counted()
    scenarios = next_batch(SCENARIOS, 0, 2, seed=0)
    groups = await scored_groups(rollout, score, scenarios, batch=0, step=0, config=config(tmp_path))
    assert [g.metadata["scenario_id"] for g in groups] == [s["id"] for s in scenarios]
    assert all(len(g.trajectories) == 2 and g.trajectories[0].reward is not None for g in groups)
    assert (rollout.calls, score.calls) == (4, 1)
    store = BatchStore(tmp_path)
    assert [t.id for g in load_groups(store.path(0, scored=True)) for t in g.trajectories] == [
        t.id for g in groups for t in g.trajectories
    ]

    # The same batch at the same step again (a restart after a crash before training): reused as is.
    again = await scored_groups(rollout, score, scenarios, batch=0, step=0, config=config(tmp_path))
    assert (rollout.calls, score.calls) == (4, 1)
    assert [g.rewards for g in again] == [g.rewards for g in groups]
    # At another step the policy has changed: rolled out again.
    await scored_groups(rollout, score, scenarios, batch=0, step=1, config=config(tmp_path))
    assert (rollout.calls, score.calls) == (8, 2)


async def test_rollouts_survive_a_scoring_failure_and_are_scored_when_restarted(tmp_path: Path) -> None:
    rollout, score = Rollouts(), Counted()
    scenarios = next_batch(SCENARIOS, 0, 2, seed=0)
    score.down = True
    with pytest.raises(ConnectionError):
        await scored_groups(rollout, score, scenarios, batch=0, step=0, config=config(tmp_path))
    store = BatchStore(tmp_path)
    assert store.path(0, scored=False).exists() and not store.path(0, scored=True).exists()
    score.down = False
    groups = await scored_groups(rollout, score, scenarios, batch=0, step=0, config=config(tmp_path))
    assert rollout.calls == 4 and score.calls == 2  # scored now, not rolled out again
    assert all(t.reward is not None for g in groups for t in g.trajectories)


async def test_without_a_run_dir_nothing_is_saved_or_reused(tmp_path: Path) -> None:
    rollout, score = Rollouts(), Counted()
    scenarios = SCENARIOS[:1]
    for _ in range(2):
        await scored_groups(rollout, score, scenarios, batch=0, step=0, config=config())
    assert (rollout.calls, score.calls) == (4, 2)


async def test_the_loop_runs_with_a_count_budget() -> None:
    # LoopConfig(max_exceptions=3) used to validate, then run_groups rejected 3.0 as a fraction.
    scenarios = SCENARIOS[:4]
    counted = config(run=aa.RunConfig(max_failures=2, max_failure_rate=None))  # 2 of 8 rollouts
    broken = frozenset({"s0"})
    groups = await scored_groups(Rollouts(broken), Counted(), scenarios, batch=0, step=0, config=counted)
    assert [len(g.exceptions) for g in groups] == [2, 0, 0, 0]
    with pytest.raises(aa.RolloutBudgetError, match="max_failures=1"):
        strict = config(run=aa.RunConfig(max_failures=1, max_failure_rate=None))
        await scored_groups(Rollouts(broken), Counted(), scenarios, batch=0, step=0, config=strict)


async def test_a_scorer_must_return_every_group() -> None:
    async def drops_one(groups: list[aa.TrajectoryGroup], scenarios: list[Any]) -> list[aa.TrajectoryGroup]:
        return groups[1:]

    groups = [aa.TrajectoryGroup(trajectories=[aa.Trajectory()]) for _ in range(2)]
    with pytest.raises(aa.ConfigError, match="returned 1 groups for 2"):
        await score_groups(drops_one, groups, [None, None])


def scored(*rewards: float | None, scenario: str = "s") -> aa.TrajectoryGroup:
    return aa.TrajectoryGroup(
        trajectories=[aa.Trajectory(reward=r) for r in rewards], metadata={"scenario_id": scenario}
    )


def test_split_unscored_keeps_the_scored_groups_and_names_the_others() -> None:
    good, partial = scored(1.0, 0.0, scenario="a"), scored(1.0, None, scenario="b")
    usable, unscored = split_unscored([good, partial], step=0)
    assert usable == [good]
    reason = "1 of 2 trajectories have no reward"
    assert unscored == [{"group": partial.id, "scenario_id": "b", "reason": reason}]


class Model:
    """The user's side of the seam, stood in for: ``get_step`` and ``train`` (no backend)."""

    def __init__(self, step: int = 0) -> None:
        self.step = step
        self.trained: list[list[aa.TrajectoryGroup]] = []

    async def get_step(self) -> int:
        return self.step

    async def train(self, groups: list[aa.TrajectoryGroup], *, config: aa.TrainConfig) -> aa.TrainResult:
        self.trained.append(groups)
        self.step += 1
        return aa.TrainResult(step=self.step, trained=True, metrics={"loss": 0.5, "note": "dropped"})


async def test_train_step_trains_on_the_scored_groups_only() -> None:
    model = Model()
    good, bad = scored(1.0, 0.0, scenario="a"), scored(None, None, scenario="b")
    scenarios = [{"id": "a"}, {"id": "b"}]
    report = await train_step(model, [good, bad], scenarios, batch=4, step=0, config=config())
    assert model.trained == [[good]]
    assert (report.step, report.trained, report.batch, report.scenario_ids) == (1, True, 4, ["a", "b"])
    assert report.metrics == {"loss": 0.5} and [u["scenario_id"] for u in report.unscored] == ["b"]

    nothing = await train_step(model, [bad], [{"id": "b"}], batch=5, step=1, config=config())
    assert (nothing.trained, nothing.reason, nothing.step) == (False, "no group could be scored", 1)
    assert len(model.trained) == 1


def test_record_step_writes_the_train_row_and_the_report_shares_its_mean(tmp_path: Path) -> None:
    report = aa.StepReport(step=3, trained=True, batch=2, unscored=[{"group": "g"}], metrics={"loss": 0.5})
    record_step(config(tmp_path), report, [scored(1.0, 0.0)])
    (row,) = MetricsHistory(tmp_path).rows("train")
    assert row["step"] == 3 and row["batch"] == 2 and row["unscored_groups"] == 1 and row["loss"] == 0.5
    assert report.reward_mean == row["reward_mean"] == 0.5 and report.metrics["trajectories"] == 2


def test_stop_reason_after_max_untrained_iterations() -> None:
    report = aa.StepReport(step=2, trained=False, reason="every group had equal rewards")
    settings = config(max_untrained=2)
    assert stop_reason(1, report, settings) is None
    reason = stop_reason(2, report, settings)
    assert reason is not None and "2 iterations in a row" in reason and "equal rewards" in reason
    assert "mastered" not in reason

    # every group alike at a mean reward: say what that may mean (a policy that solves every scenario)
    mastered = aa.StepReport(
        step=7, trained=False, reward_mean=1.0,
        reason="nothing trainable: all 3 group(s) were dropped (3 zero variance)",
    )  # fmt: skip
    reason = stop_reason(2, mastered, settings)
    assert reason is not None and "mean reward was 1.00" in reason and "harder or more varied" in reason

    # every group alike at nothing is no mastery: say that the scorer tells no rollout apart (issue 25)
    flat = mastered.model_copy(update={"reward_mean": 0.0})
    reason = stop_reason(2, flat, settings)
    assert reason is not None and "mastered" not in reason
    assert "every rollout scored 0.00: no rollout earned a reward" in reason and "stronger judge" in reason


def test_eval_due_every_k_steps_but_not_at_the_end() -> None:
    every_two = config(eval_every=2).model_copy(update={"steps": 6})
    assert [s for s in range(1, 7) if eval_due(s, every_two)] == [2, 4]  # 6: the loop's final evaluation
    assert not any(eval_due(s, config(eval_every=0)) for s in range(1, 3))


async def test_the_whole_loop_with_a_stand_in_model(tmp_path: Path) -> None:
    model, rollout, score = Model(), Rollouts(), Counted()
    settings = config(tmp_path, eval_every=1).model_copy(update={"steps": 3})
    seen: list[aa.StepReport] = []
    result = await train_loop(
        model, rollout, SCENARIOS, score=score, config=settings, val_scenarios=SCENARIOS[:2],
        on_step=seen.append,
    )  # fmt: skip
    assert (result.start_step, result.final_step, result.stopped) == (0, 3, None)
    assert [r.batch for r in result.steps] == [0, 1, 2] and seen == result.steps
    assert [e.step for e in result.evals] == [0, 1, 2, 3]
    assert [r["batch"] for r in MetricsHistory(tmp_path).rows("train")] == [0, 1, 2]

    # Resumed with a higher target: it continues at the next batch, evaluating only the new steps.
    resumed = await train_loop(
        model, rollout, SCENARIOS, score=score, val_scenarios=SCENARIOS[:2],
        config=settings.model_copy(update={"steps": 4, "eval_at_start": False}),
    )  # fmt: skip
    assert resumed.start_step == 3 and [r.batch for r in resumed.steps] == [3]
    assert [e.step for e in resumed.evals] == [4]


async def test_the_loop_stops_when_nothing_can_be_trained() -> None:
    async def never(groups: list[aa.TrajectoryGroup], scenarios: list[Any]) -> list[aa.TrajectoryGroup]:
        return groups  # no rewards: every group is unscored

    model = Model()
    result = await train_loop(model, Rollouts(), SCENARIOS, score=never, config=config(max_untrained=2))
    assert result.final_step == 0 and len(result.steps) == 2 and model.trained == []
    assert result.stopped is not None and "trained nothing" in result.stopped
    with pytest.raises(aa.ConfigError, match="train_scenarios is empty"):
        await train_loop(model, Rollouts(), [], score=never, config=config())
