"""Scorers: how rewards get into :func:`~art_adapters.train_loop`.

A :class:`Scorer` sets ``reward`` on the trajectories of a batch of groups. :func:`verifiable_scorer`
wraps a reward function, :func:`ruler_scorer` asks RULER's judge (or an ensemble of judges), and
:func:`combined_scorer` mixes the two. A group a scorer cannot score says why
(:func:`unscored_reason`) and is reported, not trained on.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from ._config import resolve_config
from ._errors import ConfigError
from ._trajectory import Trajectory, TrajectoryGroup
from .ruler import (
    GroupJudgement,
    JudgeChangeMonitor,
    RulerConfig,
    TrajectoryJudgement,
    combine_rewards,
    judge_identity,
    ruler_score_groups,
)

__all__ = ["Scorer", "combined_scorer", "has_spread", "ruler_scorer", "unscored_reason", "verifiable_scorer"]


class Scorer(Protocol):
    """``async def score(groups, scenarios) -> groups``: sets ``reward`` on every trajectory it can.

    It returns every group, in order (scored copies or the groups themselves); a group it cannot
    score keeps ``reward=None`` (or says why in ``metadata``) and is reported, not trained on.
    :func:`verifiable_scorer`, :func:`ruler_scorer` and :func:`combined_scorer` make one.
    """

    def __call__(
        self, groups: list[TrajectoryGroup], scenarios: list[Any], /
    ) -> Awaitable[list[TrajectoryGroup]]:
        """Score ``groups``; ``scenarios[i]`` is the scenario of ``groups[i]``."""
        ...


def unscored_reason(group: TrajectoryGroup) -> str | None:
    """Why ``group`` cannot be trained on as scored, or ``None`` when every trajectory has a reward."""
    if group.metadata.get("scorer_error"):
        return f"reward function: {group.metadata['scorer_error']}"
    judgement = GroupJudgement.read(group)
    if judgement is not None and judgement.status == "unscored":
        return f"judge: {judgement.reason}"
    if not group.trajectories:
        return f"no trajectory ({len(group.exceptions)} rollouts failed)"
    missing = sum(t.reward is None for t in group.trajectories)
    if missing:
        return f"{missing} of {len(group.trajectories)} trajectories have no reward"
    return None


def has_spread(group: TrajectoryGroup) -> bool:
    """Whether ``group``'s rewards differ (at least two rewards, not all alike): a GRPO signal."""
    rewards = [t.reward for t in group.trajectories if t.reward is not None]
    return len(rewards) >= 2 and max(rewards) - min(rewards) > 1e-9


def verifiable_scorer(reward: Callable[[Trajectory, Any], float]) -> Scorer:
    """A scorer from ``reward(trajectory, scenario) -> float``; an exception leaves the group unscored."""

    async def score(groups: list[TrajectoryGroup], scenarios: list[Any]) -> list[TrajectoryGroup]:
        out = []
        for group, scenario in zip(groups, scenarios, strict=True):
            group = group.model_copy(deep=True)
            try:
                for trajectory in group.trajectories:
                    trajectory.reward = float(reward(trajectory, scenario))
            except Exception as exc:  # noqa: BLE001 - a broken reward function is reported, not trained on
                for trajectory in group.trajectories:
                    trajectory.reward = None
                group.metadata["scorer_error"] = f"{type(exc).__name__}: {exc}"
            out.append(group)
        return out

    return score


def _one_of(judge: Any, judges: Sequence[Any] | None, settings: RulerConfig, scorer: str) -> list[Any] | None:
    """``judges`` as a list when the scorer judges with an ensemble, ``None`` for one ``judge``.

    Raises:
        ConfigError: both or neither are given, ``judges`` is not a non-empty list, or lists
            the same judge twice (checked now, not after a batch of rollouts).
    """
    if (judge is None) == (judges is None):
        raise ConfigError(
            f"{scorer} needs exactly one of judge= (one judge) or judges=[...] (an ensemble), "
            f"got {'both' if judge is not None else 'neither'}"
        )
    if judges is None:
        return None
    if isinstance(judges, str) or not isinstance(judges, Sequence) or not judges:
        got = "an empty list" if isinstance(judges, Sequence) and not judges else type(judges).__name__
        raise ConfigError(
            f"{scorer}: judges must be a non-empty list of judges (LangChain chat models or litellm "
            f"model strings), got {got}; for one judge pass judge="
        )
    seen: dict[str, int] = {}
    for position, member in enumerate(judges):
        identity = judge_identity(member, settings)
        if identity["id"] in seen:
            raise ConfigError(
                f"{scorer}: judges {seen[identity['id']]} and {position} are the same judge "
                f"({identity['model']}); to ask one judge several times set samples=k instead"
            )
        seen[identity["id"]] = position
    return list(judges)


