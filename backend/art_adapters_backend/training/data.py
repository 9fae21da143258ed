"""Token sequences to train on, from the exact tokens the model sampled: the records, one conversation.

:func:`trajectory_sequences` joins each conversation's assistant turns into masked sequences from the
backend's completion records (re-tokenising only turns without one); :func:`trainable_sequences` keeps
those worth training. :mod:`.groups` gives them GRPO's advantages; :mod:`.sft` trains them as they are.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import BaseModel, Field

from art_adapters import Message, ToolSchema, Trajectory

from ..errors import BadRequestError

_Record = dict[str, Any]

__all__ = [
    "BuildMetrics",
    "BuildResult",
    "NothingTrainableError",
    "RecordLookup",
    "Renderer",
    "TrainingSequence",
    "TurnRewards",
    "TurnRewardsError",
    "names_policy",
    "trainable_sequences",
    "trajectory_sequences",
]

logger = logging.getLogger(__name__)

#: ``get_record(completion_id)`` -> the backend's record as a dict (or pydantic model), or None.
RecordLookup = Callable[[str], "Mapping[str, Any] | BaseModel | None"]


class Renderer(Protocol):
    """The server's chat template as token ids (``ChatTemplate.encode`` has this signature).

    It raises ``ValueError`` (``ChatTemplateError`` is one) when the template cannot render
    a history; the turn is then skipped and counted, not the whole step.
    """

    def __call__(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        *,
        add_generation_prompt: bool = True,
    ) -> list[int]:
        """Token ids of ``messages`` rendered with ``tools``, optionally ending in the generation prompt."""
        ...


class NothingTrainableError(ValueError):
    """No sequence is left to train on; the message says why (e.g. every group had equal rewards)."""


class TurnRewardsError(BadRequestError, ValueError):
    """``credit="turn"`` on a trajectory without valid ``metadata["turn_rewards"]`` (HTTP 400); names it."""


#: Where a trajectory carries its per-turn rewards: ``ruler_score_group(..., per_turn=True)`` puts them there.
_TURN_REWARDS = "turn_rewards"


class TurnRewards(BaseModel):
    """A scored trajectory's per-turn rewards (``metadata["turn_rewards"]``), read and checked once.

    Attributes:
        rewards: one finite number per assistant message of the trajectory's ``messages``, in order.
    """

    rewards: list[float]

    @classmethod
    def of(cls, trajectory: Trajectory, *, where: str, group_id: str) -> TurnRewards:
        """The turn rewards of ``trajectory`` (at ``where`` in the request, in group ``group_id``).

        Raises:
            TurnRewardsError: none, not a list of finite numbers, or not one per assistant message;
                the message names the trajectory, where it is and what to change.
        """
        rewards = trajectory.metadata.get(_TURN_REWARDS)
        expected = sum(message.role == "assistant" for message in trajectory.messages)
        if rewards is None:
            problem = f"has no metadata[{_TURN_REWARDS!r}]"
        elif not isinstance(rewards, list) or any(
            isinstance(r, bool) or not isinstance(r, int | float) or not math.isfinite(r) for r in rewards
        ):
            problem = f"has metadata[{_TURN_REWARDS!r}] = {rewards!r}, not a list of finite numbers"
        elif len(rewards) != expected:
            problem = (
                f"has {len(rewards)} turn reward(s) in metadata[{_TURN_REWARDS!r}] but {expected} assistant "
                "message(s) in its messages"
            )
        else:
            return cls(rewards=[float(r) for r in rewards])
        fix = (
            "score the group with ruler_score_group(..., per_turn=True) (or set one reward per assistant "
            "message of messages), or train it with credit='trajectory'"
        )
        raise TurnRewardsError(
            f"credit='turn': trajectory {trajectory.id!r} ({where}, group {group_id!r}) {problem}; {fix}",
            param=f"{where}.metadata.{_TURN_REWARDS}",
            code="missing_turn_rewards",
        )


class TrainingSequence(BaseModel):
    """One conversation's tokens, ready for the trainer.

    All three lists have one entry per token. ``old_logprobs[t]`` is the sampling
    log-probability of ``token_ids[t]`` (``None`` where unknown or outside the mask).

    Attributes:
        token_ids: prompt and completion tokens, in order.
        loss_mask: 1 on tokens the model sampled (trained), 0 elsewhere.
        old_logprobs: sampling log-probs on masked-in tokens, ``None`` where unknown.
        advantage: the trajectory's group-relative advantage; with per-turn credit the mean of
            ``token_advantages`` over the loss tokens.
        token_advantages: per-turn credit only (``None`` otherwise): one value per token, on a
            loss token the advantage of the assistant turn it belongs to, 0.0 elsewhere.
        group_id: the group it came from.
        trajectory_id: the trajectory it came from.
        turns: assistant turns (completions) in this sequence.
        temperature: the sampling temperature its recorded completions used; the trainer
            divides the logits by it so ratios compare like with like (1.0 for greedy
            decoding and for re-tokenised turns).
    """

    token_ids: list[int]
    loss_mask: list[int]
    old_logprobs: list[float | None]
    advantage: float
    token_advantages: list[float] | None = None
    group_id: str
    trajectory_id: str
    turns: int = 0
    temperature: float = Field(default=1.0, gt=0.0)

    @property
    def loss_tokens(self) -> int:
        """Number of tokens that carry loss."""
        return sum(self.loss_mask)


class BuildMetrics(BaseModel):
    """What :func:`.groups.build_sequences` used, dropped and why.

    Attributes:
        groups: groups received.
        groups_used: groups that produced at least one sequence.
        groups_dropped: reason -> count (``zero_variance``: all rewards equal;
            ``too_few_scored``: fewer than two trajectories with a reward;
            ``no_sequences``: no assistant turn to train on, or all too long).
        trajectories: trajectories that produced at least one sequence.
        trajectories_unscored: trajectories skipped because their reward is ``None``.
        trajectories_without_turns: scored trajectories with no assistant turn.
        sequences: sequences returned.
        sequences_too_long: sequences dropped for exceeding ``max_sequence_length``.
        sequences_without_loss: sequences dropped because no token in them was sampled
            (e.g. every completion was empty: the model stopped at once).
        tokens: tokens in the returned sequences.
        loss_tokens: tokens that carry loss.
        record_turns: assistant turns built from exact-token records.
        fallback_turns: assistant turns re-tokenised (no record).
        missing_records: turns whose ``completion_id`` had no record (included in fallback_turns).
        prompt_turns: assistant turns skipped as prompt because they are marked
            ``generated=False`` (not produced by the model in this run, e.g. a few-shot
            example); counted once per history they appear in.
        other_model_turns: assistant turns skipped as prompt because another model than the
            policy produced them (a planner, a summariser); counted once per history they
            appear in. Always 0 when no ``policy`` is given.
        unlocated_turns: turns without a record that could not be re-tokenised (the template
            refused the history, or rendering the turn changed the tokens before it);
            skipped with a warning, so they are context for later turns, never loss.
        extended_turns: turns that joined the sequence of the turn before them (their recorded
            prompt extended it). Per conversation, ``extended_turns + prefix_breaks +
            temperature_breaks`` is its trained turns minus one.
        prefix_breaks: times a turn did not extend its conversation, so a new sequence started
            at that turn's own prompt (a template that rewrites history, e.g. Qwen3 dropping
            earlier thinking, or a re-rendered tool call).
        temperature_breaks: times a turn was sampled at another temperature than the turns
            before it, so a new sequence started (one temperature per sequence).
        duplicate_turns: turns seen twice in one trajectory's histories (used once).
        reward_mean / reward_std: over the scored trajectories of used groups.
    """

    groups: int = 0
    groups_used: int = 0
    groups_dropped: dict[str, int] = Field(default_factory=dict)
    trajectories: int = 0
    trajectories_unscored: int = 0
    trajectories_without_turns: int = 0
    sequences: int = 0
    sequences_too_long: int = 0
    sequences_without_loss: int = 0
    tokens: int = 0
    loss_tokens: int = 0
    record_turns: int = 0
    fallback_turns: int = 0
    missing_records: int = 0
    prompt_turns: int = 0
    other_model_turns: int = 0
    unlocated_turns: int = 0
    extended_turns: int = 0
    prefix_breaks: int = 0
    temperature_breaks: int = 0
    duplicate_turns: int = 0
    reward_mean: float | None = None
    reward_std: float | None = None


class BuildResult(BaseModel):
    """The sequences to train on and the metrics of how they were built."""

    sequences: list[TrainingSequence]
    metrics: BuildMetrics

    @property
    def nothing_trainable_reason(self) -> str | None:
        """Why there is nothing to train on, or ``None`` when there is."""
        if self.sequences:
            return None
        m = self.metrics
        if m.groups == 0:
            return "no trajectory groups were given"
        reasons = ", ".join(
            f"{count} {reason.replace('_', ' ')}" for reason, count in sorted(m.groups_dropped.items())
        )
        reason = (
            f"nothing trainable: all {m.groups} group(s) were dropped ({reasons}); groups need at least two "
            "scored trajectories with different rewards and an assistant turn that fits max_sequence_length"
        )
        if m.other_model_turns:
            reason += (
                f"; {m.other_model_turns} assistant turn(s) came from other models than the one being "
                "trained and are prompt, not loss (sample the rollouts from the trained model's name)"
            )
        return reason


# --------------------------------------------------------------------------- one conversation


@dataclass
class _Turn:
    """One assistant turn's tokens; ``temperature`` None when unknown (re-tokenised)."""

    prompt: list[int]
    completion: list[int]
    logprobs: list[float | None]
    temperature: float | None = None


