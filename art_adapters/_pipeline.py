"""The pipelined loop (``LoopConfig.max_staleness >= 1``): rollouts, judging and training overlap.

:class:`Pipeline` keeps rollouts running up to ``run.max_concurrency``, scores each group as soon as
its rollouts end, and hands :func:`~art_adapters.train_loop` each step's groups: the oldest
``groups_per_step`` scored groups with a reward spread, none more than ``max_staleness`` steps behind.
With a run directory every group is kept on disk (:class:`~art_adapters._batch_store.GroupStore`).
"""

from __future__ import annotations

import asyncio
import logging
import statistics
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._batch_store import GroupStore
from ._loop_config import LoopConfig
from ._loop_telemetry import LoopTelemetry
from ._runner import RolloutFn, RunProgress, run_groups
from ._scorers import has_spread, unscored_reason
from ._trajectory import TrajectoryGroup

__all__ = ["Pipeline", "ScoreFn", "StepGroups", "sampled_step"]

logger = logging.getLogger(__name__)

#: ``score(groups, scenarios) -> groups``: the loop's scorer, checked to return every group.
ScoreFn = Callable[[list[TrajectoryGroup], list[Any]], Awaitable[list[TrajectoryGroup]]]


@dataclass
class _Sampled:
    """One group on its way through the pipeline."""

    key: str
    batch: int
    scenario: Any
    step: int  # the checkpoint its rollouts sampled from
    group: TrajectoryGroup


@dataclass
class StepGroups:
    """What one pipelined step trains on, and what happened to the groups since the last step.

    Attributes:
        groups: the groups to train on (scored, with a reward spread, fresh enough).
        scenarios: their scenarios, in the same order.
        keys: their keys in the group store.
        batch: the newest batch they come from (the step row's ``batch``).
        left_out: groups finished since the last step and not trained: no reward spread or
            unscorable (their rewards still count in the step's statistics).
        unscored: ``{"group", "scenario_id", "reason"}`` for the unscorable ones.
        metrics: ``staleness_mean``, ``staleness_max``, ``dropped_stale`` (groups),
            ``dropped_stale_samples`` (their rollouts), ``zero_variance_groups``, ``groups_in_flight``.
    """

    groups: list[TrajectoryGroup]
    scenarios: list[Any]
    keys: list[str]
    batch: int
    left_out: list[TrajectoryGroup] = field(default_factory=list)
    unscored: list[dict[str, Any]] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)


def sampled_step(group: TrajectoryGroup, policy: str, started_at: int) -> int:
    """The oldest checkpoint of ``policy`` that sampled a turn of ``group``: the backend names the
    answering checkpoint ``policy@N`` in each response; ``started_at`` (the newest step when the
    rollouts started) where no turn names one."""
    steps = []
    for trajectory in group.trajectories:
        for message in trajectory.messages:
            name, at, number = (message.model or "").partition("@")
            if at and name == policy and number.isdigit():
                steps.append(int(number))
    return min(steps) if steps else started_at