def ruler_scorer(
    judge: Any = None,
    config: RulerConfig | None = None,
    *,
    judges: Sequence[Any] | None = None,
    monitor: JudgeChangeMonitor | None = None,
    **options: Any,
) -> Scorer:
    """A scorer that asks RULER's ``judge``, or an ensemble of ``judges``
    (:func:`~art_adapters.ruler_score_groups`).

    Pass exactly one of ``judge`` and ``judges``; an ensemble aggregates its judges' scores
    (``aggregate``, ``samples``) and gives each trajectory ``TrajectoryJudgement.agreement``, which the
    metrics rows carry as ``judge_agreement_mean``. ``config`` and the keyword ``options`` are
    :class:`~art_adapters.RulerConfig` settings (checked now); ``swallow_exceptions`` defaults to
    True here, so a group the judge cannot score is reported as unscored instead of stopping the loop.

    Every group the scorer scores is checked by one :class:`~art_adapters.ruler.JudgeChangeMonitor`
    (``monitor``, else one of the scorer's own): a scorer is made once per run, so a judge that
    changes mid-run (another model, endpoint, temperature or rubric) is logged as a warning.

    Raises:
        ConfigError: both or neither of ``judge``/``judges``, an empty ``judges`` or the same
            judge twice, or a bad setting.
    """
    return _ruler(judge, judges, config, monitor, options, "ruler_scorer")


def _ruler(
    judge: Any,
    judges: Sequence[Any] | None,
    config: RulerConfig | None,
    monitor: JudgeChangeMonitor | None,
    options: dict[str, Any],
    caller: str,
) -> Scorer:
    """:func:`ruler_scorer`'s scorer; ``caller`` names the function in error messages."""
    if "swallow_exceptions" not in options and (config is None or "swallow_exceptions" not in
                                                config.model_fields_set):  # fmt: skip
        options = {**options, "swallow_exceptions": True}
    settings = resolve_config(RulerConfig, config, options)
    ensemble = _one_of(judge, judges, settings, caller)
    watch = monitor if monitor is not None else JudgeChangeMonitor()

    async def score(groups: list[TrajectoryGroup], scenarios: list[Any]) -> list[TrajectoryGroup]:
        return list(
            await ruler_score_groups(groups, judge=judge, judges=ensemble, config=settings, monitor=watch)
        )

    return score


def combined_scorer(
    judge: Any = None,
    reward: Callable[[Trajectory, Any], float] | None = None,
    weight: float = 0.5,
    config: RulerConfig | None = None,
    *,
    judges: Sequence[Any] | None = None,
    monitor: JudgeChangeMonitor | None = None,
    **options: Any,
) -> Scorer:
    """RULER and a verifiable reward mixed: ``weight * ruler + (1 - weight) * verifiable``.

    ``reward(trajectory, scenario) -> float`` is the verifiable reward; it stays in each
    trajectory's ``TrajectoryJudgement.independent_reward``, so the rows carry RULER's calibration
    against it (``calibration_spearman``...) even with ``weight=1`` (RULER alone trains). ``judge`` or
    ``judges`` (exactly one), ``monitor``, ``config`` and ``options`` are as for :func:`ruler_scorer`.

    Raises:
        ConfigError: no ``reward``, a ``weight`` outside [0, 1], or what :func:`ruler_scorer` refuses.
    """
    if reward is None:
        raise ConfigError("combined_scorer needs reward=, the verifiable reward(trajectory, scenario)")
    if not 0.0 <= weight <= 1.0:
        raise ConfigError(f"weight must be in [0, 1], got {weight}")
    verifiable = verifiable_scorer(reward)
    ruler = _ruler(judge, judges, config, monitor, options, "combined_scorer")

    async def score(groups: list[TrajectoryGroup], scenarios: list[Any]) -> list[TrajectoryGroup]:
        scored = await ruler(await verifiable(groups, scenarios), scenarios)
        weights = {TrajectoryJudgement.SCORE_METRIC: weight, TrajectoryJudgement.REFERENCE_METRIC: 1 - weight}
        return [g if unscored_reason(g) else combine_rewards(g, weights) for g in scored]

    return score