@dataclass
class _Built:
    """One finished conversation sequence, before it gets its advantage.

    ``advantages``: per token, the advantage its turn was added with (0.0 outside completions).
    """

    ids: list[int]
    mask: list[int]
    logprobs: list[float | None]
    turns: int
    temperature: float
    advantages: list[float] = field(default_factory=list)

    def training_sequence(
        self,
        group_id: str,
        trajectory_id: str,
        advantage: float = 0.0,
        *,
        turn_credit: bool = False,
        imitation: bool = False,
    ) -> TrainingSequence:
        """This sequence for the trainer, with the trajectory's ``advantage``.

        ``turn_credit``: each loss token keeps the advantage its turn was added with (``advantages``)
        and the sequence's ``advantage`` is their mean. ``imitation`` (SFT): no old logprobs, and
        temperature 1.0.
        """
        token_advantages = None
        if turn_credit:
            token_advantages = [a if m else 0.0 for a, m in zip(self.advantages, self.mask, strict=True)]
            advantage = sum(token_advantages) / sum(self.mask)
        return TrainingSequence(
            token_ids=self.ids,
            loss_mask=self.mask,
            old_logprobs=[None] * len(self.ids) if imitation else self.logprobs,
            advantage=advantage,
            token_advantages=token_advantages,
            group_id=group_id,
            trajectory_id=trajectory_id,
            turns=self.turns,
            temperature=1.0 if imitation else self.temperature,
        )


