"""How an ensemble of judges' scores become one, and how much the judges agree. Pure functions.

Each function takes ``per_judge``: one score vector per judge (or per sample of one judge), every
vector holding one score in [0, 1] per trajectory of the group, in the group's order.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence

__all__ = ["agreement", "aggregate", "kendall_tau_b", "mean_pairwise_tau", "normalised_ranks"]


def normalised_ranks(scores: Sequence[float]) -> list[float]:
    """Each score's rank within ``scores``, scaled to [0, 1]: 0 the lowest, 1 the highest.

    ``rank_i = (#{j: s_j < s_i} + 0.5 * #{j != i: s_j == s_i}) / (n - 1)``: ties share the mean of
    the ranks they span, so a judge that scores every trajectory alike gives every one 0.5. A single
    score has rank 0.5.
    """
    n = len(scores)
    if n == 1:
        return [0.5]
    ranks = []
    for i, s in enumerate(scores):
        lower = sum(1 for t in scores if t < s)
        tied = sum(1 for j, t in enumerate(scores) if j != i and t == s)
        ranks.append((lower + 0.5 * tied) / (n - 1))
    return ranks


def aggregate(per_judge: Sequence[Sequence[float]], method: str) -> list[float]:
    """One score per trajectory from the judges' scores.

    * ``"mean"``: the mean of the judges' scores, ``mean_j s_j[i]``.
    * ``"rank_mean"``: the mean of the judges' normalised ranks, ``mean_j rank_j[i]``
      (:func:`normalised_ranks`): only each judge's ordering counts, not its scale, so a judge that
      scores everything near 1 (or rewards length with large margins) weighs no more than a
      cautious one. A group of one trajectory has no ordering: its score is the mean.
    """
    if method not in ("mean", "rank_mean"):
        raise ValueError(f"aggregate must be 'mean' or 'rank_mean', got {method!r}")
    columns = list(zip(*per_judge, strict=True))
    if method == "mean" or len(columns) < 2:
        return [statistics.fmean(column) for column in columns]
    ranked = list(zip(*(normalised_ranks(scores) for scores in per_judge), strict=True))
    return [statistics.fmean(column) for column in ranked]


def agreement(per_judge: Sequence[Sequence[float]]) -> list[float]:
    """Per trajectory, ``1 - (max - min)`` of the judges' scores: 1 when they all agree, 0 at worst."""
    return [1.0 - (max(column) - min(column)) for column in zip(*per_judge, strict=True)]


def kendall_tau_b(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Kendall's tau-b between two score vectors of equal length; ``None`` when undefined.

    ``tau_b = (C - D) / sqrt((P - T_x) * (P - T_y))`` with ``C``/``D`` the concordant/discordant
    pairs, ``P = n(n-1)/2`` the pairs and ``T_x``/``T_y`` the pairs tied in ``x``/``y``. Undefined
    (``None``) with fewer than two items or when either vector is constant.
    """
    if len(x) != len(y):
        raise ValueError(f"score vectors differ in length: {len(x)} and {len(y)}")
    concordant = discordant = tied_x = tied_y = 0
    for i, j in itertools.combinations(range(len(x)), 2):
        dx, dy = x[i] - x[j], y[i] - y[j]
        if dx == 0:
            tied_x += 1
        if dy == 0:
            tied_y += 1
        if dx * dy > 0:
            concordant += 1
        elif dx * dy < 0:
            discordant += 1
    pairs = len(x) * (len(x) - 1) // 2
    denominator = math.sqrt((pairs - tied_x) * (pairs - tied_y))
    if denominator == 0:
        return None
    return (concordant - discordant) / denominator


def mean_pairwise_tau(per_judge: Sequence[Sequence[float]]) -> float | None:
    """The mean of :func:`kendall_tau_b` over every pair of judges where it is defined, else ``None``."""
    taus = [kendall_tau_b(a, b) for a, b in itertools.combinations(per_judge, 2)]
    defined = [tau for tau in taus if tau is not None]
    return statistics.fmean(defined) if defined else None
