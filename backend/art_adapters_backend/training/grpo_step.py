"""GRPO as an objective over the trainer's update loop: mini-batch layout, the clipped surrogate, metrics.

The loss is :func:`.grpo.grpo_loss`; the loop is :meth:`.trainer.LoraTrainer.run_step` (see :mod:`.step`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from pydantic import BaseModel, Field

from art_adapters import TrainConfig

from .batches import Batch, micro_batches, split_mini_batches
from .data import BuildMetrics, TrainingSequence
from .grpo import BatchTotals, LossSettings, grpo_loss
from .step import Objective, Update, UpdateResult

if TYPE_CHECKING:
    from .trainer import LoraTrainer

__all__ = ["GroupsStepResult", "GrpoObjective", "PassMetrics", "StepMetrics", "schedule_inputs"]


class PassMetrics(BaseModel):
    """One pass over the step's sequences (:attr:`~art_adapters.TrainConfig.num_iterations`).

    Attributes:
        loss: mean of the pass's update losses (each as optimised, normalised over its mini-batch).
        clip_low_fraction / clip_high_fraction: the pass's loss tokens clipped on each side,
            measured just before each update (see :class:`.grpo.LossOutput`).
        ratio_mean: mean importance ratio over the pass's loss tokens (1.0 when on-policy;
            moves off 1 from the second update on).
        policy_shift: mean over the pass's loss tokens of advantage x log-ratio, each measured
            just before its update: from the second pass on, positive when the earlier updates
            moved probability toward the tokens with positive advantage and away from those with
            negative, as GRPO should (about 0 in the first pass, which is on-policy).
    """

    loss: float
    clip_low_fraction: float
    clip_high_fraction: float
    ratio_mean: float
    policy_shift: float


class StepMetrics(BaseModel):
    """What one :meth:`LoraTrainer.train_step` did (one step: one checkpoint, ``updates`` updates).

    The loss, KL, clip and ratio values are means over all the step's updates (token-weighted for
    the per-token ones), so with one update (the default) they are that update's.

    Attributes:
        loss: the loss (policy loss + beta x KL) as optimised, mean over the updates.
        policy_loss: the surrogate part alone, mean over the updates.
        kl: mean per-token KL to the reference (adapter disabled); ``None`` when ``beta == 0``.
        grad_norm: global L2 norm of the LoRA gradient before clipping, mean over the updates.
        clip_fraction: loss tokens whose ratio was clipped where it mattered (both sides).
        clip_low_fraction / clip_high_fraction: the two sides of ``clip_fraction``.
        ratio_mean: mean importance ratio over loss tokens (1.0 when fully on-policy).
        sequences: sequences trained on; micro_batches: forward/backward passes of one pass.
        tokens: loss tokens; sequence_tokens: all tokens of the sequences (prompt, context,
            completions).
        padded_tokens: tokens fed in one pass, right-padding included (a shared prefix counts once).
        seconds: wall-clock time of the step.
        learning_rate: the step size used (the step's value of ``lr_schedule``).
        step: training steps done by this trainer's adapter so far, including this one (the
            model's step number when the trainer holds the model's latest checkpoint).
        updates: optimizer updates made: ``num_iterations`` x mini-batches with loss tokens.
        passes: per pass (``num_iterations`` of them, in order): loss, clip fractions, ratio.
    """

    loss: float
    policy_loss: float
    kl: float | None
    grad_norm: float
    clip_fraction: float
    clip_low_fraction: float
    clip_high_fraction: float
    ratio_mean: float
    sequences: int
    micro_batches: int
    tokens: int
    sequence_tokens: int
    padded_tokens: int
    seconds: float
    learning_rate: float
    step: int
    updates: int = 1
    passes: list[PassMetrics] = Field(default_factory=list)

    def scalars(self) -> dict[str, Any]:
        """The metrics as flat scalars, as the train API reports them: every field but ``step``
        and ``passes``, and per pass ``p`` (from 1) ``pass_<p>_loss``, ``pass_<p>_clip_low_fraction``,
        ``pass_<p>_clip_high_fraction``, ``pass_<p>_ratio_mean`` and ``pass_<p>_policy_shift``."""
        out = self.model_dump(exclude={"step", "passes"})
        for number, one in enumerate(self.passes, start=1):
            out.update({f"pass_{number}_{key}": value for key, value in one.model_dump().items()})
        return out


class GroupsStepResult(BaseModel):
    """The outcome of :meth:`LoraTrainer.train_groups`: what the data gave and what the step did.

    Attributes:
        trained: whether an optimizer update happened.
        nothing_trainable_reason: why not, when ``trained`` is False (never silent).
        data: how the sequences were built (groups used and dropped and why, fallback turns, ...).
        step: the step's metrics, ``None`` when nothing was trainable.
    """

    trained: bool
    nothing_trainable_reason: str | None = None
    data: BuildMetrics
    step: StepMetrics | None = None


class _UpdateSums:
    """Sums of one optimizer update's micro-batches (see :class:`.grpo.LossOutput`)."""

    def __init__(self) -> None:
        self.loss = self.policy = self.kl = self.ratio = self.shift = self.grad_norm = 0.0
        self.low = self.high = 0

    def add(self, out: Any) -> None:
        """Add one micro-batch's :class:`.grpo.LossOutput`."""
        self.loss += float(out.loss.detach())
        self.policy += out.policy_loss
        self.kl += out.kl_sum
        self.ratio += out.ratio_sum
        self.shift += out.shift_sum
        self.low += out.clipped_low
        self.high += out.clipped_high


