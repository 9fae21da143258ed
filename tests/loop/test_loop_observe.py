"""train_loop observes itself with no code: live rollout traces with step, split and policy version,
the scores on them, a train-step trace per step, and one row per step and split for the trackers.

The backend is the real app on the fake engine and trainer (``fake_backend``); the observer exports
through the real OpenTelemetry SDK to an in-memory exporter; the tracker is a recording one passed
through the documented ``Observer(trackers=...)`` / ``trackers_from_env`` seam (the W&B and Trackio
trackers themselves are tested offline in tests/observe/test_trackers.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from art_adapters._loop import train_loop
from art_adapters._scorers import verifiable_scorer
from art_adapters.observe import ObserveConfig, Observer
from tests.helpers.fake_backend import FakeBackend
from tests.helpers.models import registered
from tests.helpers.observers import in_memory_observer
from tests.loop.test_loop import brevity, loop_config, make_rollout, scenarios


async def test_every_rollout_of_the_run_is_one_scored_trace_labelled_with_its_step(
    fake_backend: FakeBackend, tmp_path: Path
) -> None:
    model = await registered(fake_backend, "loop-traced", "loop-tests")
    observer, exporter = in_memory_observer("traced")
    result = await train_loop(
        model, make_rollout(model), scenarios("t", 4), score=verifiable_scorer(brevity),
        val_scenarios=scenarios("v", 2), config=loop_config(tmp_path / "run", steps=2, eval_every=0),
        observer=observer,
    )  # fmt: skip
    observer.force_flush(10)
    spans = list(exporter.get_finished_spans())
    rollouts = [s for s in spans if s.name.startswith("rollout ")]
    attrs = [dict(s.attributes or {}) for s in rollouts]
    # 2 steps x 2 groups x 6 rollouts for training, 2 evaluations x 2 scenarios x 2 rollouts
    by_split_step: dict[tuple[Any, Any], int] = {}
    for a in attrs:
        key = (a["art_adapters.split"], a["art_adapters.step"])
        by_split_step[key] = by_split_step.get(key, 0) + 1
    assert by_split_step == {("train", 0): 12, ("train", 1): 12, ("val", 0): 4, ("val", 2): 4}
    assert len({s.context.trace_id for s in rollouts}) == len(rollouts) == 32
    for a in attrs:
        assert a["art_adapters.policy.version"] == f"loop-traced@{a['art_adapters.step']}"
        assert isinstance(a["art_adapters.reward"], float)  # scored, then ended
        assert f"step:{a['art_adapters.step']}" in a["langfuse.trace.tags"]
    for s in rollouts:
        scores = [c for c in spans if c.context.trace_id == s.context.trace_id and c.name == "score reward"]
        assert len(scores) == 1 and scores[0].parent is not None
        assert scores[0].parent.span_id == s.context.span_id
    steps = sorted(s.name for s in spans if s.name.startswith("train_step"))
    assert steps == ["train_step 1", "train_step 2"]
    assert result.where == []  # an exporter of one's own: no configured destination to name
    assert observer.end_open_rollouts() == 0  # nothing left open


async def test_trackers_get_one_row_per_step_and_split(fake_backend: FakeBackend, tmp_path: Path) -> None:
    class Recording:
        name = "recording"
        where = "in this test"

        def __init__(self) -> None:
            self.rows: list[tuple[int, str, dict[str, Any]]] = []
            self.finished = 0

        def log(self, step: int, row: Any, *, split: str = "train") -> None:
            self.rows.append((step, split, dict(row)))

        def finish(self) -> None:
            self.finished += 1

    from art_adapters._loop_telemetry import LoopTelemetry

    model = await registered(fake_backend, "loop-tracked", "loop-tests")
    tracker = Recording()
    telemetry = LoopTelemetry(observer=Observer(ObserveConfig()), trackers=[tracker], model_name=model.name)
    config = loop_config(tmp_path / "run", steps=2, eval_every=1)
    from art_adapters._loop import evaluate, record_step, scored_groups, train_step

    # the loop's own steps with this telemetry (what train_loop does with the trackers it starts)
    val, train = scenarios("v", 1), scenarios("t", 2)
    rollout, score = make_rollout(model), verifiable_scorer(brevity)
    await evaluate(model, rollout, val, score, config, telemetry)
    groups = await scored_groups(rollout, score, train, batch=0, step=0, config=config, telemetry=telemetry)
    report = await train_step(model, groups, train, batch=0, step=0, config=config)
    record_step(config, report, groups, telemetry)
    telemetry.close()
    assert [(step, split) for step, split, _ in tracker.rows] == [(0, "val"), (1, "train")]
    assert tracker.rows[1][2]["reward_mean"] == report.reward_mean
    assert "loss" in tracker.rows[1][2] and tracker.finished == 1
