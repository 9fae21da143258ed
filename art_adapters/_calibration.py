"""How well RULER agrees with a verifiable reward: Spearman rank correlation and pairwise agreement.

RULER's scores are comparable within one group only, so both measures are taken inside each group
and then combined over groups. The reference is the reward a trajectory had before RULER scored it
(``TrajectoryJudgement.independent_reward``, e.g. a verifiable check); the judged score is its
``score`` and, per rubric dimension, its ``dimensions``. Pure functions:
the training loop adds :meth:`Calibration.row` to each metrics row; ``art-adapters calibrate`` compares
judges or rubrics on saved groups.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence

from pydantic import BaseModel, Field

from ._trajectory import Trajectory, TrajectoryGroup
from .ruler import TrajectoryJudgement

__all__ = [
    "REFERENCE_METRIC",
    "SCORE_METRIC",
    "Agreement",
    "Calibration",
    "calibrate",
    "dimensions_of",
    "pairwise_agreement",
    "ranks",
    "spearman",
]

#: The judged score compared with the reference (the metric of ``TrajectoryJudgement.score``).
SCORE_METRIC = TrajectoryJudgement.SCORE_METRIC
#: The reference: the reward a trajectory had before RULER (a verifiable reward).
REFERENCE_METRIC = TrajectoryJudgement.REFERENCE_METRIC


def ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks of ``values``, tied values sharing the mean of their ranks ("average" ranks).

    ``ranks([0.2, 0.9, 0.2])`` is ``[1.5, 3.0, 1.5]``.
    """
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        rank = (start + end) / 2 + 1  # the mean of the 1-based ranks start+1 .. end+1
        for position in range(start, end + 1):
            out[order[position]] = rank
        start = end + 1
    return out


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Spearman's rank correlation of paired values, in [-1, 1]; ``None`` where it is undefined.

    rho = Pearson correlation of the average ranks (:func:`ranks`), which handles ties
    exactly (the ``1 - 6 sum d^2 / (n (n^2 - 1))`` shortcut holds only without ties). Undefined, so
    ``None``, with fewer than two pairs or when either side is constant (all rewards equal: there
    is no order to agree with).

    Raises:
        ValueError: ``xs`` and ``ys`` differ in length.
    """
    if len(xs) != len(ys):
        raise ValueError(f"spearman needs paired values, got {len(xs)} and {len(ys)}")
    if len(xs) < 2:
        return None
    rx, ry = ranks(xs), ranks(ys)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    sxx = sum((a - mx) ** 2 for a in rx)
    syy = sum((b - my) ** 2 for b in ry)
    if sxx == 0 or syy == 0:
        return None
    return max(-1.0, min(1.0, sxy / math.sqrt(sxx * syy)))


def pairwise_agreement(scores: Sequence[float], reference: Sequence[float]) -> tuple[float, int]:
    """``(credit, pairs)``: how many pairs the judge orders as the reference does, out of how many.

    Every pair ``i < j`` whose reference values differ is comparable (a pair the reference ties
    says nothing about order and is left out). A comparable pair earns 1 when ``scores`` orders it
    the same way, 0 when the opposite way, and 1/2 when ``scores`` ties it (the judge saw no
    difference where there is one: half right, as Harrell's concordance index counts it). The
    agreement is ``credit / pairs``; 1.0 is perfect, 0.5 chance (or a judge that ties everything),
    0.0 reversed.

    Raises:
        ValueError: ``scores`` and ``reference`` differ in length.
    """
    if len(scores) != len(reference):
        raise ValueError(f"pairwise_agreement needs paired values, got {len(scores)} and {len(reference)}")
    credit, pairs = 0.0, 0
    for i in range(len(scores)):
        for j in range(i + 1, len(scores)):
            truth = reference[i] - reference[j]
            if truth == 0:
                continue
            pairs += 1
            judged = scores[i] - scores[j]
            credit += 0.5 if judged == 0 else float((judged > 0) == (truth > 0))
    return credit, pairs


class Agreement(BaseModel):
    """How one judged score agrees with the reference over a set of groups.

    Attributes:
        spearman: the mean over groups of each group's Spearman rho (:func:`spearman`) between the
            score and the reference; ``None`` when no group defines it (every group's reference or
            score constant, or one trajectory).
        pairwise: the agreement pooled over the groups' comparable pairs (:func:`pairwise_agreement`:
            credit summed over groups / pairs summed over groups); ``None`` with no comparable pair.
        pairs: the comparable pairs (within groups, reference not tied).
        groups: the groups whose Spearman rho is defined (the ones averaged).
    """

    spearman: float | None = None
    pairwise: float | None = None
    pairs: int = 0
    groups: int = 0


class Calibration(BaseModel):
    """RULER against the verifiable reward on a set of groups, overall and per rubric dimension.

    Attributes:
        overall: the judged score (``TrajectoryJudgement.score``) against the reference.
        dimensions: ``dimension -> Agreement`` of each ``TrajectoryJudgement.dimensions`` score against the
            reference, for every dimension the trajectories carry.
        groups: the groups holding at least two trajectories with both a score and a reference.
        trajectories: the trajectories with both.
    """

    overall: Agreement = Field(default_factory=Agreement)
    dimensions: dict[str, Agreement] = Field(default_factory=dict)
    groups: int = 0
    trajectories: int = 0

    def row(self) -> dict[str, float | int]:
        """The metrics-row fields: ``calibration_spearman``, ``calibration_pairwise``,
        ``calibration_pairs``, ``calibration_groups`` and, per dimension ``d``,
        ``calibration_spearman_<d>`` and ``calibration_pairwise_<d>`` (undefined values left out)."""
        row: dict[str, float | int] = {
            "calibration_pairs": self.overall.pairs,
            "calibration_groups": self.groups,
        }
        dimensions = ((f"_{d}", a) for d, a in sorted(self.dimensions.items()))
        for suffix, agreement in [("", self.overall), *dimensions]:
            if agreement.spearman is not None:
                row[f"calibration_spearman{suffix}"] = agreement.spearman
            if agreement.pairwise is not None:
                row[f"calibration_pairwise{suffix}"] = agreement.pairwise
        return row

    def summary(self) -> str:
        """One line for the log: ``Spearman 0.80, pairwise agreement 90% over 12 pairs in 3 groups``."""
        o = self.overall
        rho = "undefined" if o.spearman is None else f"{o.spearman:.2f}"
        pairwise = "undefined" if o.pairwise is None else f"{o.pairwise:.0%}"
        line = f"Spearman {rho}, pairwise agreement {pairwise} over {o.pairs} pairs in {self.groups} groups"
        for name, a in sorted(self.dimensions.items()):
            d_rho = "-" if a.spearman is None else f"{a.spearman:.2f}"
            d_pairwise = "-" if a.pairwise is None else f"{a.pairwise:.0%}"
            line += f"; {name}: {d_rho} / {d_pairwise}"
        return line


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def dimensions_of(trajectories: Iterable[Trajectory]) -> list[str]:
    """The rubric dimensions the judged trajectories carry (:attr:`TrajectoryJudgement.dimensions`)."""
    judged = (TrajectoryJudgement.read(t) for t in trajectories)
    return sorted({name for j in judged if j is not None for name in j.dimensions})


def _agreement(pairs_by_group: list[tuple[list[float], list[float]]]) -> Agreement:
    rhos = [rho for xs, ys in pairs_by_group if (rho := spearman(xs, ys)) is not None]
    credit, pairs = 0.0, 0
    for xs, ys in pairs_by_group:
        c, p = pairwise_agreement(xs, ys)
        credit, pairs = credit + c, pairs + p
    return Agreement(
        spearman=statistics.fmean(rhos) if rhos else None,
        pairwise=credit / pairs if pairs else None,
        pairs=pairs,
        groups=len(rhos),
    )


def _paired(group: TrajectoryGroup, metric: str, reference: str) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for trajectory in group.trajectories:
        x, y = _number(trajectory.metrics.get(metric)), _number(trajectory.metrics.get(reference))
        if x is not None and y is not None:
            xs.append(x)
            ys.append(y)
    return xs, ys


def calibrate(
    groups: Iterable[TrajectoryGroup], *, score: str = SCORE_METRIC, reference: str = REFERENCE_METRIC
) -> Calibration | None:
    """How the judged ``score`` agrees with the ``reference`` reward in ``groups`` (within each group).

    A trajectory counts when both metrics are finite numbers; a group counts when two or more of
    its trajectories do. Returns ``None`` when no group counts (no verifiable reward beside RULER,
    or RULER did not score): there is nothing to calibrate against.
    """
    groups = list(groups)
    paired = [p for g in groups if len((p := _paired(g, score, reference))[0]) >= 2]
    if not paired:
        return None
    trajectories = [t for g in groups for t in g.trajectories]
    dimensions = {}
    for name in dimensions_of(trajectories):
        metric = TrajectoryJudgement.dimension_metric(name)
        by_group = [p for g in groups if len((p := _paired(g, metric, reference))[0]) >= 2]
        if by_group:
            dimensions[name] = _agreement(by_group)
    return Calibration(
        overall=_agreement(paired),
        dimensions=dimensions,
        groups=len(paired),
        trajectories=sum(len(xs) for xs, _ in paired),
    )