class _Builder:
    """Accumulates the sequences of one trajectory's conversations."""

    def __init__(self, metrics: BuildMetrics) -> None:
        self.metrics = metrics
        self.done: list[_Built] = []
        self.ids: list[int] = []
        self.mask: list[int] = []
        self.logprobs: list[float | None] = []
        self.advantages: list[float] = []
        self.turns = 0
        self.temperature: float | None = None

    def close(self) -> None:
        if self.turns:
            temperature = self.temperature or 1.0
            built = _Built(self.ids, self.mask, self.logprobs, self.turns, temperature, self.advantages)
            self.done.append(built)
        self.ids, self.mask, self.logprobs, self.turns, self.temperature = [], [], [], 0, None
        self.advantages = []

    def add_turn(self, turn: _Turn, advantage: float = 0.0) -> None:
        """Append one turn: the prompt must extend the sequence so far, else a new one starts.

        ``advantage`` is recorded on the turn's completion tokens (per-turn credit).
        """
        prompt, completion, logprobs = turn.prompt, turn.completion, turn.logprobs
        if self.turns and prompt[: len(self.ids)] != self.ids:
            self.metrics.prefix_breaks += 1
            self.close()
        elif self.turns and turn.temperature is not None and self.temperature not in (None, turn.temperature):
            self.metrics.temperature_breaks += 1
            self.close()
        elif self.turns:
            self.metrics.extended_turns += 1
        if turn.temperature is not None:
            self.temperature = turn.temperature
        new_context = prompt[len(self.ids) :]
        self.ids.extend(new_context)
        self.mask.extend([0] * len(new_context))
        self.logprobs.extend([None] * len(new_context))
        self.advantages.extend([0.0] * len(new_context))
        start = len(self.ids)
        self.ids.extend(completion)
        self.mask.extend([1] * len(completion))
        self.logprobs.extend(logprobs)
        self.advantages.extend([advantage] * len(completion))
        if start == 0 and completion:  # no context to predict the first token from
            self.mask[0], self.logprobs[0], self.advantages[0] = 0, None, 0.0
        self.turns += 1


