"""Dynamic sampling (``LoopConfig.dynamic_sampling``, DAPO) in the sequential loop: a step whose groups
scored alike draws further batches until it has ``groups_per_step`` groups with a reward spread.

The loop runs on the backend app over the fake engine and trainer (``fake_backend``: real routes, token
records, checkpoints); the rollout is test_loop's ("What is a + b?" in at most 4 sampled tokens).
Scenarios named ``flat*`` score 1.0 whatever the reply (no spread); the others are rewarded for brevity.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from art_adapters import Trajectory
from art_adapters._dynamic_sampling import fill_batch
from art_adapters._loop import next_batch, train_loop
from art_adapters._scorers import has_spread, verifiable_scorer
from art_adapters._trajectory import Message, TrajectoryGroup
from art_adapters.observe._metrics import MetricsHistory
from tests.helpers.fake_backend import FakeBackend
from tests.helpers.models import registered
from tests.loop.test_loop import loop_config, make_rollout


def flat_or_brief(trajectory: Trajectory, scenario: dict[str, Any]) -> float:
    if scenario["id"].startswith("flat"):
        return 1.0
    return 1.0 / (1.0 + len((trajectory.messages[-1].content or "").strip()))


def mixed(n_flat: int, n_varied: int) -> list[dict[str, Any]]:
    flat = [{"id": f"flat{i}", "a": 2 + i, "b": 5} for i in range(n_flat)]
    varied = [{"id": f"var{i}", "a": 30 + i, "b": 41 + i} for i in range(n_varied)]
    return flat + varied


async def test_a_step_whose_groups_scored_alike_draws_fresh_scenarios_until_it_has_signal(
    fake_backend: FakeBackend, tmp_path: Path
) -> None:
    model = await registered(fake_backend, "loop-dynamic", "loop-tests")
    train = mixed(4, 4)
    first = [s["id"] for s in next_batch(train, 0, 2, seed=0)]
    seen_ids = [s["id"] for b in range(4) for s in next_batch(train, b, 2, seed=0)]
    result = await train_loop(
        model, make_rollout(model), train, score=verifiable_scorer(flat_or_brief),
        config=loop_config(tmp_path, steps=1, dynamic_sampling=3),
    )  # fmt: skip
    (report,) = result.steps
    assert report.trained and result.final_step == 1
    assert len(report.scenario_ids) == 2 and not any(i.startswith("flat") for i in report.scenario_ids), report
    drawn = report.metrics["dynamic_batches"]
    assert 0 <= drawn <= 3 and report.batch == drawn
    assert report.metrics["signal_groups"] >= 2
    assert report.metrics["zero_variance_groups"] == sum(i.startswith("flat") for i in seen_ids[: 2 * (drawn + 1)])
    if any(i.startswith("flat") for i in first):  # this seed's first batch has a flat group: a batch was drawn
        assert drawn >= 1
    (row,) = MetricsHistory(tmp_path).rows("train")
    assert row["dynamic_batches"] == drawn and row["signal_groups"] == report.metrics["signal_groups"]
    # the next iteration continues after the last batch drawn
    more = await train_loop(
        model, make_rollout(model), train, score=verifiable_scorer(flat_or_brief),
        config=loop_config(tmp_path, steps=2, dynamic_sampling=3, eval_at_start=False),
    )  # fmt: skip
    assert more.steps[0].batch >= drawn + 1


async def test_dynamic_sampling_stops_at_its_budget_and_the_step_says_why_it_trained_nothing(
    fake_backend: FakeBackend, tmp_path: Path
) -> None:
    model = await registered(fake_backend, "loop-dynamic-flat", "loop-tests")
    result = await train_loop(
        model, make_rollout(model), mixed(6, 0), score=verifiable_scorer(flat_or_brief),
        config=loop_config(tmp_path, steps=1, dynamic_sampling=2, max_untrained=1),
    )  # fmt: skip
    (report,) = result.steps
    assert not report.trained and "zero variance" in (report.reason or ""), report
    assert report.metrics["dynamic_batches"] == 2 and report.metrics["zero_variance_groups"] == 6
    assert report.batch == 2 and result.stopped is not None
    assert await model.get_step() == 0


def group(rewards: list[float | None], name: str) -> TrajectoryGroup:
    trajectories = [
        Trajectory(messages=[Message(role="user", content=name)], reward=r) for r in rewards
    ]
    return TrajectoryGroup(trajectories=trajectories, metadata={"scenario_id": name})


async def test_fill_batch_keeps_groups_per_step_groups_with_spread_and_the_unscorable_ones() -> None:
    draws: list[int] = []

    async def draw(batch: int) -> tuple[list[TrajectoryGroup], list[Any]]:
        draws.append(batch)
        return [group([0.0, 1.0], f"b{batch}a"), group([0.5, 0.0], f"b{batch}b")], [f"b{batch}a", f"b{batch}b"]

    first = [group([1.0, 1.0], "alike"), group([None, 1.0], "unscored")]
    filled = await fill_batch(first, ["alike", "unscored"], draw=draw, batch=5, groups_per_step=3, max_extra=4)
    assert draws == [6, 7] and filled.batch == 7
    assert filled.scenarios == ["b6a", "b6b", "b7a", "unscored"]
    assert filled.metrics == {"dynamic_batches": 2, "zero_variance_groups": 1, "signal_groups": 4}
    assert len(filled.seen) == 6
    assert not has_spread(first[0]) and has_spread(filled.groups[0])
    # off: the groups as they came, nothing drawn
    off = await fill_batch(first, ["alike", "unscored"], draw=draw, batch=5, groups_per_step=3, max_extra=0)
    assert off.groups == first and off.batch == 5 and draws == [6, 7] and off.metrics == {}
