"""``TrainConfig``: the settings of one GRPO training step, sent by the client as JSON.

This module imports pydantic only (no torch): the client builds a :class:`TrainConfig`, sends
``config.model_dump(mode="json")`` with ``model.train(...)``, and the backend validates the same class
again on its side.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import (
    ConfigDict,
    Field,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    model_validator,
)

from ._adapter_config import GRPO_LEARNING_RATE, AdapterConfig

__all__ = ["ImportanceLevel", "LossNormalization", "LossType", "LrSchedule", "TrainConfig"]

#: Where the importance ratio is taken: per token (PPO/GRPO) or per sequence (GSPO).
ImportanceLevel = Literal["token", "sequence"]

#: How per-token losses are averaged into one number (see :attr:`TrainConfig.loss_normalization`).
LossNormalization = Literal["token", "sequence", "constant"]

#: The per-token surrogate (see :attr:`TrainConfig.loss_type`): PPO's clipped ratio, CISPO or SAPO.
LossType = Literal["ppo", "cispo", "sapo"]

#: How the learning rate changes from step to step (see :attr:`TrainConfig.lr_schedule`).
LrSchedule = Literal["constant", "linear", "cosine"]

_Fraction = Annotated[float, Field(gt=0.0, lt=1.0)]


class TrainConfig(AdapterConfig):
    """Settings of one GRPO training step (one ``model.train()`` call over the groups sent: one
    checkpoint, made by ``num_iterations x mini_batches`` optimizer updates, one by default).

    Every field is documented once, with its meaning, unit, default and interactions: here, or
    (the LoRA shape and the settings every objective shares) in :class:`AdapterConfig`; cross-field
    rules live in one validator whose messages say what to change.

    Attributes:
        learning_rate: AdamW step size for the LoRA weights: the peak of ``lr_schedule``.
            Unitless, > 0. Default ``1e-4`` (LoRA on a small model; full-model GRPO recipes use
            ~1e-6). The optimizer keeps its state across steps, so changing it between steps
            takes effect immediately.
        lr_schedule: how the step size of the model's step ``k`` (0 for the first training step:
            the number of checkpoints the model has, so a restarted backend continues the
            schedule) follows from ``learning_rate`` (see :meth:`learning_rate_at`):
            ``"constant"`` (default) ``learning_rate`` after the warm-up; ``"linear"`` decays
            linearly and ``"cosine"`` along a half cosine from ``learning_rate`` at step
            ``warmup_steps`` towards 0 at step ``total_steps`` (each step before it gets a
            rate > 0). Every update of a step uses the step's rate. ``"linear"`` and
            ``"cosine"`` need ``total_steps``.
        warmup_steps: steps whose rate ramps up linearly before the schedule proper: step
            ``k < warmup_steps`` uses ``learning_rate x (k + 1) / (warmup_steps + 1)``, so no
            step is wasted at rate 0 (transformers' warm-up starts at 0). Default ``0``.
        total_steps: the model step at which ``"linear"`` / ``"cosine"`` reach 0: steps
            ``0 .. total_steps - 1`` can be trained; a later step is refused (400: raise
            ``total_steps``). Counted from the model's first step, restarts included; must
            exceed ``warmup_steps``. Required by ``"linear"`` / ``"cosine"``, rejected with
            ``"constant"``. Default ``None``.
        loss_type: the per-token surrogate, as TRL's ``loss_type`` of the same name (the
            formulas are in docs/training.md):
            ``"ppo"`` (default): PPO's clipped ratio times the advantage (GRPO, DAPO, GSPO with
            ``importance_level="sequence"``); uses ``epsilon`` / ``epsilon_high``.
            ``"cispo"`` (MiniMax-M1; ScaleRL): ``-sg(min(ratio, cispo_epsilon_high)) x A x
            logp``, the ratio capped and detached, so every token keeps a gradient; uses
            ``cispo_epsilon_high``. ``"sapo"`` (arXiv 2511.20347): a smooth sigmoid gate of the
            ratio instead of the hard clip; uses ``sapo_temperature_pos`` / ``_neg``. With
            ``"sapo"`` an unset ``loss_normalization`` becomes ``"sequence"`` (TRL's and the
            paper's); CISPO's own normalisation is ``"token"``, the default.
        epsilon: lower PPO clip range: the ratio is clipped to ``[1 - epsilon, ...]``. In
            ``(0, 1)``. Default ``0.2``. ``loss_type="ppo"`` only.
        epsilon_high: upper clip range: ratio clipped to ``[..., 1 + epsilon_high]``.
            ``None`` (default) means the same as ``epsilon``; DAPO's "clip-higher" uses a
            larger value (e.g. ``0.28``) to keep low-probability tokens explorable.
            ``loss_type="ppo"`` only (rejected with ``"cispo"`` / ``"sapo"``).
        cispo_epsilon_high: CISPO's cap on the importance ratio itself (not ``1 + x``): the
            ``epsilon_max`` of ScaleRL, TRL's ``epsilon_high`` when ``loss_type="cispo"``.
            > 0. Default ``5.0`` (ScaleRL's and TRL's recommended value; TRL's own default
            would cap the ratio at ``epsilon`` = 0.2). ``loss_type="cispo"`` only.
        sapo_temperature_pos: SAPO's gate temperature for tokens with a positive advantage
            (larger: closer to a hard clip). > 0. Default ``1.0`` (TRL's and the paper's).
        sapo_temperature_neg: the same for tokens with advantage <= 0. Default ``1.05``
            (TRL's and the paper's: negative tokens are gated a little harder).
        beta: coefficient of the k3 KL penalty to the reference policy (the base model with
            the adapter disabled), added per token. ``0.0`` (default) turns it off and skips
            the reference forward pass (one extra no-grad forward per micro-batch when on).
        kl_ratio_correction: multiply the per-token KL by the (unclipped) importance ratio, so
            its gradient is the unbiased reverse-KL gradient for off-policy samples (DeepSeek-V3.2;
            TRL's ``use_bias_correction_kl``, on by default there too). Only used when
            ``beta > 0``. Default ``True``.
        scale_rewards: divide each group's mean-centred rewards by the group's standard
            deviation (+1e-4). Default ``True`` (GRPO); ``False`` is Dr. GRPO's unscaled
            advantage. Groups whose rewards are all equal are skipped either way.
        importance_level: ``"token"`` (default): one ratio per token, PPO/GRPO.
            ``"sequence"``: one ratio per sequence, ``exp(mean of the sequence's token
            log-ratios)``, GSPO. Combine ``"sequence"`` with ``loss_normalization="sequence"``
            to match the GSPO paper.
        loss_normalization: how the masked per-token losses become one number, always over
            the whole mini-batch of an update (the whole step when ``mini_batches=1``;
            micro-batching never changes the result):
            ``"token"`` (default): sum over all loss tokens / number of loss tokens (TRL
            ``bnpo``); ``"sequence"``: mean over sequences of each sequence's token mean (TRL
            ``grpo``; long sequences get less weight per token); ``"constant"``: sum / (number
            of sequences x ``max_tokens``) (Dr. GRPO / TRL ``dr_grpo``; no length bias). Default
            ``"token"``, or ``"sequence"`` with ``loss_type="sapo"`` (when not given).
        max_tokens: the constant of ``loss_normalization="constant"``, in tokens (typically
            the most completion tokens one trajectory may have). Required with
            ``"constant"`` and rejected otherwise.
        num_iterations: passes over the step's sequences (TRL's ``num_iterations``, the ``mu``
            of the GRPO paper; PPO's epochs). The old log-probs of every pass are the sampling
            ones, so after the first update the ratio moves off 1 and the clip acts. Tokens
            without sampling log-probs are scored once by the step's starting weights. Default
            ``1``.
        mini_batches: optimizer updates per pass: the step's sequences, in the order built
            (group by group), are cut into this many mini-batches of near-equal size (at most
            the number of sequences), one update each (TRL: ``steps_per_generation =
            mini_batches x gradient_accumulation_steps``). Default ``1``.
        credit: ``"trajectory"`` (default): every token of a trajectory gets its group-relative
            advantage. ``"turn"``: per-turn credit, each assistant turn's tokens get that turn's
            advantage, its turn reward normalised over all turns of the group (``docs/training.md``,
            "Per-turn credit"); every scored trajectory then needs ``metadata["turn_rewards"]``, one
            per assistant message of its ``messages`` (``ruler_score_group(..., per_turn=True)``
            stores them), else the request fails with a 400 naming the trajectory.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    learning_rate: PositiveFloat = GRPO_LEARNING_RATE
    lr_schedule: LrSchedule = "constant"
    warmup_steps: NonNegativeInt = 0
    total_steps: PositiveInt | None = None
    loss_type: LossType = "ppo"
    epsilon: _Fraction = 0.2
    epsilon_high: PositiveFloat | None = None
    cispo_epsilon_high: PositiveFloat = 5.0
    sapo_temperature_pos: PositiveFloat = 1.0
    sapo_temperature_neg: PositiveFloat = 1.05
    beta: Annotated[float, Field(ge=0.0)] = 0.0
    kl_ratio_correction: bool = True
    scale_rewards: bool = True
    importance_level: ImportanceLevel = "token"
    loss_normalization: LossNormalization = "token"
    max_tokens: PositiveInt | None = None
    num_iterations: PositiveInt = 1
    mini_batches: PositiveInt = 1
    credit: Literal["trajectory", "turn"] = "trajectory"

    @model_validator(mode="before")
    @classmethod
    def _loss_type_normalization(cls, data: Any) -> Any:
        """An unset ``loss_normalization`` follows the loss type: SAPO's own is ``"sequence"``."""
        if isinstance(data, dict) and data.get("loss_type") == "sapo" and "loss_normalization" not in data:
            return {**data, "loss_normalization": "sequence"}
        return data

    @model_validator(mode="after")
    def _check_combinations(self) -> TrainConfig:
        if self.loss_type != "ppo" and self.epsilon_high is not None:
            knob = {"cispo": "cispo_epsilon_high, CISPO's cap on the ratio (TRL's epsilon_high for cispo)",
                    "sapo": "sapo_temperature_pos / sapo_temperature_neg"}[self.loss_type]  # fmt: skip
            raise ValueError(
                f"epsilon_high is PPO's upper clip range and loss_type={self.loss_type!r} does not clip "
                "with it: "
                f"remove epsilon_high and tune {knob}; or set loss_type='ppo'."
            )
        if self.lr_schedule == "constant" and self.total_steps is not None:
            raise ValueError(
                "total_steps is only used by lr_schedule='linear' or 'cosine' (got 'constant'): remove "
                "total_steps, or choose a decaying lr_schedule."
            )
        if self.lr_schedule != "constant":
            if self.total_steps is None:
                raise ValueError(
                    f"lr_schedule={self.lr_schedule!r} decays to 0 at total_steps: set total_steps "
                    "(the number of training steps of the run, counted from the model's first step), "
                    "or choose lr_schedule='constant'."
                )
            if self.total_steps <= self.warmup_steps:
                raise ValueError(
                    f"total_steps ({self.total_steps}) must exceed warmup_steps ({self.warmup_steps}), or "
                    f"lr_schedule={self.lr_schedule!r} never decays: raise total_steps or lower warmup_steps."
                )
        if self.loss_normalization == "constant" and self.max_tokens is None:
            raise ValueError(
                "loss_normalization='constant' divides by (sequences x max_tokens): set max_tokens "
                "(e.g. the max_tokens your rollouts sample with), or choose loss_normalization='token'."
            )
        if self.loss_normalization != "constant" and self.max_tokens is not None:
            raise ValueError(
                f"max_tokens is only used by loss_normalization='constant' (got {self.loss_normalization!r}): "
                "remove max_tokens, or set loss_normalization='constant'."
            )
        return self

    def learning_rate_at(self, step: int) -> float:
        """The learning rate of the model's training step ``step`` (0-based: the model's checkpoint
        count before the step) under ``lr_schedule``, with ``W = warmup_steps``, ``N = total_steps``::

            k < W:              learning_rate x (k + 1) / (W + 1)
            constant:           learning_rate
            linear:             learning_rate x (N - k) / (N - W)
            cosine:             learning_rate x (1 + cos(pi (k - W) / (N - W))) / 2

        Raises:
            ValueError: ``step`` is negative, or ``step >= total_steps`` (the schedule is over).
        """
        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        if self.total_steps is not None and step >= self.total_steps:
            raise ValueError(
                f"the model is at step {step} and lr_schedule={self.lr_schedule!r} ended at total_steps="
                f"{self.total_steps} (learning rate 0): raise total_steps to train on, or use "
                "lr_schedule='constant'."
            )
        if step < self.warmup_steps:
            return self.learning_rate * (step + 1) / (self.warmup_steps + 1)
        if self.lr_schedule == "constant" or self.total_steps is None:
            return self.learning_rate
        progress = (step - self.warmup_steps) / (self.total_steps - self.warmup_steps)  # in [0, 1)
        if self.lr_schedule == "linear":
            return self.learning_rate * (1.0 - progress)
        return self.learning_rate * 0.5 * (1.0 + math.cos(math.pi * progress))

    @property
    def clip_high(self) -> float:
        """The upper clip range actually used: ``epsilon_high``, or ``epsilon`` when unset."""
        return self.epsilon if self.epsilon_high is None else self.epsilon_high
