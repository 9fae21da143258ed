"""Paired comparison of two held-out evaluations of the same scenarios: how many scenarios a metric
rose on, how many it fell on, and how likely a split that lopsided is when nothing changed.

Two evaluations of one model family on the same held-out questions are paired data: comparing their
means alone throws away that the same question was asked twice. The exact sign test (McNemar's test
for a 0/1 metric) uses only the scenarios whose outcome changed; under "the metric's mean did not
change" a rise and a fall are equally likely, so the number of rises among the changed scenarios
is Binomial(changed, 1/2).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping

from pydantic import BaseModel, Field

from ._trajectory import TrajectoryGroup

__all__ = ["PairedComparison", "compare_scenarios", "scenario_means"]


class PairedComparison(BaseModel):
    """A metric compared scenario by scenario between two evaluations.

    Attributes:
        metric: the compared metric (``reward`` or a trajectory metric such as ``correct``).
        gained: scenarios on which the metric's mean rose.
        lost: scenarios on which it fell.
        unchanged: scenarios on which it stayed the same.
        p_value: the one-sided exact sign test: the probability of ``gained`` or more rises among
            ``gained + lost`` changed scenarios if a rise and a fall were equally likely (1.0 when
            nothing changed).
    """

    metric: str
    gained: int = Field(ge=0)
    lost: int = Field(ge=0)
    unchanged: int = Field(ge=0)
    p_value: float = Field(ge=0.0, le=1.0)

    def beyond_noise(self, alpha: float = 0.01) -> bool:
        """Whether the rise is significant at level ``alpha`` (more rises than falls, ``p_value <= alpha``)."""
        return self.gained > self.lost and self.p_value <= alpha

    def describe(self) -> str:
        """One line for a console or a log: the counts and the p-value."""
        return (
            f"{self.metric}: up on {self.gained}, down on {self.lost}, unchanged on {self.unchanged} "
            f"held-out scenarios (sign test p = {self.p_value:.2g})"
        )


def sign_test_p(gained: int, lost: int) -> float:
    """P(X >= ``gained``) for X ~ Binomial(``gained + lost``, 1/2); 1.0 when both are 0."""
    if gained < 0 or lost < 0:
        raise ValueError(f"counts must be >= 0, got gained={gained}, lost={lost}")
    changed = gained + lost
    return sum(math.comb(changed, k) for k in range(gained, changed + 1)) / 2**changed


def scenario_means(groups: Iterable[TrajectoryGroup]) -> dict[str, dict[str, float]]:
    """Per scenario id (the groups' ``scenario_id`` metadata): the mean ``reward`` of its scored
    rollouts and the mean of every numeric trajectory metric. Groups without a scenario id, and
    rollouts that failed, are left out; a scenario evaluated in several groups is pooled."""
    values: dict[str, dict[str, list[float]]] = {}
    for group in groups:
        sid = group.metadata.get("scenario_id")
        if sid is None:
            continue
        rows = values.setdefault(str(sid), {})
        for trajectory in group.trajectories:
            if trajectory.reward is not None:
                rows.setdefault("reward", []).append(float(trajectory.reward))
            for name, value in trajectory.metrics.items():
                if isinstance(value, int | float) and math.isfinite(value):
                    rows.setdefault(name, []).append(float(value))
    return {sid: {k: statistics.fmean(v) for k, v in rows.items()} for sid, rows in values.items() if rows}


def compare_scenarios(
    before: Mapping[str, Mapping[str, float]],
    after: Mapping[str, Mapping[str, float]],
    metric: str = "reward",
) -> PairedComparison:
    """Compare ``metric`` on the scenarios both evaluations scored (:func:`scenario_means`' shape).

    Raises:
        ValueError: no scenario has ``metric`` in both.
    """
    shared = [sid for sid in before if metric in before[sid] and metric in after.get(sid, {})]
    if not shared:
        raise ValueError(f"no scenario has {metric!r} in both evaluations; nothing to compare")
    gained = sum(after[sid][metric] > before[sid][metric] for sid in shared)
    lost = sum(after[sid][metric] < before[sid][metric] for sid in shared)
    return PairedComparison(
        metric=metric, gained=gained, lost=lost, unchanged=len(shared) - gained - lost,
        p_value=sign_test_p(gained, lost),
    )  # fmt: skip
