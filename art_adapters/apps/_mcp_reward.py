"""train-mcp's rewards: RULER's judge, what the tools did, or both (``--reward judge|tools|judge+tools``)."""

from __future__ import annotations

from typing import Any, Literal

from art_adapters import (
    GroupJudgement,
    Scorer,
    TrajectoryGroup,
    combined_scorer,
    ruler_scorer,
    tool_use_reward,
    verifiable_scorer,
)

__all__ = ["EVAL_TOOLS_LINE", "REWARDS", "Reward", "eval_reward_of", "make_scorer", "resolve_reward"]

Reward = Literal["judge", "tools", "judge+tools"]
#: The ``--reward`` choices.
REWARDS: tuple[Reward, ...] = ("judge", "tools", "judge+tools")


def resolve_reward(reward: Reward | None, *, local_judge: bool) -> Reward:
    """``reward``, or its default: ``judge+tools`` when the judge is the local base model, else ``judge``.

    A small local judge often scores every rollout of a group the same, so a group carries no
    signal; what the tools did still tells the rollouts apart.
    """
    if reward is not None:
        return reward
    return "judge+tools" if local_judge else "judge"


def make_scorer(reward: Reward, judge: Any, ruler_options: dict[str, Any], weight: float = 0.5) -> Scorer:
    """The ``train_loop`` scorer of ``reward``.

    ``judge``: RULER with *judge* (``ruler_options`` are :class:`~art_adapters.RulerConfig`
    settings). ``tools``: :func:`~art_adapters.tool_use_reward` alone, no judge call.
    ``judge+tools``: ``weight * RULER + (1 - weight) * tool_use_reward``
    (:func:`~art_adapters.combined_scorer`); a group the judge could not score gets the tools'
    reward alone (``metadata["reward_fallback"]`` says why) instead of being left out.
    """
    if reward == "judge":
        return ruler_scorer(judge, **ruler_options)
    if reward == "tools":
        return verifiable_scorer(tool_use_reward)
    combined = combined_scorer(judge, reward=tool_use_reward, weight=weight, **ruler_options)
    tools = verifiable_scorer(tool_use_reward)

    async def score(groups: list[TrajectoryGroup], scenarios: list[Any]) -> list[TrajectoryGroup]:
        """``judge+tools``; a group the judge could not score (its answer did not parse, its endpoint
        failed) keeps the tools' reward alone, and says so in ``metadata["reward_fallback"]``."""
        scored = await combined(groups, scenarios)
        out = []
        for original, group, scenario in zip(groups, scored, scenarios, strict=True):
            judgement = GroupJudgement.read(group)
            if judgement is not None and judgement.status == "unscored":
                (group,) = await tools([original], [scenario])
                why = f"tools only: the judge did not score it ({judgement.reason})"
                group.metadata["reward_fallback"] = why
            out.append(group)
        return out

    return score


#: Said when held-out evaluation is scored by the tools alone (:func:`eval_reward_of`).
EVAL_TOOLS_LINE = (
    "held-out evaluation: what the tools did (the local judge's scores are mostly flat and each costs a "
    "judge call; a greedy evaluation's one rollout per scenario gives it nothing to rank)"
)


def eval_reward_of(reward: Reward, *, local_judge: bool) -> Reward:
    """What scores the held-out evaluation: *reward*, except ``tools`` for ``judge+tools`` with the
    local judge (RULER ranks a group's rollouts; a greedy evaluation group is one rollout, and the
    base model's scores are noise that costs a judge call each, sampled evaluation groups included)."""
    return "tools" if local_judge and reward == "judge+tools" else reward
