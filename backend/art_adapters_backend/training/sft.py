"""SFT as an objective over the trainer's update loop: next-token cross-entropy on assistant turns.

:func:`sft_sequences` builds masked sequences as GRPO does (exact recorded tokens; loss on the assistant
turns), no reward needed; :class:`SftObjective` is the step :meth:`.trainer.LoraTrainer.sft_step` runs
(``POST /art/models/{name}/train_sft``). One update's loss over sequences ``S`` with masks ``m``::

    L = - sum_{s in S} sum_t m[s, t] * log p(token[s, t] | tokens[s, < t]) / sum_{s in S} sum_t m[s, t]
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from pydantic import BaseModel

from art_adapters import SFTConfig, TrainConfig, Trajectory

from .batches import Batch, micro_batches
from .data import (
    BuildMetrics,
    BuildResult,
    RecordLookup,
    Renderer,
    TrainingSequence,
    trainable_sequences,
    trajectory_sequences,
)
from .step import Objective, Update, UpdateResult

if TYPE_CHECKING:
    from .trainer import LoraTrainer

__all__ = [
    "SFT_GROUP_ID", "SFTMetrics", "SFTStepResult", "SftObjective", "nothing_trainable_reason", "sft_sequences",
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
    """The masked token sequences of ``trajectories``, built as :func:`.groups.build_sequences` builds GRPO's.

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
        built = trajectory_sequences(trajectory, get_record, render, metrics, only_model)
        kept = trainable_sequences(trajectory, built, metrics, max_sequence_length)
        sequences += [b.training_sequence(SFT_GROUP_ID, trajectory.id, imitation=True) for b in kept]
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


class SftObjective(Objective):
    """One SFT step of ``config`` over the trainer's update loop (see the module docstring).

    ``config.epochs`` passes, each over the sequences in a seeded order, one update per
    ``config.batch_size`` sequences (micro-batches of ``config.micro_batch_size`` accumulate), the
    gradient clipped to ``config.max_grad_norm``. The optimizer is an AdamW of the step's own, new
    for each SFT step and dropped after it (see :class:`~art_adapters.SFTConfig`): the trainer's
    GRPO optimizer and its state are not touched, so the checkpoint the step writes carries the
    GRPO optimizer state of the one it started from. A non-finite update raises
    :class:`FloatingPointError` and leaves the weights as they were before the step, as in GRPO.
    """

    name = "SFT"

    def __init__(self, config: SFTConfig) -> None:
        self.config = config
        self.seed = config.seed
        self.max_grad_norm = config.max_grad_norm

    def adapter_config(self) -> TrainConfig:
        """The TrainConfig that creates the same adapter (``lora_*``) when SFT is the model's first step."""
        return TrainConfig(learning_rate=self.config.learning_rate, **self.config.adapter_settings())

    def optimizer(self, trainer: LoraTrainer) -> torch.optim.Optimizer:
        """A new AdamW over the adapter's weights, dropped after the step."""
        assert trainer.model is not None
        params = [p for p in trainer.model.parameters() if p.requires_grad]
        return torch.optim.AdamW(params, lr=self.config.learning_rate, weight_decay=self.config.weight_decay)

    def plan(self, trainer: LoraTrainer, sequences: Sequence[TrainingSequence]) -> list[list[Update]]:
        """``epochs`` passes over the sequences (shuffled by ``seed + epoch``), ``batch_size`` per update."""
        config = self.config
        passes = []
        for epoch in range(config.epochs):
            order = list(sequences)
            if config.seed is not None:
                random.Random(config.seed + epoch).shuffle(order)
            passes.append([
                Update(
                    micro_batches(
                        chunk, config.micro_batch_size, trainer.pad_token_id, trainer.device,
                        config.share_prefix, max_tokens=config.micro_batch_tokens,
                    ),
                    sum(s.loss_tokens for s in chunk),
                )
                for chunk in (order[i : i + config.batch_size] for i in range(0, len(order), config.batch_size))
            ])  # fmt: skip
        return passes

    def micro_loss(self, trainer: LoraTrainer, batch: Batch, update: Update) -> tuple[torch.Tensor, Any]:
        """Summed next-token cross-entropy on the loss tokens, over the update's loss tokens."""
        logprobs = trainer.logprobs(batch, loss_only=True)  # (B, T); exact before loss tokens
        return -(logprobs * batch.loss_mask).sum() / update.tokens, None

    def metrics(
        self, trainer: LoraTrainer, sequences: Sequence[TrainingSequence], done: list[UpdateResult], seconds: float
    ) -> SFTMetrics:
        """The last and first passes' mean loss per token, gradient norms, counts."""
        tokens = sum(s.loss_tokens for s in sequences)
        pass_losses = [
            sum(r.loss * r.update.tokens for r in done if r.pass_index == epoch) / tokens
            for epoch in range(self.config.epochs)
        ]
        norms = [r.grad_norm for r in done]
        metrics = SFTMetrics(
            loss=pass_losses[-1],
            first_pass_loss=pass_losses[0],
            grad_norm=norms[-1],
            grad_norm_max=max(norms),
            epochs=self.config.epochs,
            updates=len(done),
            sequences=len(sequences),
            micro_batches=sum(len(r.update.batches) for r in done),
            tokens=tokens,
            sequence_tokens=sum(len(s.token_ids) for s in sequences),
            seconds=seconds,
            learning_rate=self.config.learning_rate,
            step=trainer.steps_done,
        )
        logger.info(
            "SFT step: %d sequences, %d loss tokens, %d epoch(s), loss %.4f -> %.4f in %.1f s",
            metrics.sequences, tokens, self.config.epochs, metrics.first_pass_loss, metrics.loss, metrics.seconds,
        )  # fmt: skip
        return metrics