def _lookup(message: Message, get_record: RecordLookup) -> _Record | None:
    """The message's completion record as a dict, or None when it has none."""
    if message.completion_id is None:
        return None
    record = get_record(message.completion_id)
    if record is None:
        return None
    return record.model_dump() if isinstance(record, BaseModel) else dict(record)


def _served_step(model: str) -> tuple[str, int | None]:
    """``name@<step>`` as ``(name, step)``; any other model string as ``(model, None)``."""
    name, at, step = model.rpartition("@")
    return (name, int(step)) if at and step.isdigit() else (model, None)


def names_policy(model: str, policy: str) -> bool:
    """Whether a served model name is the policy: ``policy`` itself or ``policy@<step>``."""
    if model == policy:
        return True
    name, step = _served_step(model)
    return step is not None and name == policy


def _is_policy_turn(message: Message, data: _Record | None, policy: str | None) -> bool:
    """Whether ``policy`` produced the turn (always, when no policy is given); see :func:`.groups.build_sequences`.

    ``policy`` is a registered name (its turns of every step) or ``name@step`` (that checkpoint's
    turns only; SFT's ``only_model`` may name one).
    """
    if policy is None:
        return True
    if data is not None:
        name, step = _served_step(policy)
        return data.get("trained_model") == name and (step is None or data.get("step") == step)
    return message.model is None or names_policy(message.model, policy)


def _record_turn(message: Message, data: _Record) -> _Turn | None:
    """The turn from the message's record, or None when the record has no such choice."""
    choice = next((c for c in data.get("choices", []) if c.get("index", 0) == message.choice_index), None)
    if choice is None:
        return None
    prompt = list(data["prompt_token_ids"])
    completion = list(choice["completion_token_ids"])
    temperature = data.get("temperature")
    # Greedy decoding records log-probs of the untempered distribution (temperature 1).
    temperature = 1.0 if not temperature or temperature <= 0 else float(temperature)
    logprobs = choice.get("logprobs")
    if logprobs is None:
        return _Turn(prompt, completion, [None] * len(completion), temperature)
    if len(logprobs) != len(completion):
        raise ValueError(
            f"record {message.completion_id!r} choice {message.choice_index}: {len(logprobs)} logprobs for "
            f"{len(completion)} completion tokens; the record is corrupt (re-serve the turn or drop the trajectory)"
        )
    return _Turn(prompt, completion, [float(x) for x in logprobs], temperature)


def _fallback_turn(
    history: Sequence[Message], index: int, tools: Sequence[ToolSchema] | None, render: Renderer
) -> _Turn:
    """Re-tokenise turn ``index``: prompt = history with generation prompt; completion = what the turn adds."""
    tool_dicts = [t.model_dump(exclude_none=True) for t in tools] if tools else None
    before = [m.to_openai() for m in history[:index]]
    prompt = list(render(before, tool_dicts, add_generation_prompt=True))
    full = list(render([*before, history[index].to_openai()], tool_dicts, add_generation_prompt=False))
    if full[: len(prompt)] != prompt:
        raise ValueError(
            "the chat template is not prefix-stable: rendering an assistant turn changed the tokens of the "
            "history before it, so its completion tokens cannot be located; use a template that renders "
            "turns independently (the server's ChatTemplate does)"
        )
    completion = full[len(prompt) :]
    return _Turn(prompt, completion, [None] * len(completion))


