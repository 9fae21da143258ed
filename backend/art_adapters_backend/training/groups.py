"""Trajectory groups -> token sequences to train on: :func:`build_sequences`, GRPO's data step.

Each conversation becomes masked sequences (:func:`.data.trajectory_sequences`: exact recorded tokens,
re-tokenising only turns without a record); each gets its group's advantage (``credit="trajectory"``),
or each of its turns that turn's advantage within the group (``credit="turn"``).
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Sequence
from typing import Literal

import torch

from art_adapters import TrajectoryGroup

from .data import (
    BuildMetrics,
    BuildResult,
    RecordLookup,
    Renderer,
    TrainingSequence,
    TurnRewards,
    trainable_sequences,
    trajectory_sequences,
)
from .grpo import group_advantages, is_zero_variance

__all__ = ["build_sequences", "check_turn_rewards"]

logger = logging.getLogger(__name__)


def check_turn_rewards(groups: Sequence[TrajectoryGroup]) -> list[list[TurnRewards | None]]:
    """Check that every scored trajectory carries per-turn rewards (``credit="turn"``); return them.

    A trajectory with a ``reward`` must have ``metadata["turn_rewards"]``: a list of finite numbers,
    one per assistant message of its main history (``messages``), in order, as
    ``ruler_score_group(..., per_turn=True)`` stores them (:class:`.data.TurnRewards`). Unscored
    trajectories are not checked (they are skipped, as under per-trajectory credit).

    Returns:
        Per group, per trajectory: its :class:`.data.TurnRewards`, or ``None`` when it is unscored.

    Raises:
        TurnRewardsError: (a ``ValueError``; HTTP 400 through the train API) naming the first
            trajectory that fails, where it is in the request and what to change.
    """
    return [
        [
            TurnRewards.of(trajectory, where=f"groups[{g}].trajectories[{t}]", group_id=group.id)
            if trajectory.reward is not None
            else None
            for t, trajectory in enumerate(group.trajectories)
        ]
        for g, group in enumerate(groups)
    ]


def _turn_advantages(scored: Sequence[TurnRewards], scale: bool) -> list[list[float] | None] | None:
    """Per-turn advantages of one group: its scored trajectories' turn rewards pooled and normalised,
    split back per trajectory (``None`` when they are all equal: no signal)."""
    counts = [len(t.rewards) for t in scored]
    rewards = torch.tensor([r for t in scored for r in t.rewards], dtype=torch.float64)  # (sum of turns,)
    if is_zero_variance(rewards):
        return None
    flat = group_advantages(rewards, scale=scale).tolist()
    out: list[list[float] | None] = []
    start = 0
    for count in counts:
        out.append(flat[start : start + count])
        start += count
    return out


# shape: one pass over a step's groups filling one BuildMetrics; its parts are named helpers
def build_sequences(
    groups: Sequence[TrajectoryGroup],
    get_record: RecordLookup,
    render: Renderer | None = None,
    *,
    policy: str | None = None,
    scale_rewards: bool = True,
    max_sequence_length: int | None = None,
    credit: Literal["trajectory", "turn"] = "trajectory",
) -> BuildResult:
    """Turn scored trajectory groups into training sequences with advantages.

    For every assistant turn the backend served, its completion record gives the prompt token
    ids it rendered and the completion token ids it sampled, with their log-probabilities.
    One conversation becomes one sequence::

        [prompt of turn 1][completion 1][tool output, next user turn, template][completion 2]...
         mask 0            mask 1        mask 0                                 mask 1

    Each later turn's recorded prompt must extend the sequence built so far for the turn to
    join it (``BuildMetrics.extended_turns`` counts those). Templates do not guarantee it: the
    agent may rewrite its history, a template may re-render a tool call differently from how it
    was sampled, or drop earlier turns' thinking (Qwen3). Then the sequence so far is closed and
    a new one starts at that turn's own recorded prompt, so a conversation whose every turn
    breaks becomes one sequence per turn: nothing is truncated or re-tokenised, every trained
    token is one the model sampled, and ``BuildMetrics.prefix_breaks`` counts it.

    Turns without a record (served elsewhere, or the record is gone) are re-tokenised with a
    ``render`` callable, the server's chat template: the prompt is the history rendered with
    the generation prompt, the completion is what rendering the assistant message adds after
    it (its content and end-of-turn tokens). Their sampling log-probs are unknown (NaN in
    tensors): the trainer uses its own, so their ratio is 1. ``BuildMetrics.fallback_turns``
    counts them. A turn the template cannot locate (rendering it changes the tokens of the
    history before it, or the template refuses the history) is skipped with a warning and
    counted in ``BuildMetrics.unlocated_turns``; it stays in later turns' prompts as context.

    Assistant turns marked ``generated=False`` (capture saw them only in the model's input,
    never as its output: a hand-written few-shot example, history from an earlier run) were
    not sampled by the model, so they are prompt: they get no loss and are not a turn of their
    own; their tokens still enter the sequence, masked out, as part of the next trained turn's
    prompt. ``BuildMetrics.prompt_turns`` counts them. Turns marked ``True`` or ``None``
    (unknown: hand-built trajectories, older JSON) are trained as described above.

    Graphs with several models (a hosted planner, a summariser beside the trained policy) train
    only the policy's turns when ``policy`` names it: a turn with a record is the policy's when
    the record's ``trained_model`` is the policy; a turn without one when its ``Message.model``
    is unknown (``None``) or names the policy (``name`` or ``name@step``). Any other assistant
    turn is treated like a ``generated=False`` one: context, never loss, counted in
    ``BuildMetrics.other_model_turns``.

    Advantages are per trajectory from its group's rewards (see :mod:`.grpo`); groups whose
    rewards are all equal carry no signal and are dropped and counted, never trained as zeros.

    With ``credit="turn"`` (per-turn credit, ``docs/training.md``) every scored trajectory must
    carry ``metadata["turn_rewards"]``, one per assistant message of its main history
    (:func:`check_turn_rewards`). The group's turn rewards, all turns of all its scored
    trajectories pooled, are normalised like rewards (``A_ij = (r_ij - mean) / (std + 1e-4)``,
    without the std when ``scale_rewards`` is off), and each loss token gets the advantage of
    the turn it was sampled in (:attr:`TrainingSequence.token_advantages`); turns of additional
    histories, which the judge did not see, get the mean of their trajectory's turn advantages.
    A group whose turn rewards are all equal is dropped as ``zero_variance``.

    Args:
        groups: the groups of one training step.
        get_record: completion id -> the backend's exact-token record (dict with
            ``prompt_token_ids`` and ``choices[{index, completion_token_ids, logprobs}]``), or None.
        render: the chat template for turns without a record (see :class:`Renderer`); when
            ``None``, such a turn is an error.
        policy: the name of the model being trained; only its assistant turns get loss, other
            models' turns are prompt (see above). ``None`` trains every turn
            not marked ``generated=False``.
        scale_rewards: divide advantages by the group's reward std (``TrainConfig.scale_rewards``).
        max_sequence_length: drop (and count) longer sequences; ``None`` keeps all.
        credit: ``"trajectory"`` (default): one advantage per trajectory; ``"turn"``: one per
            assistant turn, from ``metadata["turn_rewards"]`` (``TrainConfig.credit``).

    Returns:
        The sequences, and metrics saying what was used and what was dropped and why. An empty
        ``sequences`` list comes with :attr:`BuildResult.nothing_trainable_reason`.

    Raises:
        ValueError: a record is corrupt, a turn without a record comes with no ``render``, or
            a reward is not finite. (A turn the template cannot re-tokenise is skipped and
            counted, not raised.)
        TurnRewardsError: ``credit="turn"`` and a scored trajectory without valid turn rewards.
    """
    if credit not in ("trajectory", "turn"):
        raise ValueError(f"credit must be 'trajectory' or 'turn', got {credit!r}")
    turn_rewards = check_turn_rewards(groups) if credit == "turn" else [[] for _ in groups]
    metrics = BuildMetrics(groups=len(groups))
    dropped: Counter[str] = Counter()
    sequences: list[TrainingSequence] = []
    used_rewards: list[float] = []
    for group, turns in zip(groups, turn_rewards, strict=True):
        scored = [t for t in group.trajectories if t.reward is not None]
        metrics.trajectories_unscored += len(group.trajectories) - len(scored)
        if len(scored) < 2:
            dropped["too_few_scored"] += 1
            continue
        rewards = torch.tensor([float(t.reward) for t in scored], dtype=torch.float64)  # type: ignore[arg-type]
        if not torch.isfinite(rewards).all():
            raise ValueError(f"group {group.id!r} has a non-finite reward: {rewards.tolist()}")
        per_turn: list[list[float] | None] = [None] * len(scored)
        if credit == "turn":
            per_turn = _turn_advantages([r for r in turns if r is not None], scale_rewards)
            if per_turn is None:
                dropped["zero_variance"] += 1
                continue
            advantages = [0.0] * len(scored)  # unused: each sequence's mean follows from its tokens
        elif is_zero_variance(rewards):
            dropped["zero_variance"] += 1
            continue
        else:
            advantages = group_advantages(rewards, scale=scale_rewards).tolist()
        group_sequences: list[TrainingSequence] = []
        used_trajectories = 0
        for trajectory, advantage, turn_advantages in zip(scored, advantages, per_turn, strict=True):
            built = trajectory_sequences(trajectory, get_record, render, metrics, policy, turn_advantages)
            kept = trainable_sequences(trajectory, built, metrics, max_sequence_length)
            turn_credit = turn_advantages is not None
            group_sequences += [
                b.training_sequence(group.id, trajectory.id, advantage, turn_credit=turn_credit) for b in kept
            ]
            used_trajectories += bool(kept)
        if not group_sequences:
            dropped["no_sequences"] += 1
            continue
        metrics.groups_used += 1
        metrics.trajectories += used_trajectories
        used_rewards.extend(rewards.tolist())
        sequences.extend(group_sequences)
    metrics.groups_dropped = dict(dropped)
    metrics.sequences = len(sequences)
    metrics.tokens = sum(len(s.token_ids) for s in sequences)
    metrics.loss_tokens = sum(s.loss_tokens for s in sequences)
    if used_rewards:
        mean = sum(used_rewards) / len(used_rewards)
        metrics.reward_mean = mean
        metrics.reward_std = math.sqrt(sum((r - mean) ** 2 for r in used_rewards) / len(used_rewards))
    return BuildResult(sequences=sequences, metrics=metrics)