def _pass_metrics(updates: Sequence[_UpdateSums], tokens: int) -> PassMetrics:
    return PassMetrics(
        loss=sum(u.loss for u in updates) / len(updates),
        clip_low_fraction=sum(u.low for u in updates) / tokens,
        clip_high_fraction=sum(u.high for u in updates) / tokens,
        ratio_mean=sum(u.ratio for u in updates) / tokens,
        policy_shift=sum(u.shift for u in updates) / tokens,
    )


def schedule_inputs(config: TrainConfig) -> dict[str, Any]:
    """What the learning rate of a step follows from, besides the step number (saved with the adapter)."""
    return config.model_dump(include={"lr_schedule", "learning_rate", "warmup_steps", "total_steps"})


class GrpoObjective(Objective):
    """One GRPO step of ``config`` (see :meth:`.trainer.LoraTrainer.train_step`)."""

    name = "GRPO"
    advice = "lower learning_rate, set max_grad_norm, or check the sequences' old log-probs"

    def __init__(self, config: TrainConfig) -> None:
        self.config = config
        self.seed = config.seed
        self.max_grad_norm = config.max_grad_norm
        self.settings = LossSettings.from_config(config)
        self.learning_rate = 0.0
        self.layout: list[Update] = []
        self.refs: dict[int, torch.Tensor] = {}  # the reference's log-probs per micro-batch, for every pass

    def prepare(self, trainer: LoraTrainer) -> None:
        """The step's learning rate (refuses a step past ``total_steps``)."""
        self.learning_rate = self.config.learning_rate_at(trainer.steps_done)

    def adapter_config(self) -> TrainConfig:
        """The step's own config."""
        return self.config

    def optimizer(self, trainer: LoraTrainer) -> torch.optim.Optimizer:
        """The adapter's optimizer, set to this step's learning rate and weight decay."""
        assert trainer.optimizer is not None
        trainer.note_schedule(self.config)
        for group in trainer.optimizer.param_groups:
            group["lr"] = self.learning_rate
            group["weight_decay"] = self.config.weight_decay
        return trainer.optimizer

    def plan(self, trainer: LoraTrainer, sequences: Sequence[TrainingSequence]) -> list[list[Update]]:
        """Mini-batches in order (those with loss tokens), the same each of ``num_iterations`` passes."""
        config = self.config
        for mini in split_mini_batches(sequences, config.mini_batches):
            tokens = sum(s.loss_tokens for s in mini)
            if tokens:
                batches = micro_batches(
                    mini, config.micro_batch_size, trainer.pad_token_id, trainer.device, config.share_prefix,
                    max_tokens=config.micro_batch_tokens,
                )
                self.layout.append(Update(batches, tokens, BatchTotals(len(mini), tokens, config.max_tokens)))
        return [self.layout] * config.num_iterations

    def before_updates(self, trainer: LoraTrainer, passes: list[list[Update]]) -> None:
        """Later updates see moved weights: score the unknown old log-probs with the starting ones."""
        trainer.score_unknown_old_logprobs([b for update in self.layout for b in update.batches])

    def micro_loss(self, trainer: LoraTrainer, batch: Batch, update: Update) -> tuple[torch.Tensor, Any]:
        """The clipped surrogate (+ beta x KL to the adapter-less reference) of one micro-batch."""
        assert trainer.model is not None
        ref = None
        if self.settings.beta != 0.0:
            ref = self.refs.get(id(batch))
            if ref is None:
                with torch.no_grad(), trainer.model.disable_adapter():
                    ref = self.refs[id(batch)] = trainer.logprobs(batch, loss_only=True)
        out = grpo_loss(
            trainer.logprobs(batch, loss_only=True),
            batch.old_logprobs,
            batch.advantages,
            batch.loss_mask,
            self.settings,
            update.totals,
            ref,
        )
        return out.loss, out

    def metrics(
        self, trainer: LoraTrainer, sequences: Sequence[TrainingSequence], done: list[UpdateResult], seconds: float
    ) -> StepMetrics:
        """Means over the step's updates (token-weighted for the per-token values), and per pass."""
        sums: list[_UpdateSums] = []
        for result in done:
            one = _UpdateSums()
            for out in result.extras:
                one.add(out)
            one.grad_norm = result.grad_norm
            sums.append(one)
        total_tokens = sum(s.loss_tokens for s in sequences)
        passes = [
            _pass_metrics([u for u, r in zip(sums, done, strict=True) if r.pass_index == p], total_tokens)
            for p in range(self.config.num_iterations)
        ]
        seen = total_tokens * self.config.num_iterations  # loss tokens over all passes
        batches = [b for update in self.layout for b in update.batches]
        return StepMetrics(
            loss=sum(u.loss for u in sums) / len(sums),
            policy_loss=sum(u.policy for u in sums) / len(sums),
            kl=sum(u.kl for u in sums) / seen if self.settings.beta != 0.0 else None,
            grad_norm=sum(u.grad_norm for u in sums) / len(sums),
            clip_fraction=sum(u.low + u.high for u in sums) / seen,
            clip_low_fraction=sum(u.low for u in sums) / seen,
            clip_high_fraction=sum(u.high for u in sums) / seen,
            ratio_mean=sum(u.ratio for u in sums) / seen,
            sequences=len(sequences),
            micro_batches=len(batches),
            tokens=total_tokens,
            sequence_tokens=sum(len(s.token_ids) for s in sequences),
            padded_tokens=sum(b.input_ids.numel() + b.prefix_len for b in batches),
            seconds=seconds,
            learning_rate=self.learning_rate,
            step=trainer.steps_done,
            updates=len(sums),
            passes=passes,
        )
