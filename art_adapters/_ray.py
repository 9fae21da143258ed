"""Rollouts on a Ray cluster: each attempt of a rollout runs as a Ray task, on any node.

:func:`~art_adapters.run_groups` with ``RunConfig(ray_address=...)`` hands every attempt of a
rollout to :class:`RayRollouts`, which submits it as one Ray task and brings back a
:class:`~art_adapters.Trajectory` or the failure; everything else (the concurrency limit, retries,
the failure budget, progress, ids, live traces) stays in the runner on the driver, exactly as
without Ray. Ray is imported only here, and only then.
What travels to the workers, and how (secrets, serialisation, failures): docs/scaling.md.
"""

from __future__ import annotations

import asyncio
import io
import logging
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel, ConfigDict

from ._errors import ConfigError, RolloutError
from ._rollout_slot import RolloutFn, RolloutSlot, attempt_rollout
from ._trajectory import RolloutFailure, Trajectory

__all__ = ["RAY_INSTALL_HINT", "RayRollouts", "RemoteRolloutError", "import_ray"]

logger = logging.getLogger(__name__)

RAY_INSTALL_HINT = "pip install 'art-adapters[ray]'"

#: Seconds the driver waits past ``timeout_s`` before it kills a task that did not stop itself
#: (a rollout blocked in sync code cannot be cancelled by its own event loop).
BACKSTOP_GRACE_S = 30.0

#: The name Ray's dashboard and ``ray list tasks`` show for a rollout task.
TASK_NAME = "art_adapters.rollout"


def import_ray() -> Any:
    """The ``ray`` module, or an ImportError that says how to install it."""
    try:
        import ray
    except ImportError as exc:
        raise ImportError(
            f"RunConfig.ray_address needs Ray, which is not installed: {RAY_INSTALL_HINT}"
        ) from exc
    return ray


class RemoteRolloutError(RolloutError):
    """A rollout attempt that raised on a Ray worker; ``failure`` holds what the worker recorded.

    The runner keeps ``failure`` (the remote exception's type, message and traceback) on the
    group, so a failure reads the same as one raised locally.
    """

    def __init__(self, failure: RolloutFailure) -> None:
        super().__init__(f"{failure.type}: {failure.message}")
        self.remote_failure = failure
        self.trajectory = failure.trajectory


class _Outcome(BaseModel):
    """What one task sends back: the trajectory, or the failure (and whether it is a ConfigError).

    Attributes:
        trajectory: the attempt's trajectory when it succeeded.
        failure: the attempt's failure, recorded on the worker, when it raised.
        config_error: the failure is a ConfigError, which stops the run as it does locally.
    """

    model_config = ConfigDict(frozen=True)

    trajectory: Trajectory | None = None
    failure: RolloutFailure | None = None
    config_error: bool = False


def _run_on_worker(
    rollout: RolloutFn, slot: RolloutSlot, timeout_s: float | None
) -> Iterator[_Outcome | None]:
    """The Ray task: one attempt of ``rollout`` on ``slot.scenario``, in a fresh event loop, made by
    :func:`~art_adapters._rollout_slot.attempt_rollout` (as without Ray: same checks, same timeout).

    A streaming generator: it first yields ``None`` as soon as it runs on a worker, so the driver
    starts its backstop then (time spent in Ray's queue waiting for a CPU is not the rollout's),
    and then the attempt's :class:`_Outcome`.
    """
    yield None
    try:
        yield _Outcome(trajectory=asyncio.run(attempt_rollout(rollout, slot, timeout_s)))
    except Exception as exc:  # noqa: BLE001 - a failed rollout is data; cancellation propagates
        partial = getattr(exc, "trajectory", None)
        failure = RolloutFailure.from_exception(
            exc, trajectory=partial if isinstance(partial, Trajectory) else None
        )
        yield _Outcome(failure=failure, config_error=isinstance(exc, ConfigError))


def _report(value: Any, name: str) -> str:
    """Ray's account of why ``value`` cannot be serialised (the members that fail), as text."""
    out = io.StringIO()
    try:
        from ray.util import inspect_serializability

        inspect_serializability(value, name=name, print_file=out)
    except Exception as exc:  # noqa: BLE001 - the report is a courtesy; the error stands without it
        return f"(no report: {type(exc).__name__}: {exc})"
    return out.getvalue().strip()