class Pipeline:
    """Rollouts and scoring running in the background of :func:`~art_adapters.train_loop`.

    ``groups_per_step x rollouts_per_group`` rollouts never run at once beyond
    ``run.max_concurrency``: each group runs its ``rollouts_per_group`` rollouts together, and at
    most ``max(1, max_concurrency // rollouts_per_group)`` groups run at a time. At most
    ``groups_per_step x (max_staleness + 1)`` groups are sampled ahead of training (one step's
    fewer while a step trains: what starts then samples the checkpoint being replaced), the most
    the next ``max_staleness + 1`` steps can take, so a group is dropped only when a slower one
    holds it back. With ``rollout_budget`` no group starts once the budget cannot pay
    for all its rollouts. The scenario stream is the sequential loop's (``batch_of(i)`` is batch
    ``i``), so both see the same scenarios in the same order.

    Args:
        rollout: the sampling rollout.
        score: scores groups (see :data:`ScoreFn`).
        batch_of: the scenarios of batch ``i``.
        config: the loop's settings.
        step: the model's step now.
        batch: the first batch to sample (resumed runs: after the last one stored).
        telemetry: traces and rows; its ``model_name`` is the policy's served name (its checkpoints
            answer as ``model_name@N``).
        progress: receives each group's :class:`~art_adapters.RunProgress`, or ``None``.
    """

    def __init__(
        self,
        rollout: RolloutFn,
        score: ScoreFn,
        batch_of: Callable[[int], Sequence[Any]],
        *,
        config: LoopConfig,
        step: int,
        batch: int,
        telemetry: LoopTelemetry,
        progress: Callable[[RunProgress], None] | None = None,
    ) -> None:
        self._rollout, self._score, self._batch_of = rollout, score, batch_of
        self._config, self._step, self._telemetry, self._progress = config, step, telemetry, progress
        self._policy = telemetry.model_name
        size = config.rollouts_per_group
        self._run = config.run.model_copy(update={"max_concurrency": min(size, config.run.max_concurrency)})
        self._slots = max(1, config.run.max_concurrency // size)
        self._ahead = config.groups_per_step * (config.max_staleness + 1)
        self._stepping = False  # a step's groups are taken and it trains: what starts now is a step older
        self._budget = config.rollout_budget  # rollouts this pipeline may still start (None: no cap)
        self._store = GroupStore(config.run_dir) if config.run_dir is not None else None
        self._next = (batch, 0)
        self._tasks: set[asyncio.Task[None]] = set()
        self._ready: list[_Sampled] = []
        self._taken: list[_Sampled] = []
        self._left_out: list[TrajectoryGroup] = []
        self._unscored: list[dict[str, Any]] = []
        self._dropped: list[_Sampled] = []
        self._zero_variance = 0
        self._barren = 0  # groups in a row that could not be trained on
        self._error: BaseException | None = None
        self._wake = asyncio.Event()
        self._closing = False

    async def start(self) -> None:
        """Take back the groups a previous run stored but never trained (dropping the stale ones),
        then start rolling out."""
        if self._store is not None:
            pending = self._store.pending(self._step)
            last = self._store.last_position()
            if last is not None:
                self._next = max(self._next, (last[0], last[1] + 1))
            for stored in pending:
                batch, index = (int(part) for part in stored.key.split("-"))
                scenario = self._batch_of(batch)[index]
                item = _Sampled(stored.key, batch, scenario, stored.sampled_step, stored.group)
                if self._step - stored.sampled_step > self._config.max_staleness:
                    self._drop(item)
                elif stored.scored:
                    self._arrived(item)
                else:
                    self._launch(item, rolled_out=True)
            if pending:
                logger.info("pipeline: took back %d stored group(s) not yet trained", len(pending))
        self._fill()

    def _position(self) -> tuple[int, Any]:
        batch, index = self._next
        scenarios = self._batch_of(batch)
        if index >= len(scenarios):
            batch, index = batch + 1, 0
            scenarios = self._batch_of(batch)
        self._next = (batch, index + 1)
        return batch, (index, scenarios[index])

    def _fill(self) -> None:
        while (
            not self._closing
            and self._error is None
            and len(self._tasks) < self._slots
            and len(self._tasks) + len(self._ready) < self._window()
            and (self._budget is None or self._budget >= self._config.rollouts_per_group)
        ):
            if self._budget is not None:
                self._budget -= self._config.rollouts_per_group
            batch, (index, scenario) = self._position()
            key = GroupStore.key(batch, index)
            self._launch(_Sampled(key, batch, scenario, self._step, TrajectoryGroup()), rolled_out=False)

    def _window(self) -> int:
        """Groups that may be running or ready: the next ``max_staleness + 1`` steps' worth; one
        step's fewer while a step trains (what starts now samples the checkpoint it replaces)."""
        return self._ahead - self._config.groups_per_step * self._stepping

    def _launch(self, item: _Sampled, *, rolled_out: bool) -> None:
        task = asyncio.create_task(self._run_group(item, rolled_out), name=f"pipeline-group:{item.key}")
        self._tasks.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None and self._error is None:
            self._error = exc
        self._wake.set()
        self._fill()

    async def _run_group(self, item: _Sampled, rolled_out: bool) -> None:
        if not rolled_out:
            (group,) = await run_groups(
                self._rollout, [item.scenario], n=self._config.rollouts_per_group, config=self._run,
                progress=self._progress or False, tracing=self._telemetry.tracing(item.step, "train"),
            )  # fmt: skip
            item.step = sampled_step(group, self._policy, item.step)
            group.metadata["loop_batch"] = item.batch
            item.group = group
            if self._store is not None:
                self._store.save(item.key, group, item.step, scored=False)
        (item.group,) = await self._score([item.group], [item.scenario])
        if self._store is not None:
            self._store.save(item.key, item.group, item.step, scored=True)
        self._arrived(item)

    def _arrived(self, item: _Sampled) -> None:
        reason = unscored_reason(item.group)
        if reason is None and has_spread(item.group):
            self._ready.append(item)
            self._barren = 0
            return
        self._barren += 1
        self._left_out.append(item.group)
        if reason is not None:
            scenario = item.group.metadata.get("scenario_id")
            self._unscored.append({"group": item.group.id, "scenario_id": scenario, "reason": reason})
            logger.warning("group %s (%s) not trained on: %s", item.key, scenario, reason)
        else:
            self._zero_variance += 1
        self._close([item], "skipped", self._step)

    def _drop(self, item: _Sampled) -> None:
        logger.info(
            "dropping group %s: sampled from step %d, %d steps behind step %d (max_staleness=%d)",
            item.key, item.step, self._step - item.step, self._step, self._config.max_staleness,
        )  # fmt: skip
        self._dropped.append(item)
        self._close([item], "dropped", self._step)

    def _close(self, items: list[_Sampled], event: str, step: int) -> None:
        """Label the items' rollouts (policy version, staleness, fate), send their scores to the
        traces and record the event in the store."""
        verdict = {"dropped": "dropped_stale"}.get(event, event)
        for item in items:
            for trajectory in item.group.trajectories:
                trajectory.metadata.update(
                    policy_version=f"{self._policy}@{item.step}", staleness=step - item.step, pipeline=verdict
                )
            self._telemetry.scored([item.group], step=item.step, split="train")
        if self._store is not None:
            self._store.mark(event, [i.key for i in items], step)

    def _drop_stale(self) -> None:
        fresh = []
        for item in self._ready:
            if self._step - item.step > self._config.max_staleness:
                self._drop(item)
            else:
                fresh.append(item)
        self._ready = fresh

    async def next_step(self, step: int) -> StepGroups | str:
        """The groups of the step from ``step``, once ready; or why the loop must stop: too many
        groups in a row (``max_untrained x groups_per_step``) had no reward spread or no scores.

        Raises:
            RolloutBudgetError, ConfigError: what a group's rollouts or scoring raised.
        """
        self._step = step
        size = self._config.groups_per_step
        while True:
            if self._error is not None:
                raise self._error
            self._drop_stale()
            if len(self._ready) >= size:
                return self._take(size)
            if self._spent():
                if self._ready:
                    return self._take(len(self._ready))
                dropped = len(self._dropped)
                dropped_text = f"; {dropped} group(s) dropped as stale since the last step" if dropped else ""
                return (
                    f"the rollout budget ({self._config.rollout_budget} rollouts, LoopConfig.rollout_budget) "
                    f"is spent and no scored group with a reward spread is left to train on{dropped_text}"
                )
            if self._barren >= self._config.max_untrained * size:
                return (
                    f"{self._barren} groups in a row could not be trained on (no reward spread, or unscored); "
                    "check the scorer and the rewards' spread (a group whose rollouts all score the same "
                    "carries no signal)"
                )
            self._fill()
            self._wake.clear()
            await self._wake.wait()

    def _spent(self) -> bool:
        """Whether no more groups can arrive: the budget is spent and none is running."""
        return (
            self._budget is not None and self._budget < self._config.rollouts_per_group and not self._tasks
        )

    def _take(self, size: int) -> StepGroups:
        self._ready.sort(key=lambda item: (item.step, item.key))
        taken, self._ready = self._ready[:size], self._ready[size:]
        staleness = [self._step - item.step for item in taken]
        dropped = self._dropped
        metrics = {
            "staleness_mean": statistics.fmean(staleness),
            "staleness_max": max(staleness),
            "dropped_stale": len(dropped),
            "dropped_stale_samples": sum(len(i.group.trajectories) for i in dropped),
            "zero_variance_groups": self._zero_variance,
            "groups_in_flight": len(self._tasks),
        }
        out = StepGroups(
            groups=[i.group for i in taken], scenarios=[i.scenario for i in taken], keys=[i.key for i in taken],
            batch=max(i.batch for i in taken), left_out=self._left_out, unscored=self._unscored, metrics=metrics,
        )  # fmt: skip
        self._left_out, self._unscored, self._dropped, self._zero_variance = [], [], [], 0
        self._taken, self._stepping = taken, True
        return out

    def training(self, groups: StepGroups) -> None:
        """Note on disk that a step on ``groups`` is about to be sent (see :class:`GroupStore`)."""
        if self._store is not None:
            self._store.mark("training", groups.keys, self._step)

    def trained(self, groups: StepGroups, new_step: int, trained: bool) -> None:
        """The step on ``groups`` is done: new rollouts sample from ``new_step``; the groups' traces
        get their staleness (or, when nothing was trained, are closed as skipped)."""
        items = [i for i in self._taken if i.key in set(groups.keys)]
        self._close(items, "trained" if trained else "skipped", self._step)
        self._step, self._stepping = new_step, False
        self._fill()

    async def close(self) -> None:
        """Stop: cancel the rollouts still running (groups already stored stay pending on disk)."""
        self._closing = True
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