# shape: one walk over a trajectory's histories with one builder and one set of seen turns
def trajectory_sequences(
    trajectory: Trajectory,
    get_record: RecordLookup,
    render: Renderer | None,
    metrics: BuildMetrics,
    policy: str | None,
    turn_advantages: Sequence[float] | None = None,
) -> list[_Built]:
    """The trajectory's sequences; ``turn_advantages`` (per-turn credit): one per assistant message of
    the main history, recorded on that turn's tokens; turns of other histories get their mean."""
    builder = _Builder(metrics)
    seen: set[tuple[str, int]] = set()
    elsewhere = sum(turn_advantages) / len(turn_advantages) if turn_advantages else 0.0
    for number, history in enumerate(trajectory.histories()):
        ordinal = -1  # the assistant message's position among the main history's assistant messages
        for index, message in enumerate(history.messages):
            if message.role != "assistant":
                continue
            ordinal += 1
            advantage = elsewhere
            if turn_advantages is not None and number == 0:
                advantage = turn_advantages[ordinal]
            # Skipped turns are prompt: masked out, they enter via the next trained turn's prompt.
            if message.generated is False:
                metrics.prompt_turns += 1
                continue
            data = _lookup(message, get_record)
            if not _is_policy_turn(message, data, policy):
                metrics.other_model_turns += 1
                continue
            if message.completion_id is not None:
                key = (message.completion_id, message.choice_index)
                if key in seen:
                    metrics.duplicate_turns += 1
                    continue
                seen.add(key)
            turn = _record_turn(message, data) if data is not None else None
            if turn is None:
                if message.completion_id is not None:
                    metrics.missing_records += 1
                if render is None:
                    raise ValueError(
                        f"trajectory {trajectory.id!r}: assistant turn {index} has no completion record and no "
                        "render callable was given to re-tokenise it; pass render=<chat template encode>"
                    )
                try:
                    turn = _fallback_turn(history.messages, index, history.tools, render)
                except ValueError as exc:
                    metrics.unlocated_turns += 1
                    logger.warning(
                        "trajectory %s: assistant turn %d has no record and cannot be re-tokenised; it is "
                        "skipped (context for later turns, no loss): %s",
                        trajectory.id,
                        index,
                        exc,
                    )
                    continue
                metrics.fallback_turns += 1
            else:
                metrics.record_turns += 1
            builder.add_turn(turn, advantage)
        builder.close()  # each history is its own conversation
    return builder.done


def trainable_sequences(
    trajectory: Trajectory, built: Sequence[_Built], metrics: BuildMetrics, max_sequence_length: int | None
) -> list[_Built]:
    """The sequences of ``built`` (``trajectory``'s) worth training: those with a loss token and at
    most ``max_sequence_length`` tokens (``None``: any length).

    What is left out is counted in ``metrics``: a trajectory without a sequence
    (``trajectories_without_turns``), a sequence without a loss token (``sequences_without_loss``),
    a longer one (``sequences_too_long``, also logged). GRPO (:func:`.groups.build_sequences`) and SFT
    (:func:`.sft.sft_sequences`) filter alike.
    """
    if not built:
        metrics.trajectories_without_turns += 1
        return []
    kept: list[_Built] = []
    for b in built:
        if not any(b.mask):
            metrics.sequences_without_loss += 1
            continue
        if max_sequence_length is not None and len(b.ids) > max_sequence_length:
            metrics.sequences_too_long += 1
            logger.warning(
                "dropping a %d-token sequence of trajectory %s (max_sequence_length=%d)",
                len(b.ids), trajectory.id, max_sequence_length,
            )  # fmt: skip
            continue
        kept.append(b)
    return kept