class RayRollouts:
    """Runs the attempts of one ``run_groups`` call's rollouts as Ray tasks.

    Connects to the cluster at ``address`` with ``ray.init`` unless this process is connected
    already (then that connection, with its ``runtime_env`` and namespace, is used as is), and
    serialises ``rollout`` once into the object store.

    Raises:
        ImportError: Ray is not installed (the message names the extra to install).
        ConfigError: ``rollout`` cannot be serialised by Ray (the message names the member).
    """

    def __init__(self, rollout: RolloutFn, *, address: str, num_cpus: float) -> None:
        ray = import_ray()
        self._ray = ray
        if not ray.is_initialized():
            logger.info("connecting to the Ray cluster at %s", address)
            ray.init(address=address)
        self._task = ray.remote(_run_on_worker).options(
            num_cpus=num_cpus, max_retries=0, name=TASK_NAME, num_returns="streaming"
        )
        try:
            self._rollout_ref = ray.put(rollout)
        except Exception as exc:
            name = getattr(rollout, "__qualname__", type(rollout).__name__)
            raise ConfigError(
                f"the rollout function {name} cannot be sent to Ray workers ({type(exc).__name__}: {exc}). "
                "It is serialised with cloudpickle, so everything it refers to must be too: create "
                "clients, locks, open files and sessions inside the function instead of capturing them. "
                f"Ray's report:\n{_report(rollout, name)}"
            ) from exc

    async def attempt(self, rollout: RolloutFn, slot: RolloutSlot, timeout_s: float | None) -> Trajectory:
        """One attempt of the rollout of ``slot``, on a worker; its trajectory, or an exception.

        ``rollout`` is the function given to ``__init__`` (already in the object store). The
        worker enforces ``timeout_s`` itself; the driver kills the task ``BACKSTOP_GRACE_S`` later
        if it has not come back. Both count from when the task starts on a worker: a task waiting
        in Ray's queue for a free CPU waits as long as the cluster needs. Cancelling this
        coroutine cancels the task.

        Raises:
            ConfigError: the scenario cannot be serialised, or the rollout raised one.
            RemoteRolloutError: the rollout raised on the worker (the failure is kept as data).
            TimeoutError: the task did not come back within ``timeout_s`` plus the grace of starting.
            ray.exceptions.RayError: the worker or node died, or the task could not run.
        """
        ray = self._ray
        try:
            task = self._task.remote(self._rollout_ref, slot, timeout_s)
        except Exception as exc:
            raise ConfigError(
                f"scenario {slot.scenario_id} cannot be sent to a Ray worker ({type(exc).__name__}: {exc}); "
                "scenarios must be serialisable (dicts, pydantic models, dataclasses). "
                f"Ray's report:\n{_report(slot.scenario, 'scenario')}"
            ) from exc
        backstop: asyncio.Timeout | None = None
        try:
            await (await anext(task))  # running on a worker now; a queued task has used none of its time
            backstop = asyncio.timeout(None if timeout_s is None else timeout_s + BACKSTOP_GRACE_S)
            async with backstop:
                outcome: _Outcome = await (await anext(task))
        except TimeoutError:
            if backstop is None or not backstop.expired():
                raise
            ray.cancel(task, force=True)  # blocked past its own timeout: kill its worker
            raise TimeoutError(
                f"rollout did not finish within timeout_s={timeout_s:g} s of starting on its worker (its "
                f"Ray task was killed {BACKSTOP_GRACE_S:g} s later)"
            ) from None
        except asyncio.CancelledError:
            ray.cancel(task)  # the run is cancelled, or the budget ran out: stop the remote attempt too
            raise
        if outcome.failure is None:
            if outcome.trajectory is None:  # pragma: no cover - _run_on_worker sets one of the two
                raise RolloutError("a Ray rollout task returned neither a trajectory nor a failure")
            return outcome.trajectory
        if outcome.config_error:
            raise ConfigError(f"{outcome.failure.message} (raised on a Ray worker)")
        raise RemoteRolloutError(outcome.failure)
