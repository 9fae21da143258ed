"""The SFT step: next-token cross-entropy on trajectories' assistant turns, on the adapter GRPO trains.

:func:`sft_sequences` turns trajectories into masked token sequences exactly as GRPO does (the
conversation builder of :mod:`.data`: exact tokens from the backend's completion records, the chat
template re-tokenising only turns without one; the loss mask is the assistant turns), with no reward
or group needed. :func:`sft_step` trains them; :func:`train_sft` does both, and is what
:meth:`.trainer.LoraTrainer.train_sft` runs for ``POST /art/models/{name}/train_sft``.

The loss of one optimizer update over sequences ``S`` with loss masks ``m``::

    L = - sum_{s in S} sum_t m[s, t] * log p(token[s, t] | tokens[s, < t]) / sum_{s in S} sum_t m[s, t]

the mean over the update's loss tokens (TRL ``SFTTrainer``'s loss with ``assistant_only_loss``),
at temperature 1, whatever temperature a recorded turn was sampled at.

Optimizer: an AdamW of its own, new for each SFT step and dropped after it (see
:class:`~art_adapters.SFTConfig`); the trainer's GRPO optimizer and its state are not touched, so
the checkpoint the step writes carries the GRPO optimizer state of the one it started from.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from pydantic import BaseModel

from art_adapters import SFTConfig, TrainConfig, Trajectory

from .data import (
    BuildMetrics,
    BuildResult,
    NothingTrainableError,
    RecordLookup,
    Renderer,
    TrainingSequence,
    _trainable,
    _trajectory_sequences,
)

if TYPE_CHECKING:
    from .trainer import LoraTrainer

__all__ = [
    "SFT_GROUP_ID", "SFTMetrics", "SFTStepResult", "nothing_trainable_reason", "sft_sequences", "sft_step",
    "train_sft",
]  # fmt: skip

logger = logging.getLogger(__name__)

#: The ``group_id`` of SFT sequences (they come from no GRPO group).
SFT_GROUP_ID = "sft"


class SFTMetrics(BaseModel):
    """What one :func:`sft_step` did.

    Attributes:
        loss: mean next-token cross-entropy (nats per loss token) over the last pass, each
            update's tokens measured just before that update.
        first_pass_loss: the same over the first pass (its first update sees the weights the
            step started from); equal to ``loss`` for one epoch.
        grad_norm: global L2 norm of the last update's gradient, before clipping.
        grad_norm_max: the largest of the step's update norms.
        epochs: passes over the sequences; updates: optimizer updates made.
        sequences: sequences trained on; micro_batches: forward/backward passes, all passes.
        tokens: loss tokens in one pass; sequence_tokens: all tokens of one pass.
        seconds: wall-clock time of the step.
        learning_rate: the step size used.
        step: SFT and GRPO steps done by this trainer so far, including this one.
    """

    loss: float
    first_pass_loss: float
    grad_norm: float
    grad_norm_max: float
    epochs: int
    updates: int
    sequences: int
    micro_batches: int
    tokens: int
    sequence_tokens: int
    seconds: float
    learning_rate: float
    step: int

    def scalars(self) -> dict[str, Any]:
        """The metrics as flat scalars, as the train API reports them: every field but ``step``."""
        return self.model_dump(exclude={"step"})


class SFTStepResult(BaseModel):
    """The outcome of :func:`train_sft`: what the data gave and what the step did.

    Attributes:
        trained: whether the step updated the weights.
        nothing_trainable_reason: why not, when ``trained`` is False (never silent).
        data: how the sequences were built (:class:`.data.BuildMetrics`; the trajectories
            count as one group).
        step: the step's metrics, ``None`` when nothing was trainable.
    """

    trained: bool
    nothing_trainable_reason: str | None = None
    data: BuildMetrics
    step: SFTMetrics | None = None


def sft_sequences(
    trajectories: Sequence[Trajectory],
    get_record: RecordLookup,
    render: Renderer | None = None,
    *,
    only_model: str | None = None,
    max_sequence_length: int | None = None,
) -> BuildResult:
    """The masked token sequences of ``trajectories``, built as :func:`.data.build_sequences` builds GRPO's.

    Each conversation (the main history and every additional one) becomes one sequence, or
    several where a turn's recorded prompt does not extend it; loss is on the assistant turns
    (exact recorded tokens where the backend served them, the chat template's tokens for the
    others), except turns marked ``generated=False`` and, with ``only_model``, other models'
    turns: those are prompt. Rewards play no part (SFT imitates); advantages are 0.0 and every
    sequence's temperature is 1.0.

    Returns:
        The sequences and their metrics; an empty list comes with a reason
        (:attr:`.data.BuildResult.nothing_trainable_reason` is for GRPO groups: use
        :func:`nothing_trainable_reason`).

    Raises:
        ValueError: a record is corrupt, or a turn without a record comes with no ``render``.
    """
    metrics = BuildMetrics(groups=1)
    sequences: list[TrainingSequence] = []
    for trajectory in trajectories:
        built = _trajectory_sequences(trajectory, get_record, render, metrics, only_model)
        kept = _trainable(trajectory, built, metrics, max_sequence_length)
        for b in kept:
            sequences.append(
                TrainingSequence(
                    token_ids=b.ids,
                    loss_mask=b.mask,
                    old_logprobs=[None] * len(b.ids),
                    advantage=0.0,
                    group_id=SFT_GROUP_ID,
                    trajectory_id=trajectory.id,
                    turns=b.turns,
                    temperature=1.0,
                )
            )
        metrics.trajectories += bool(kept)
    metrics.groups_used = int(bool(sequences))
    if not sequences:
        metrics.groups_dropped = {"no_sequences": 1}
    metrics.sequences = len(sequences)
    metrics.tokens = sum(len(s.token_ids) for s in sequences)
    metrics.loss_tokens = sum(s.loss_tokens for s in sequences)
    return BuildResult(sequences=sequences, metrics=metrics)


def nothing_trainable_reason(metrics: BuildMetrics, trajectories: int) -> str:
    """Why SFT sequences built with ``metrics`` from ``trajectories`` trajectories are empty."""
    parts = [
        f"{count} {what}"
        for count, what in (
            (metrics.trajectories_without_turns, "trajectories without an assistant turn to train"),
            (metrics.sequences_too_long, "sequences longer than max_sequence_length"),
            (metrics.sequences_without_loss, "sequences without a completion token"),
            (metrics.prompt_turns, "assistant turns marked generated=False (prompt)"),
            (metrics.other_model_turns, "assistant turns of other models than only_model (prompt)"),
            (metrics.unlocated_turns, "assistant turns the chat template could not re-tokenise"),
        )
        if count
    ]
    detail = "; ".join(parts) or "no assistant turn"
    return (
        f"nothing trainable: none of the {trajectories} trajectories gave a sequence with a loss token "
        f"({detail}); SFT trains on assistant turns: check only_model and max_sequence_length"
    )


def _adapter_config(config: SFTConfig) -> TrainConfig:
    """The TrainConfig that creates the same adapter (``lora_*``) when SFT is the model's first step."""
    return TrainConfig(
        learning_rate=config.learning_rate,
        weight_decay=config.weight_decay,
        lora_rank=config.lora_rank,
        lora_alpha=config.lora_alpha,
        lora_dropout=config.lora_dropout,
        lora_target_modules=config.lora_target_modules,
        seed=config.seed,
    )


