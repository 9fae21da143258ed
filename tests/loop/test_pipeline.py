"""The pipelined loop (``LoopConfig.max_staleness``) on the backend app: streaming groups, bounded
staleness, dropped groups counted, crash safety.

The orchestration is the subject: the backend is the real app on the fake engine and trainer
(``fake_backend``), the task test_loop.py's "a + b" rewarded for brevity (a spread in every group).
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from art_adapters import ConfigError, TrainConfig, Trajectory
from art_adapters._batch_store import GroupStore
from art_adapters._loop import LoopConfig, train_loop
from art_adapters._runner import RunConfig
from art_adapters._scorers import verifiable_scorer
from art_adapters._trajectory import load_groups
from art_adapters.observe._metrics import MetricsHistory
from tests.helpers.fake_backend import FakeBackend
from tests.helpers.models import registered
from tests.helpers.observers import in_memory_observer
from tests.loop.test_loop import brevity, make_rollout, scenarios


class Interrupted(Exception):
    """Stands for a crash or Ctrl-C mid-pipeline."""


def pipelined(run_dir: Path | None, steps: int, **kw: Any) -> LoopConfig:
    settings: dict[str, Any] = {
        "steps": steps, "groups_per_step": 2, "rollouts_per_group": 4, "max_staleness": 1, "run_dir": run_dir,
        "progress": False, "eval_at_start": False, "run": RunConfig(max_concurrency=12, timeout_s=60),
        "train": TrainConfig(learning_rate=1e-4, lora_rank=4, lora_alpha=8, seed=0), **kw,
    }  # fmt: skip
    return LoopConfig(**settings)


def events(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "batches" / "pipeline" / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_max_staleness_is_a_count() -> None:
    assert LoopConfig(steps=1).max_staleness == 0
    for bad in (-1, True, 1.5):
        with pytest.raises(ValueError, match="max_staleness"):
            LoopConfig(steps=1, max_staleness=bad)


async def test_a_slow_group_that_falls_too_far_behind_is_dropped_and_counted(
    fake_backend: FakeBackend, tmp_path: Path
) -> None:
    model = await registered(fake_backend, "pipe-stale", "loop-tests")
    train = scenarios("p", 12)
    sample, release = make_rollout(model), asyncio.Event()
    slow_id: list[str] = []

    async def rollout(scenario: dict[str, Any]) -> Trajectory:
        if not slow_id:
            slow_id.append(scenario["id"])  # the first group started: sampled from step 0
        if scenario["id"] == slow_id[0]:
            await release.wait()  # held until the model is 2 steps past the checkpoint it sampled
        return await sample(scenario)

    reports: list[Any] = []

    def on_step(report: Any) -> None:
        reports.append(report)
        if report.step == 2:
            release.set()

    result = await train_loop(
        model, rollout, train, score=verifiable_scorer(brevity), config=pipelined(tmp_path, 5), on_step=on_step
    )
    assert result.final_step == 5 and result.stopped is None and all(r.trained for r in result.steps)
    assert all(r.metrics["staleness_max"] <= 1 for r in result.steps)
    assert sum(r.metrics["dropped_stale"] for r in result.steps) >= 1  # the slow group, 2+ steps behind
    assert slow_id[0] not in [s for r in result.steps for s in r.scenario_ids]
    rows = MetricsHistory(tmp_path).rows("train")
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5]
    assert all({"staleness_mean", "staleness_max", "dropped_stale", "zero_variance_groups"} <= r.keys() for r in rows)
    dropped = [e for e in events(tmp_path) if e["event"] == "dropped"]
    assert dropped and all(e["step"] >= 2 for e in dropped)
    trained = [k for e in events(tmp_path) if e["event"] == "trained" for k in e["keys"]]
    assert len(trained) == len(set(trained)) == 10  # 5 steps x 2 groups, none twice


async def test_rollouts_sample_the_newest_checkpoint_and_keep_its_exact_name(
    fake_backend: FakeBackend, tmp_path: Path
) -> None:
    model = await registered(fake_backend, "pipe-version", "loop-tests")
    result = await train_loop(
        model, make_rollout(model, keep_model=True), scenarios("v", 8), score=verifiable_scorer(brevity),
        config=pipelined(tmp_path, 3, max_staleness=2),
    )  # fmt: skip
    assert result.final_step == 3
    folder = tmp_path / "batches" / "pipeline"
    stored = [g for p in sorted(folder.glob("group-*.scored.jsonl")) for g in load_groups(p)]
    versions = {t.messages[-1].model for g in stored for t in g.trajectories}
    # the rollouts asked for "pipe-version"; each turn records the checkpoint that answered it
    assert versions and all(v is not None and v.startswith("pipe-version@") for v in versions)
    assert {g.metadata["loop_step"] for g in stored} == {int(v.split("@")[1]) for v in versions}
    assert max(g.metadata["loop_step"] for g in stored) >= 1  # later groups sampled newer checkpoints
    assert all(r.metrics["staleness_max"] <= 2 for r in result.steps)


async def test_a_crash_mid_pipeline_keeps_sampled_groups_and_the_restart_trains_or_drops_them(
    fake_backend: FakeBackend, tmp_path: Path
) -> None:
    model = await registered(fake_backend, "pipe-crash", "loop-tests")
    train, sample = scenarios("c", 12), make_rollout(model)
    rolled: list[str] = []

    async def rollout(scenario: dict[str, Any]) -> Trajectory:
        rolled.append(scenario["id"])
        return await sample(scenario)

    def crash_after_two(report: Any) -> None:
        if report.step == 2:
            raise Interrupted

    with pytest.raises(Interrupted):
        await train_loop(
            model, rollout, train, score=verifiable_scorer(brevity), config=pipelined(tmp_path, 5),
            on_step=crash_after_two,
        )  # fmt: skip
    assert await model.get_step() == 2
    first_trained = {k for e in events(tmp_path) if e["event"] == "trained" for k in e["keys"]}
    pending = GroupStore(tmp_path).pending(2)
    assert pending, "groups sampled ahead of training are kept on disk"
    stale = [p.key for p in pending if 2 - p.sampled_step > 1]
    fresh = [p.key for p in pending if 2 - p.sampled_step <= 1]
    rolled_before = len(rolled)

    reports: list[Any] = []
    result = await train_loop(
        model, rollout, train, score=verifiable_scorer(brevity), config=pipelined(tmp_path, 4), on_step=reports.append
    )
    assert result.start_step == 2 and result.final_step == 4
    assert reports[0].metrics["dropped_stale"] >= len(stale)
    log = events(tmp_path)
    dropped = {k for e in log if e["event"] == "dropped" for k in e["keys"]}
    assert set(stale) <= dropped
    second_trained = [k for e in log if e["event"] == "trained" and e["step"] >= 2 for k in e["keys"]]
    assert not first_trained & set(second_trained) and len(second_trained) == len(set(second_trained)) == 4
    # the fresh stored groups that were already scored go first, without being rolled out again
    ready = sorted((p.sampled_step, p.key) for p in pending if p.key in fresh and p.scored)
    first_step = next(e["keys"] for e in log if e["event"] == "training" and e["step"] == 2)
    if len(ready) >= 2:
        assert first_step == [key for _, key in ready[:2]]
    stored_ids = {p.group.metadata["scenario_id"] for p in pending if p.scored}
    assert all(rolled.count(i) == rolled[:rolled_before].count(i) for i in stored_ids - set(rolled[rolled_before:]))


def test_a_training_step_that_landed_before_the_crash_closes_its_groups(tmp_path: Path) -> None:
    from tests.loop.test_loop_steps import scored

    store = GroupStore(tmp_path)
    for position in range(3):
        store.save(GroupStore.key(0, position), scored(0.1, 0.9, scenario=f"s{position}"), 0, scored=True)
    store.mark("training", [GroupStore.key(0, 0), GroupStore.key(0, 1)], 0)
    # the backend did not get there: the step is redone with the same groups
    assert [p.key for p in store.pending(0)] == ["000000-00", "000000-01", "000000-02"]
    # the backend reached step 1: the step landed, its groups are trained, not trained again
    assert [p.key for p in store.pending(1)] == ["000000-02"]
    assert events(tmp_path)[-1] == {"event": "trained", "keys": ["000000-00", "000000-01"], "step": 0}
    assert store.last_position() == (0, 2)


async def test_a_scorer_error_in_the_pipeline_stops_the_loop(fake_backend: FakeBackend, tmp_path: Path) -> None:
    model = await registered(fake_backend, "pipe-scorer", "loop-tests")

    async def drops_one(groups: list[Any], scenarios: list[Any]) -> list[Any]:
        return []

    with pytest.raises(ConfigError, match="returned 0 groups for 1"):
        await train_loop(model, make_rollout(model), scenarios("e", 4), score=drops_one, config=pipelined(tmp_path, 1))
    assert await model.get_step() == 0


async def test_groups_without_a_reward_spread_never_count_and_the_loop_gives_up(
    fake_backend: FakeBackend, tmp_path: Path
) -> None:
    model = await registered(fake_backend, "pipe-flat", "loop-tests")
    result = await train_loop(
        model, make_rollout(model), scenarios("f", 4), score=verifiable_scorer(lambda t, s: 1.0),
        config=pipelined(tmp_path, 2, max_untrained=2),
    )  # fmt: skip
    assert result.final_step == 0 and result.steps == []
    assert result.stopped is not None and "groups in a row could not be trained on" in result.stopped
    assert int(result.stopped.split()[0]) >= 4  # max_untrained x groups_per_step; more may land at once
    assert await model.get_step() == 0
    skipped = [k for e in events(tmp_path) if e["event"] == "skipped" for k in e["keys"]]
    assert len(skipped) >= 4


def test_demo_and_train_mcp_take_max_staleness() -> None:
    import typer
    from typer.testing import CliRunner

    from art_adapters.apps import DemoConfig, app, default_demo_loop
    from art_adapters.apps._cli import TRAIN_MCP_OPTIONS
    from art_adapters.apps._demo import _loop_config
    from art_adapters.apps._options import build_config
    from art_adapters.apps._train_mcp import TrainMcpConfig

    assert _loop_config(DemoConfig(loop=default_demo_loop(max_staleness=2)), start=0).max_staleness == 2
    assert _loop_config(DemoConfig(), start=0).max_staleness == 0
    options = {"server": "x", "max_staleness": 1, "tools": None}
    assert build_config(TrainMcpConfig, options, TRAIN_MCP_OPTIONS).loop.max_staleness == 1
    commands = typer.main.get_command(app).commands
    for command in ("demo", "train-mcp"):
        (param,) = [p for p in commands[command].params if p.name == "max_staleness"]
        assert param.opts == ["--max-staleness"] and param.default == 0 and "k steps" in (param.help or "")
    result = CliRunner().invoke(app, ["demo", "--max-staleness", "-1"])
    assert result.exit_code != 0 and "max_staleness" in result.output


async def test_live_traces_show_each_rollouts_policy_version_and_staleness(
    fake_backend: FakeBackend, tmp_path: Path
) -> None:
    model = await registered(fake_backend, "pipe-traced", "loop-tests")
    observer, exporter = in_memory_observer("pipe-traced")
    result = await train_loop(
        model, make_rollout(model, keep_model=True), scenarios("o", 8), score=verifiable_scorer(brevity),
        config=pipelined(tmp_path, 3), observer=observer,
    )  # fmt: skip
    observer.force_flush(10)
    rollouts = [dict(s.attributes or {}) for s in exporter.get_finished_spans() if s.name.startswith("rollout ")]
    trained = [a for a in rollouts if a.get("art_adapters.pipeline") == "trained"]
    assert len(trained) == 3 * 2 * 4  # every rollout of every trained group, labelled
    for a in rollouts:
        assert a["art_adapters.policy.version"] == f"pipe-traced@{a['art_adapters.step']}"  # when it started
    for a in trained:
        # the exact checkpoint: the one current at launch, or a newer one that was already served
        # when the rollout's request reached the backend (a step finishing at that moment)
        name, _, version = a["art_adapters.policy_version"].partition("@")
        assert name == "pipe-traced" and int(version) >= a["art_adapters.step"]
        assert 0 <= a["art_adapters.staleness"] <= 1 and a["langfuse.trace.metadata.staleness"] == a["art_adapters.staleness"]
    staleness = sorted(a["art_adapters.staleness"] for a in trained)
    means = [r.metrics["staleness_mean"] for r in result.steps]
    assert sum(staleness) / len(staleness) == pytest.approx(sum(means) / len(means))


def test_rollout_budget_is_checked() -> None:
    assert LoopConfig(steps=1).rollout_budget is None
    assert LoopConfig(steps=1, max_staleness=1, rollout_budget=8).rollout_budget == 8
    with pytest.raises(ValueError, match="set max_staleness >= 1 with it"):
        LoopConfig(steps=1, rollout_budget=8)
    with pytest.raises(ValueError, match="less than one group"):
        LoopConfig(steps=1, max_staleness=1, rollouts_per_group=4, rollout_budget=3)
    for bad in (0, -4, 1.5):
        with pytest.raises(ValueError, match="rollout_budget"):
            LoopConfig(steps=1, max_staleness=1, rollout_budget=bad)


async def test_the_rollout_budget_caps_sampling_and_a_short_last_step_trains_what_is_left(
    fake_backend: FakeBackend, tmp_path: Path
) -> None:
    model = await registered(fake_backend, "pipe-budget", "loop-tests")
    sample, rolled = make_rollout(model), []

    async def rollout(scenario: dict[str, Any]) -> Trajectory:
        rolled.append(scenario["id"])
        return await sample(scenario)

    # 5 groups of 4: two full steps of 2 groups, then one group; k=2 keeps all 5 fresh enough
    config = pipelined(tmp_path, 5, max_staleness=2, rollout_budget=20)
    result = await train_loop(model, rollout, scenarios("b", 12), score=verifiable_scorer(brevity), config=config)
    assert len(rolled) == 20
    assert [len(r.scenario_ids) for r in result.steps] == [2, 2, 1] and all(r.trained for r in result.steps)
    assert result.final_step == 3 == await model.get_step()
    assert result.stopped is not None and "rollout budget (20 rollouts" in result.stopped
    assert sum(r.metrics["dropped_stale"] for r in result.steps) == 0


async def test_tool_and_judge_waits_overlap_at_the_same_rollout_budget(
    fake_backend: FakeBackend, tmp_path: Path
) -> None:
    """Latency-bound rollouts (a 0.2-0.9 s tool wait) and a 0.4 s judge per scoring call: the sequential
    loop waits for each in turn, the pipelined one judges groups while others roll out, on the
    same number of rollouts."""
    sample = {}
    clock: dict[str, list[tuple[float, float]]] = {"rollout": [], "judge": []}

    def timed(kind: str, work: Any) -> Any:
        async def run(*args: Any) -> Any:
            start = time.monotonic()
            try:
                return await work(*args)
            finally:
                clock[kind].append((start, time.monotonic()))

        return run

    async def judge(groups: list[Any], scenarios: list[Any]) -> list[Any]:
        await asyncio.sleep(0.4)  # a remote judge; every group gets a spread: none is left out
        for group in groups:
            for rank, trajectory in enumerate(group.trajectories):
                trajectory.reward = float(rank)
        return groups

    walls, counts = {}, {}
    for k in (0, 2):
        model = await registered(fake_backend, f"pipe-overlap-{k}", "loop-tests")
        sample[k] = make_rollout(model)

        async def rollout(scenario: dict[str, Any], k: int = k) -> Trajectory:
            # a tool call of 0.2-0.9 s: groups end at different times, so while the first ones are
            # judged later ones still roll out (a load-proof overlap, not a race at a step's edge)
            await asyncio.sleep(0.2 + 0.1 * (int(scenario["id"][1:]) % 8))
            return await sample[k](scenario)

        clock["rollout"].clear()
        clock["judge"].clear()
        budget = {"rollout_budget": 4 * 2 * 2} if k else {}
        config = pipelined(tmp_path / str(k), 4, rollouts_per_group=2, max_staleness=k, **budget)
        start = time.monotonic()
        result = await train_loop(
            model, timed("rollout", rollout), scenarios("w", 16), score=timed("judge", judge), config=config
        )
        walls[k], counts[k] = time.monotonic() - start, len(clock["rollout"])
        # at most groups_per_step x (k + 1) groups ahead, one step's fewer while a step trains: none
        # goes stale when nothing holds the queue back (it did when refills during a step counted fully)
        assert result.final_step == 4 and result.stopped is None, result.stopped
        assert all(r.metrics.get("dropped_stale", 0) == 0 for r in result.steps)
        overlapped = [j for j in clock["judge"] if any(r[0] < j[1] and r[1] > j[0] for r in clock["rollout"])]
        assert bool(overlapped) == bool(k), f"judge calls overlapping rollouts with max_staleness={k}: {overlapped}"
    assert counts[2] == counts[0] == 16
    # the wall-clock gain is measured by bench/pipeline.py, not asserted here (a loaded machine)
    print(f"sequential {walls[0]:.1f} s, max_staleness=2 {walls[2]:.1f} s")
