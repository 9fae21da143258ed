"""What a :func:`~art_adapters.run_groups` run shows while it runs: :class:`RunProgress` snapshots and
the :class:`ProgressDisplay` that feeds them to a tqdm bar or a user callback."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict

from ._trajectory import Trajectory

__all__ = ["ProgressDisplay", "RunProgress"]


class RunProgress(BaseModel):
    """A snapshot of a :func:`run_groups` run, passed to a custom progress callback.

    Attributes:
        total: rollouts asked for (scenarios x n).
        done: rollouts finished, successful or failed.
        succeeded: rollouts that returned a trajectory.
        exceptions: rollouts that failed after their retries.
        retried: retry attempts made so far.
        mean_reward: mean reward of the finished trajectories that carry one (``None`` if none).
    """

    model_config = ConfigDict(frozen=True)

    total: int
    done: int
    succeeded: int
    exceptions: int
    retried: int
    mean_reward: float | None


def _interactive() -> bool:
    """Whether a progress bar has somewhere to go: a terminal, or a Jupyter kernel."""
    stream = sys.stderr
    return bool(stream is not None and stream.isatty()) or "ipykernel" in sys.modules


class ProgressDisplay:
    """A run's progress display: a tqdm bar (where a terminal or notebook shows it), a user
    callback receiving a :class:`RunProgress` after each rollout, or nothing."""

    def __init__(self, progress: bool | Callable[[RunProgress], None], total: int) -> None:
        self._callback = progress if callable(progress) else None
        self._bar: Any = None
        if progress is True and total and _interactive():
            from tqdm.auto import tqdm

            self._bar = tqdm(total=total, desc="rollouts", unit="rollout", leave=True)
        self.total = total
        self.succeeded = 0
        self.exceptions = 0
        self.retried = 0
        self._reward_sum = 0.0
        self._reward_count = 0

    def snapshot(self) -> RunProgress:
        """The run so far."""
        mean = self._reward_sum / self._reward_count if self._reward_count else None
        return RunProgress(
            total=self.total,
            done=self.succeeded + self.exceptions,
            succeeded=self.succeeded,
            exceptions=self.exceptions,
            retried=self.retried,
            mean_reward=mean,
        )

    def finished(self, trajectory: Trajectory | None) -> None:
        """Count a rollout that ended (``None``: it failed), then show the new state."""
        if trajectory is None:
            self.exceptions += 1
        else:
            self.succeeded += 1
            if trajectory.reward is not None and math.isfinite(trajectory.reward):
                self._reward_sum += trajectory.reward
                self._reward_count += 1
        state = self.snapshot()
        if self._bar is not None:
            reward = "-" if state.mean_reward is None else f"{state.mean_reward:.3f}"
            self._bar.set_postfix(reward=reward, exceptions=state.exceptions, refresh=False)
            self._bar.update(1)
        if self._callback is not None:
            self._callback(state)

    def close(self) -> None:
        """Close the bar, if any."""
        if self._bar is not None:
            self._bar.close()
