"""The metrics history of a run: one JSON line per (step, split), appended safely; and group statistics.

Rows are appended to a JSON Lines file a crash cannot corrupt beyond the row being written, so a run's
history can be charted while it runs and after it dies.
"""

from __future__ import annotations

import json
import logging
import math
import os
import statistics
import threading
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from art_adapters._errors import ConfigError
from art_adapters._trajectory import Trajectory, TrajectoryGroup
from art_adapters.files import append_durably

__all__ = ["METRICS_FILE", "MetricsHistory", "group_metrics"]

logger = logging.getLogger(__name__)

#: The file name of the metrics history inside a run directory.
METRICS_FILE = "metrics.jsonl"


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _called_a_tool(trajectory: Trajectory) -> bool:
    """Whether the model asked for a tool in any of the trajectory's histories, or a tool ran."""
    if trajectory.tool_records:
        return True
    return any(m.role == "assistant" and m.tool_calls for h in trajectory.histories() for m in h.messages)


def group_metrics(groups: Iterable[TrajectoryGroup]) -> dict[str, float | int]:
    """Statistics over the rollouts of ``groups``.

    Returns ``trajectories``, ``exceptions``, ``exception_rate`` (failed / all rollouts),
    ``reward_mean``/``reward_std``/``reward_min``/``reward_max`` over scored trajectories,
    ``reward_std_within_group_mean`` (the spread GRPO learns from), ``tool_call_rate`` (the
    share of rollouts in which the model called at least one tool, run or not), ``tool_error_rate``
    (the share of the tool calls that ran and reported an error; absent when none ran), and ``<metric>_mean``
    for every numeric trajectory metric (tokens, tool calls, RULER score) and for the
    runner's ``duration_s``.
    """
    groups = list(groups)
    trajectories = [t for g in groups for t in g.trajectories]
    failures = sum(len(g.exceptions) for g in groups)
    total = len(trajectories) + failures
    row: dict[str, float | int] = {
        "groups": len(groups),
        "trajectories": len(trajectories),
        "exceptions": failures,
        "exception_rate": failures / total if total else 0.0,
    }
    if trajectories:
        calls = [r for t in trajectories for r in t.tool_records]
        row["tool_call_rate"] = sum(1 for t in trajectories if _called_a_tool(t)) / len(trajectories)
        if calls:
            row["tool_error_rate"] = sum(1 for r in calls if r.is_error) / len(calls)
    rewards = [float(t.reward) for t in trajectories if t.reward is not None]
    if rewards:
        row["reward_mean"] = statistics.fmean(rewards)
        row["reward_std"] = statistics.pstdev(rewards)
        row["reward_min"] = min(rewards)
        row["reward_max"] = max(rewards)
        spreads = [
            statistics.pstdev(r)
            for r in ([float(t.reward) for t in g.trajectories if t.reward is not None] for g in groups)
            if len(r) > 1
        ]
        if spreads:
            row["reward_std_within_group_mean"] = statistics.fmean(spreads)
    values: dict[str, list[float]] = {}
    for trajectory in trajectories:
        for key, value in trajectory.metrics.items():
            if _finite(value):
                values.setdefault(key, []).append(float(value))
        duration = trajectory.metadata.get("duration_s")
        if _finite(duration):
            values.setdefault("duration_s", []).append(float(duration))
    for key, series in sorted(values.items()):
        row[f"{key}_mean"] = statistics.fmean(series)
    return row


class MetricsHistory:
    """A JSON Lines file of metric rows, one per (step, split).

    A row looks like::

        {"step": 3, "split": "train", "time": "2026-11-23T02:50:00+00:00",
         "reward_mean": 0.42, "reward_std": 0.31, "exception_rate": 0.0, "trajectories": 16,
         "prompt_tokens_mean": 310.5, "completion_tokens_mean": 42.0, "duration_s_mean": 1.8, ...}

    Rollout rows come from :func:`group_metrics`; training rows carry whatever the trainer
    reports (``loss``, ``kl``, ``grad_norm``, ``learning_rate``, ``step_time_s``...).

    Args:
        path: the file, or a run directory (then ``metrics.jsonl`` inside it).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        path = Path(path)
        if path.is_dir() or path.suffix == "":
            path = path / METRICS_FILE
        self.path = path
        self._lock = threading.Lock()

    def append(self, step: int, metrics: Mapping[str, Any], *, split: str = "train") -> dict[str, Any]:
        """Append one row and return it; non-JSON values are written as strings.

        The row is appended with :func:`art_adapters.files.append_durably` (one ``write``, fsynced;
        a torn last line left by a crash is cut off first), so concurrent writers do not interleave
        and a crash loses at most the row being written.

        Raises:
            ConfigError: ``step`` is not an int >= 0 or ``split`` is empty.
        """
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ConfigError(f"step must be an int >= 0, got {step!r}")
        if not isinstance(split, str) or not split:
            raise ConfigError(f"split must be a non-empty string, got {split!r}")
        row: dict[str, Any] = {"step": step, "split": split, "time": datetime.now(UTC).isoformat()}
        for key, value in metrics.items():
            if key in ("step", "split", "time"):
                continue
            if isinstance(value, float) and not math.isfinite(value):
                value = None  # JSON has no NaN/inf; keep the key so the gap shows
            row[str(key)] = value
        line = (json.dumps(row, default=str, allow_nan=False) + "\n").encode("utf-8")
        with self._lock:
            append_durably(self.path, line)
        return row

    def rows(self, split: str | None = None) -> list[dict[str, Any]]:
        """Every row (or those of ``split``), in file order; torn/malformed lines skipped with a warning."""
        if not self.path.exists():
            return []
        out: list[dict[str, Any]] = []
        with self.path.open(encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    logger.warning("%s:%d: not a JSON row (torn write?); skipped", self.path, number)
                    continue
                if not isinstance(row, dict) or not isinstance(row.get("step"), int):
                    logger.warning("%s:%d: row without an integer 'step'; skipped", self.path, number)
                    continue
                if split is None or row.get("split") == split:
                    out.append(row)
        return out

    def splits(self) -> list[str]:
        """The splits present, in first-seen order."""
        return list(dict.fromkeys(str(r.get("split")) for r in self.rows()))

    def series(self, key: str, split: str = "train") -> tuple[list[int], list[float]]:
        """``(steps, values)`` of one metric in one split; the last row of a step wins; gaps skipped."""
        by_step: dict[int, float] = {}
        for row in self.rows(split):
            value = row.get(key)
            if _finite(value):
                by_step[row["step"]] = float(value)
        steps = sorted(by_step)
        return steps, [by_step[s] for s in steps]
