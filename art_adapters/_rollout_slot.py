"""One rollout of a run: its slot (scenario, index, outcome) and one attempt of it under the timeout.

The seam between the group runner (:mod:`art_adapters._runner`, which retries, traces and
budgets) and where an attempt runs: in this process, or as a Ray task (:mod:`art_adapters._ray`,
whose workers call :func:`attempt_rollout` too, so both check the same things).
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from ._errors import ConfigError, RolloutError
from ._trajectory import RolloutFailure, Trajectory

__all__ = ["AttemptFn", "RolloutFn", "RolloutSlot", "attempt_rollout"]


class RolloutFn(Protocol):
    """``async def rollout(scenario) -> Trajectory``: one rollout of a scenario.

    What :func:`~art_adapters.run_groups` and :func:`~art_adapters.train_loop` call, once per
    rollout; any async function taking one scenario (of whatever type your scenarios are) fits.
    """

    def __call__(self, scenario: Any, /) -> Awaitable[Trajectory]:
        """Run the agent once on ``scenario`` and return what it did."""
        ...


@dataclasses.dataclass
class RolloutSlot:
    """One rollout to run: which scenario, which index, and what came of it.

    Attributes:
        group: the index of the scenario's group in the run (the scenario's position).
        index: the rollout's index within its group, ``0`` to ``n - 1``.
        scenario: the scenario, as given (it travels to a Ray worker with the slot).
        scenario_id: the scenario's stable id (:func:`~art_adapters._runner.scenario_id`).
        group_id: the id of the group the rollout's trajectory joins.
        trajectory: the trajectory, once an attempt succeeded; ``None`` until then.
        exception: the failure, once the last attempt failed; ``None`` otherwise.
    """

    group: int
    index: int
    scenario: Any
    scenario_id: str
    group_id: str
    trajectory: Trajectory | None = None
    exception: RolloutFailure | None = None


#: One attempt of a rollout: :func:`attempt_rollout`, or a Ray task (:class:`~art_adapters._ray.RayRollouts`).
AttemptFn = Callable[[RolloutFn, RolloutSlot, "float | None"], Awaitable[Trajectory]]


async def attempt_rollout(rollout: RolloutFn, slot: RolloutSlot, timeout_s: float | None) -> Trajectory:
    """Run the user's rollout once on ``slot.scenario``, under ``timeout_s``; check what it returned.

    Raises:
        ConfigError: ``rollout`` did not return an awaitable (it is not an async function).
        TimeoutError: the attempt took longer than ``timeout_s`` seconds.
        RolloutError: the rollout raised ``CancelledError`` although nobody cancelled the run.
        TypeError: the rollout returned something other than a :class:`~art_adapters.Trajectory`.
        Exception: whatever the rollout raised. Cancelling the caller propagates.
    """
    result = rollout(slot.scenario)
    if not inspect.isawaitable(result):
        raise ConfigError(
            f"rollout(scenario) returned {type(result).__name__}, not an awaitable: "
            "pass an `async def rollout(scenario) -> Trajectory` function"
        )
    deadline = asyncio.timeout(timeout_s)
    try:
        async with deadline:
            value = await result
    except TimeoutError:
        if deadline.expired():
            raise TimeoutError(f"rollout did not finish within timeout_s={timeout_s:g} s") from None
        raise
    except asyncio.CancelledError as exc:
        task = asyncio.current_task()
        if task is None or task.cancelling():
            raise  # the run (or its caller) is being cancelled: propagate
        # Nobody cancelled this rollout: a task or future it awaited was cancelled. That is its failure,
        # not the run's; raised as is it would cancel the whole run_groups with a bare CancelledError.
        raise RolloutError(
            "the rollout raised CancelledError although the run was not cancelled: a task or future "
            "it awaited was cancelled (see the traceback)"
        ) from exc
    if not isinstance(value, Trajectory):
        raise TypeError(
            f"rollout(scenario) must return an art_adapters.Trajectory, got {type(value).__name__}"
        )
    return value