def sft_step(trainer: LoraTrainer, sequences: Sequence[TrainingSequence], config: SFTConfig) -> SFTMetrics:
    """Train ``sequences`` with next-token cross-entropy on their loss tokens (see the module docstring).

    ``config.epochs`` passes, each over the sequences in a seeded order, one AdamW update per
    ``config.batch_size`` sequences (micro-batches of ``config.micro_batch_size`` accumulate), the
    gradient clipped to ``config.max_grad_norm``. Creates the adapter from ``config``'s ``lora_*``
    settings when the trainer has none.

    Raises:
        NothingTrainableError: no sequence, or no token carries loss.
        FloatingPointError: a loss or gradient is not finite (that update is not applied; earlier
            updates of the step were: the caller reloads the adapter from its checkpoint).
        ValueError: a malformed sequence.
    """
    from .trainer import _check_sequences

    if not sequences:
        raise NothingTrainableError("nothing trainable: the SFT step received no sequences")
    _check_sequences(sequences)
    tokens = sum(s.loss_tokens for s in sequences)
    if tokens == 0:
        raise NothingTrainableError(
            f"nothing trainable: none of the {len(sequences)} sequences has a loss token"
        )
    started = time.perf_counter()
    trainer.ensure_adapter(_adapter_config(config))
    model = trainer.model
    assert model is not None
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=config.learning_rate, weight_decay=config.weight_decay)
    if config.seed is not None:
        torch.manual_seed(config.seed + trainer.steps_done)
    max_norm = config.max_grad_norm if config.max_grad_norm is not None else float("inf")
    model.train()
    pass_losses: list[float] = []
    norms: list[float] = []
    micro_batches = 0
    for epoch in range(config.epochs):
        order = list(sequences)
        if config.seed is not None:
            random.Random(config.seed + epoch).shuffle(order)
        pass_sum = 0.0
        for start in range(0, len(order), config.batch_size):
            update = order[start : start + config.batch_size]
            update_tokens = sum(s.loss_tokens for s in update)
            optimizer.zero_grad(set_to_none=True)
            update_loss = 0.0
            for batch in trainer._micro_batches(update, config.micro_batch_size):
                trainer.check_cancelled()  # a stopping server waits for one micro-batch, not the step
                logprobs = trainer._logprobs(batch, loss_only=True)  # (B, T); exact before loss tokens
                loss = -(logprobs * batch.loss_mask).sum() / update_tokens
                loss.backward()
                update_loss += float(loss.detach())
                micro_batches += 1
            grad_norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm))
            if not (math.isfinite(update_loss) and math.isfinite(grad_norm)):
                optimizer.zero_grad(set_to_none=True)
                raise FloatingPointError(
                    f"non-finite SFT update (loss {update_loss}, grad norm {grad_norm}) in pass {epoch + 1}: "
                    "lower learning_rate or set max_grad_norm"
                )
            optimizer.step()
            norms.append(grad_norm)
            pass_sum += update_loss * update_tokens
        pass_losses.append(pass_sum / tokens)
    optimizer.zero_grad(set_to_none=True)
    trainer.steps_done += 1
    metrics = SFTMetrics(
        loss=pass_losses[-1],
        first_pass_loss=pass_losses[0],
        grad_norm=norms[-1],
        grad_norm_max=max(norms),
        epochs=config.epochs,
        updates=len(norms),
        sequences=len(sequences),
        micro_batches=micro_batches,
        tokens=tokens,
        sequence_tokens=sum(len(s.token_ids) for s in sequences),
        seconds=time.perf_counter() - started,
        learning_rate=config.learning_rate,
        step=trainer.steps_done,
    )
    logger.info(
        "SFT step: %d sequences, %d loss tokens, %d epoch(s), loss %.4f -> %.4f in %.1f s",
        metrics.sequences, tokens, config.epochs, metrics.first_pass_loss, metrics.loss, metrics.seconds,
    )  # fmt: skip
    return metrics


def train_sft(
    trainer: LoraTrainer,
    trajectories: Sequence[Trajectory],
    get_record: RecordLookup,
    render: Renderer | None,
    config: SFTConfig,
) -> SFTStepResult:
    """Build the trajectories' sequences (:func:`sft_sequences`) and train one SFT step (:func:`sft_step`).

    When no sequence has a loss token the result says why (``trained=False``), nothing is
    updated and nothing raised, as for a GRPO step without signal.
    """
    built = sft_sequences(
        trajectories, get_record, render,
        only_model=config.only_model, max_sequence_length=config.max_sequence_length,
    )  # fmt: skip
    if not built.sequences:
        reason = nothing_trainable_reason(built.metrics, len(trajectories))
        logger.warning("SFT step skipped: %s", reason)
        return SFTStepResult(trained=False, nothing_trainable_reason=reason, data=built.metrics)
    return SFTStepResult(trained=True, data=built.metrics, step=sft_step(trainer, built.sequences, config))
