"""Dynamic sampling (DAPO) for the sequential loop (``LoopConfig.dynamic_sampling``).

A group whose rollouts all scored alike carries no GRPO signal; :func:`fill_batch` rolls out the
next batches of scenarios until the step has ``groups_per_step`` groups with a reward spread (or
its budget of extra batches is spent), so a step rarely trains nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from ._scorers import has_spread, unscored_reason
from ._trajectory import TrajectoryGroup

__all__ = ["DrawFn", "FilledBatch", "fill_batch"]

logger = logging.getLogger(__name__)

#: ``draw(batch) -> (groups, scenarios)``: batch ``batch``'s scenarios, rolled out and scored.
DrawFn = Callable[[int], Awaitable[tuple[list[TrajectoryGroup], list[Any]]]]


@dataclass
class FilledBatch:
    """One step's groups after dynamic sampling.

    Attributes:
        groups: what the step trains on: up to ``groups_per_step`` groups with a reward spread,
            then every unscorable group (reported by the train step); when no group has a spread,
            every group drawn (the step then trains nothing, and says why).
        scenarios: their scenarios, in the same order.
        seen: every group drawn for the step (its statistics).
        batch: the last batch drawn (the step row's ``batch``).
        metrics: ``dynamic_batches`` (extra batches drawn), ``zero_variance_groups`` (drawn groups
            whose rollouts all scored alike), ``signal_groups`` (drawn groups with a spread).
    """

    groups: list[TrajectoryGroup]
    scenarios: list[Any]
    seen: list[TrajectoryGroup]
    batch: int
    metrics: dict[str, int] = field(default_factory=dict)


async def fill_batch(
    groups: list[TrajectoryGroup],
    scenarios: list[Any],
    *,
    draw: DrawFn,
    batch: int,
    groups_per_step: int,
    max_extra: int,
) -> FilledBatch:
    """Top the step's scored ``groups`` (batch ``batch``) up to ``groups_per_step`` groups with a
    reward spread, drawing at most ``max_extra`` further batches with ``draw``; with ``max_extra``
    0 the groups are returned as they are (dynamic sampling off)."""
    if max_extra == 0:
        return FilledBatch(groups=groups, scenarios=scenarios, seen=groups, batch=batch)
    signal: list[tuple[TrajectoryGroup, Any]] = []
    unscorable: list[tuple[TrajectoryGroup, Any]] = []
    seen: list[tuple[TrajectoryGroup, Any]] = []
    alike, extra = 0, 0

    def sort(new_groups: list[TrajectoryGroup], new_scenarios: list[Any]) -> None:
        nonlocal alike
        for group, scenario in zip(new_groups, new_scenarios, strict=True):
            seen.append((group, scenario))
            if unscored_reason(group) is not None:
                unscorable.append((group, scenario))
            elif has_spread(group):
                signal.append((group, scenario))
            else:
                alike += 1

    sort(groups, scenarios)
    while len(signal) < groups_per_step and extra < max_extra:
        batch, extra = batch + 1, extra + 1
        logger.info(
            "dynamic sampling: %d of %d groups have a reward spread; drawing batch %d",
            len(signal), groups_per_step, batch,
        )  # fmt: skip
        sort(*await draw(batch))
    chosen = [*signal[:groups_per_step], *unscorable] if signal else seen
    metrics = {"dynamic_batches": extra, "zero_variance_groups": alike, "signal_groups": len(signal)}
    return FilledBatch(
        groups=[g for g, _ in chosen], scenarios=[s for _, s in chosen], seen=[g for g, _ in seen],
        batch=batch, metrics=metrics,
    )  # fmt: skip
