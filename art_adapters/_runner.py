"""The group runner: run every scenario N times, concurrently, and collect one group per scenario.

Rollouts are the slow and failure-prone part of RL on an agent: :func:`run_groups` runs them under
one :class:`RunConfig` (concurrency, timeout, retries, failure budget) and keeps a failed rollout as
data on its group instead of losing the batch; :func:`run_groups_sync` is its blocking shell.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import hashlib
import json
import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ._config import Count, PositiveCount, resolve_config
from ._errors import ConfigError, RolloutBudgetError
from ._gather import gather_or_cancel
from ._rollout_slot import AttemptFn, RolloutFn, RolloutSlot, attempt_rollout
from ._run_progress import ProgressDisplay, RunProgress
from ._trajectory import RolloutFailure, Trajectory, TrajectoryGroup, new_id
from .observe import RolloutTracing
from .observe._spans import RolloutContext

if TYPE_CHECKING:
    from .observe import Observer

__all__ = [
    "RolloutFn",
    "RunConfig",
    "RunProgress",
    "run_groups",
    "run_groups_sync",
    "scenario_id",
]

logger = logging.getLogger(__name__)


class RunConfig(BaseModel):
    """Settings of :func:`run_groups`: concurrency, timeouts, retries and the failure budget.

    Attributes:
        max_concurrency: rollouts running at the same time, >= 1. Default 8.
        timeout_s: seconds one attempt may take before it is cancelled and counted as a
            ``TimeoutError`` (> 0); ``None`` (the default) for no limit.
        retries: extra attempts for a rollout that raised or timed out, >= 0. Default 0.
        max_failures: failed rollouts (after their retries) the run tolerates, as a count;
            ``None`` (the default): no count limit. ``0`` stops on the first failure.
        max_failure_rate: failed rollouts tolerated as a fraction in [0, 1] of all the run's
            rollouts (``len(scenarios) * n``, rounded down); ``None``: no fraction limit.
            Default 0.1.
        ray_address: run every rollout as a Ray task on a Ray cluster at this address
            (``"auto"``, ``"HOST:6379"``, ``"ray://HOST:10001"``); ``None`` (the default) runs them
            in this process. Everything above applies the same way; see :mod:`art_adapters._ray`
            for what travels to the workers. Needs ``pip install 'art-adapters[ray]'``.
        ray_num_cpus: CPUs one rollout task reserves on its Ray node (> 0; a fraction lets an
            I/O-bound rollout share a CPU). Default 1. Only with ``ray_address``.

    A budget has one meaning: set one of the two and only that one applies
    (``RunConfig(max_failures=3)`` tolerates 3 failures, whatever the run's size); set both and
    the stricter applies; set neither and the default rate (10%) applies. With both ``None`` any
    number of rollouts may fail. One failure more than tolerated stops the run with
    :class:`RolloutBudgetError`, which names the setting.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_concurrency: PositiveCount = 8
    timeout_s: float | None = Field(default=None, gt=0.0, allow_inf_nan=False)
    retries: Count = 0
    max_failures: Count | None = None
    max_failure_rate: float | None = Field(default=0.1, ge=0.0, le=1.0, allow_inf_nan=False)
    ray_address: str | None = Field(default=None, min_length=1)
    ray_num_cpus: float = Field(default=1.0, gt=0.0, allow_inf_nan=False)

    @model_validator(mode="after")
    def _ray_settings(self) -> RunConfig:
        if "ray_num_cpus" in self.model_fields_set and self.ray_address is None:
            raise ValueError("ray_num_cpus applies to Ray tasks only: set ray_address too, or drop ray_num_cpus")
        return self

    def budget(self, total: int) -> tuple[int | None, str | None]:
        """How many of ``total`` rollouts may fail, and the setting that decides it.

        ``(None, None)`` when neither limit is set (any number may fail).
        """
        limits: list[tuple[int, str]] = []
        # A rate left at its default gives way to a count that was set: one setting, one meaning.
        rate_applies = "max_failure_rate" in self.model_fields_set or "max_failures" not in self.model_fields_set
        if self.max_failures is not None:
            limits.append((self.max_failures, "max_failures"))
        if self.max_failure_rate is not None and rate_applies:
            limits.append((math.floor(self.max_failure_rate * total + 1e-9), "max_failure_rate"))
        if not limits:
            return None, None
        return min(limits, key=lambda limit: limit[0])


#: Keyword arguments run_groups no longer takes, and what replaced them.
_RETIRED = {
    "max_exceptions": (
        "set max_failures (a count) and/or max_failure_rate (a fraction in [0, 1]) instead; "
        "the run tolerates the stricter of the two"
    ),
}


def scenario_id(scenario: Any) -> str:
    """A stable id for a scenario: its ``id`` key or attribute, else a content hash.

    The hash (``scn-`` and 16 hex digits of a SHA-256) is taken over the scenario's
    canonical JSON (pydantic models and dataclasses are dumped first, keys sorted), so
    the same scenario gets the same id in every run and on every machine.
    """
    raw = scenario.get("id") if isinstance(scenario, dict) else getattr(scenario, "id", None)
    if raw is not None and not callable(raw):
        return str(raw)
    canonical = json.dumps(_jsonable(scenario), sort_keys=True, separators=(",", ":"), default=repr)
    return "scn-" + hashlib.sha256(canonical.encode()).hexdigest()[:16]


def _jsonable(scenario: Any) -> Any:
    if isinstance(scenario, BaseModel):
        return scenario.model_dump(mode="json")
    if dataclasses.is_dataclass(scenario) and not isinstance(scenario, type):
        return dataclasses.asdict(scenario)
    return scenario


def _check_arguments(rollout: Any, n: Any) -> None:
    """Raise ConfigError for a group size that is not an int >= 1 or a rollout that cannot be called."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError(f"n must be an int >= 1, got {n!r}")
    if not callable(rollout):
        raise ConfigError(f"rollout must be an async function, got {type(rollout).__name__}")


def _slots_per_group(scenarios: list[Any], n: int) -> list[list[RolloutSlot]]:
    """The run's rollouts: ``n`` slots per scenario, in order, each group under an id of its own."""
    ids = [scenario_id(s) for s in scenarios]
    if len(set(ids)) < len(ids):
        repeated = sorted({i for i in ids if ids.count(i) > 1})
        logger.warning(
            "scenario id(s) %s appear more than once; their groups share the id", ", ".join(repeated[:5])
        )
    groups: list[list[RolloutSlot]] = []
    for g, (scenario, sid) in enumerate(zip(scenarios, ids, strict=True)):
        group_id = new_id("group")
        groups.append([RolloutSlot(g, i, scenario, sid, group_id) for i in range(n)])
    return groups


def _attempt_fn(rollout: RolloutFn, config: RunConfig) -> AttemptFn:
    """Where each attempt runs: in this process, or as a Ray task (Ray is imported only then)."""
    if config.ray_address is None:
        return attempt_rollout
    from ._ray import RayRollouts

    return RayRollouts(rollout, address=config.ray_address, num_cpus=config.ray_num_cpus).attempt


@dataclasses.dataclass
class _GroupRun:
    """What one run_groups call carries while its rollouts run.

    Its settings, its slots per group (where each rollout's trajectory or failure lands), where an
    attempt runs (here, or as a Ray task), the progress display and the live tracing; its methods
    run a slot and its attempts, check the failure budget and collect the groups.
    """

    rollout: RolloutFn
    config: RunConfig
    groups: list[list[RolloutSlot]]
    attempt: AttemptFn
    display: ProgressDisplay
    observer: Observer | None
    tracing: RolloutTracing
    seen_ids: set[str] = dataclasses.field(default_factory=set)

    @classmethod
    def start(
        cls,
        rollout: RolloutFn,
        scenarios: list[Any],
        n: int,
        config: RunConfig,
        progress: bool | Callable[[RunProgress], None],
        tracing: RolloutTracing | None,
    ) -> _GroupRun:
        """The state of a run about to start: its slots, its observer, its attempts (Ray connects here)."""
        options = tracing if tracing is not None else RolloutTracing()
        groups = _slots_per_group(scenarios, n)
        observer = options.resolve()
        attempt = _attempt_fn(rollout, config)
        display = ProgressDisplay(progress, len(scenarios) * n)
        return cls(rollout, config, groups, attempt, display, observer if observer.enabled else None, options)

    @property
    def slots(self) -> list[RolloutSlot]:
        """Every rollout of the run, group by group."""
        return [slot for group in self.groups for slot in group]

    async def run_all(self) -> None:
        """Run every slot under the concurrency limit.

        A ConfigError from a rollout, or the budget running out, cancels the other rollouts.
        """
        semaphore = asyncio.Semaphore(self.config.max_concurrency)
        tasks = [
            asyncio.create_task(
                self.run_slot(slot, semaphore), name=f"rollout:{slot.scenario_id}:{slot.index}"
            )
            for slot in self.slots
        ]
        try:
            await gather_or_cancel(tasks, check=self.check_budget)
        finally:
            self.display.close()

    def check_budget(self) -> None:
        """Raise :class:`RolloutBudgetError` once more rollouts failed than the run's budget allows."""
        slots = self.slots
        budget, setting = self.config.budget(len(slots))
        failures = [s.exception for s in slots if s.exception is not None]
        if budget is None or setting is None or len(failures) <= budget:
            return
        raise RolloutBudgetError(
            _budget_message(failures, budget, len(slots), setting, getattr(self.config, setting)),
            exceptions=failures,
            budget=budget,
            total=len(slots),
            setting=setting,
        )

    async def run_slot(self, slot: RolloutSlot, semaphore: asyncio.Semaphore) -> None:
        """Run one rollout with its retries, under its live span; its trajectory or failure lands on ``slot``."""
        async with semaphore:
            span = self._start_span(slot)
            try:
                with span.active() if span is not None else nullcontext():
                    await self._attempts(slot, span)
                if slot.trajectory is not None:
                    # The same object returned twice: ids must stay unique.
                    if slot.trajectory.id in self.seen_ids:
                        slot.trajectory.id = Trajectory().id
                    self.seen_ids.add(slot.trajectory.id)
            finally:
                if span is not None:
                    _end_span(span, slot, keep_open=self.tracing.keep_open)
        self.display.finished(slot.trajectory)

    def _start_span(self, slot: RolloutSlot) -> Any:
        """The rollout's live span, current while it runs; ``None`` when nothing is traced."""
        if self.observer is None:
            return None
        context = RolloutContext(
            group_id=slot.group_id,
            scenario_id=slot.scenario_id,
            step=self.tracing.step,
            model=self.tracing.policy,
            split=self.tracing.split,
            agent_name=self.tracing.agent_name,
            namespace=self.observer.config.run,
        )
        return self.observer.start_rollout(context, slot.index)

    async def _attempts(self, slot: RolloutSlot, span: Any) -> None:
        """The attempts of one rollout: the first success, or the last failure, lands on ``slot``."""
        failures: list[str] = []
        retries = self.config.retries
        for tried in range(retries + 1):
            started = time.monotonic()
            try:
                trajectory = await self.attempt(self.rollout, slot, self.config.timeout_s)
            except ConfigError:
                raise
            except Exception as exc:  # noqa: BLE001 - a failed rollout is data; cancellation propagates
                failures.append(f"attempt {tried + 1}: {type(exc).__name__}: {exc}")
                if tried < retries:
                    self._retrying(slot, span, exc, failures[-1])
                    continue
                _record_failure(slot, exc, failures)
                return
            slot.trajectory = _labelled(
                trajectory, slot, attempts=tried + 1, started=started, failures=failures
            )
            return

    def _retrying(self, slot: RolloutSlot, span: Any, exc: Exception, failure: str) -> None:
        """Count, trace and log a failed attempt that is tried again."""
        self.display.retried += 1
        if span is not None:
            span.retried(failure)
        logger.info(
            "rollout %s of scenario %s failed (%s: %s); retrying",
            slot.index,
            slot.scenario_id,
            type(exc).__name__,
            exc,
        )

    def results(self) -> list[TrajectoryGroup]:
        """One group per scenario, in order: its trajectories, its failures, and its metadata."""
        return [self._group(slots) for slots in self.groups]

    def _group(self, slots: list[RolloutSlot]) -> TrajectoryGroup:
        first = slots[0]
        metadata: dict[str, Any] = {
            "scenario_id": first.scenario_id,
            "group_id": first.group_id,
            "n": len(slots),
        }
        if self.observer is not None:
            metadata["traced"] = "live"
        try:
            json.dumps(_jsonable(first.scenario))
            metadata["scenario"] = _jsonable(first.scenario)
        except (TypeError, ValueError):
            logger.debug("scenario %s is not JSON-serialisable; not stored on its group", first.scenario_id)
        return TrajectoryGroup(
            id=first.group_id,
            trajectories=[s.trajectory for s in slots if s.trajectory is not None],
            exceptions=[s.exception for s in slots if s.exception is not None],
            metadata=metadata,
        )


def _end_span(span: Any, slot: RolloutSlot, *, keep_open: bool) -> None:
    """Close a rollout's live span with what came of it: a trajectory, a failure, or a cancellation."""
    if slot.trajectory is not None:
        span.finished(slot.trajectory, keep_open=keep_open)
    elif slot.exception is not None:
        span.failed(slot.exception)
    else:
        span.cancelled()


def _labelled(
    trajectory: Trajectory, slot: RolloutSlot, *, attempts: int, started: float, failures: list[str]
) -> Trajectory:
    """A copy of a successful attempt's trajectory, labelled with its slot, attempts and duration."""
    trajectory = trajectory.model_copy()
    trajectory.metadata = {
        **trajectory.metadata,
        "scenario_id": slot.scenario_id,
        "group_id": slot.group_id,
        "rollout_index": slot.index,
        "attempts": attempts,
        "duration_s": round(time.monotonic() - started, 3),
    }
    trajectory.logs = [*trajectory.logs, *(f"runner: retried after {f}" for f in failures)]
    return trajectory


def _record_failure(slot: RolloutSlot, exc: Exception, failures: list[str]) -> None:
    """Keep the last attempt's failure on ``slot`` (with the earlier ones) and log it."""
    partial = getattr(exc, "trajectory", None)
    slot.exception = _failure(
        exc,
        scenario_id=slot.scenario_id,
        rollout_index=slot.index,
        trajectory=partial if isinstance(partial, Trajectory) else None,
        attempts=len(failures),
        previous_failures=failures[:-1],
    )
    logger.warning(
        "rollout %s of scenario %s failed after %d attempt(s): %s: %s",
        slot.index,
        slot.scenario_id,
        len(failures),
        type(exc).__name__,
        exc,
    )


def _failure(exc: Exception, **fields: Any) -> RolloutFailure:
    """The record of a failed rollout; one that raised on a Ray worker keeps the worker's type and traceback."""
    remote = getattr(exc, "remote_failure", None)
    if isinstance(remote, RolloutFailure):
        return remote.model_copy(update=fields)
    return RolloutFailure.from_exception(exc, **fields)


# Over 60 lines only by its docstring (the public reference; the body is 6 lines); its arguments are
# the public API in README.md and stay as they are.
async def run_groups(
    rollout: RolloutFn,
    scenarios: Sequence[Any],
    n: int = 4,
    *,
    config: RunConfig | None = None,
    progress: bool | Callable[[RunProgress], None] = True,
    tracing: RolloutTracing | None = None,
    **settings: Any,
) -> list[TrajectoryGroup]:
    """Run ``rollout`` ``n`` times on every scenario and return one group per scenario.

    ::

        async def rollout(scenario: dict) -> aa.Trajectory:
            handler = aa.TrajectoryCallbackHandler()
            await graph.ainvoke({"messages": [...]}, config={"callbacks": [handler]})
            return handler.trajectory

        groups = await aa.run_groups(rollout, scenarios, n=4, max_concurrency=8, timeout_s=120)
        tolerant = aa.RunConfig(max_failures=2, max_failure_rate=None, retries=1)  # a count, not a fraction
        groups = await aa.run_groups(rollout, scenarios, config=tolerant)

    Every rollout runs under the concurrency limit and its own timeout; one that raises (or times
    out) is retried and, if it still fails, is kept on its group as a
    :class:`~art_adapters.RolloutFailure`. Failures count against one budget: past it
    the remaining rollouts are cancelled and :class:`RolloutBudgetError` is raised. Cancelling the
    caller cancels every rollout and propagates: nothing here catches ``BaseException``.

    When Langfuse or an OTLP endpoint is configured (the ``LANGFUSE_*`` /
    ``OTEL_EXPORTER_OTLP_*`` variables, or ``tracing.observer``), each rollout is one live trace:
    a rollout span with the RL attributes (scenario, group, rollout index, step, policy version)
    is the current OpenTelemetry span while it runs, so the spans of any instrumentation already
    in place join it, and the captured generations and tool calls are added under it. With
    nothing configured nothing is traced (and OpenTelemetry is not imported).

    Args:
        rollout: ``async def rollout(scenario) -> Trajectory``, called once per rollout.
        scenarios: the scenarios, in order; groups come back in the same order.
        n: rollouts per scenario (the group size), >= 1.
        config: concurrency, timeout, retries and failure budget (:class:`RunConfig`);
            ``None``: its defaults.
        progress: ``True`` shows a progress bar (done/total, mean reward, exceptions) when
            stderr is a terminal or in a notebook; ``False`` shows nothing; a callable receives a
            :class:`RunProgress` after every finished rollout instead.
        tracing: where and with which labels (step, policy version, split) rollouts are traced
            live (:class:`~art_adapters.observe.RolloutTracing`); ``None``: the default observer,
            from the environment, without step labels.
        **settings: :class:`RunConfig` fields (``max_concurrency=2``, ``timeout_s=120``, ...),
            laid over ``config``.

    Returns:
        One :class:`TrajectoryGroup` per scenario: its successful trajectories in rollout
        order, its failed rollouts in ``exceptions``, and ``metadata`` with
        ``scenario_id``, ``group_id`` and ``n``. Every trajectory's metadata gains
        ``scenario_id``, ``group_id``, ``rollout_index``, ``attempts`` and ``duration_s`` (and,
        traced live, ``trace_id`` and ``rollout_span_id``).

    Raises:
        ConfigError: an argument or setting is invalid, or ``rollout`` is not an async function
            (with ``ray_address``: or it, or a scenario, cannot be serialised for the workers).
        ImportError: ``ray_address`` is set and Ray is not installed.
        RolloutBudgetError: more rollouts failed than the budget allows (see :class:`RunConfig`).
    """
    run_config = resolve_config(RunConfig, config, settings, hints=_RETIRED)
    scenarios = list(scenarios)
    _check_arguments(rollout, n)
    run = _GroupRun.start(rollout, scenarios, n, run_config, progress, tracing)
    await run.run_all()
    return run.results()


def _budget_message(
    failures: list[RolloutFailure], budget: int, total: int, setting: str, value: float
) -> str:
    lines = [
        (
            f"{len(failures)} of {total} rollouts failed, more than {setting}={value!r} allows "
            f"({budget}); the remaining rollouts were cancelled. Fix the rollout or raise {setting} "
            "(RunConfig: the run tolerates the stricter of max_failures and max_failure_rate). "
            "First failures:"
        )
    ]
    for failure in failures[:3]:
        where = f"scenario {failure.scenario_id} rollout {failure.rollout_index}"
        lines.append(f"  {where}: {failure.type}: {failure.message}")
    return "\n".join(lines)


def run_groups_sync(
    rollout: RolloutFn, scenarios: Sequence[Any], n: int = 4, **kwargs: Any
) -> list[TrajectoryGroup]:
    """Blocking :func:`run_groups`, for scripts and for sync code under a running event loop.

    Takes :func:`run_groups`' keyword arguments (``config=RunConfig(...)``, ``progress``, and
    :class:`RunConfig` fields as settings).

    Without a running loop it is ``asyncio.run(run_groups(...))``. Under one (a notebook
    cell, a sync callback inside async code) it runs the work on a worker thread with its
    own event loop and blocks until it is done, so no loop is re-entered or patched;
    objects bound to the caller's loop (e.g. an ``httpx.AsyncClient`` created there) must
    not be used by ``rollout`` in that case. In a notebook, ``await run_groups(...)`` is
    simpler. Interrupting the wait (Ctrl-C) cancels the rollouts before re-raising.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(run_groups(rollout, scenarios, n, **kwargs))

    loop_ready = threading.Event()
    state: dict[str, Any] = {}

    async def main() -> list[TrajectoryGroup]:
        state["loop"] = asyncio.get_running_loop()
        state["task"] = asyncio.current_task()
        loop_ready.set()
        return await run_groups(rollout, scenarios, n, **kwargs)

    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="art-adapters-run-groups") as pool:
        future = pool.submit(asyncio.run, main())
        try:
            return future.result()
        finally:
            # Interrupted while waiting (Ctrl-C): make sure the worker's rollouts stop first.
            if loop_ready.is_set() and not future.done():
                state["loop"].call_soon_threadsafe(state["task"].cancel)
