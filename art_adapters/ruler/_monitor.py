"""Say so when a run's judge changes mid-way: rewards from two judges are not one reward scale."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from .._trajectory import TrajectoryGroup
from ._judgement import GroupJudgement

__all__ = ["JudgeChangeMonitor"]

logger = logging.getLogger(__name__)


def _judges(group: TrajectoryGroup) -> list[dict[str, Any]] | None:
    """The group's judge identities, or ``None`` when it records none."""
    judgement = GroupJudgement.read(group)
    return judgement.judges if judgement is not None and judgement.judges else None


class JudgeChangeMonitor:
    """One run's record of who judged it; warns (``logging``) when a group was judged by someone else.

    The first group it sees that carries judge identities (:attr:`~art_adapters.ruler.GroupJudgement.judges`,
    written by :func:`~art_adapters.ruler_score_group`) sets the run's judges; every later group whose
    judges differ (another model, endpoint, temperature, ``samples``, rubric or dimensions; see
    :func:`~art_adapters.ruler.judge_identity`) logs one warning per new set of judges, and the
    change is kept in :attr:`changes`. Unscored groups count too (their judges are recorded); groups
    without identities (scored before identities were recorded, or not by RULER) are skipped.

    One monitor per run: pass it to every :func:`~art_adapters.ruler_score_groups` call of the run
    (``monitor=``), or call :meth:`check` on groups scored elsewhere (e.g. the groups of a resumed
    run, to set the baseline before scoring new ones).

    Args:
        run: a name for the run, used in the warning only.

    Attributes:
        run: the run's name (or ``None``).
        baseline: the judge identities of the first group seen (``None`` until then).
        changes: one line per judge change seen, in order.
    """

    def __init__(self, run: str | None = None) -> None:
        self.run = run
        self.baseline: list[dict[str, Any]] | None = None
        self.changes: list[str] = []
        self._baseline_ids: tuple[str, ...] | None = None
        self._seen: set[tuple[str, ...]] = set()

    def check(self, groups: Iterable[TrajectoryGroup]) -> list[str]:
        """Compare the groups' judges with the run's; return the changes found now (one line each)."""
        found: list[str] = []
        for group in groups:
            judges = _judges(group)
            if judges is None:
                continue
            ids = tuple(str(j.get("id")) for j in judges)
            if self._baseline_ids is None:
                self._baseline_ids = ids
                self.baseline = [dict(j) for j in judges]
                self._seen.add(ids)
                continue
            if ids in self._seen:
                continue
            self._seen.add(ids)
            models = ", ".join(f"{j.get('model')} ({j.get('id')})" for j in judges)
            before = ", ".join(f"{j.get('model')} ({j.get('id')})" for j in self.baseline or [])
            line = (
                f"RULER judge changed mid-run{f' in run {self.run}' if self.run else ''}: group {group.id} "
                f"was judged by {models}, earlier groups by {before}; rewards from different judges "
                "are not on one scale (keep one judge per run, or start a new run)"
            )
            logger.warning("%s", line)
            self.changes.append(line)
            found.append(line)
        return found
