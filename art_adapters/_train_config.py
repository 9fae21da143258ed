"""``TrainConfig``: the settings of one GRPO training step, sent by the client as JSON.

This module imports pydantic only (no torch): the client builds a :class:`TrainConfig`, sends
``config.model_dump(mode="json")`` with ``model.train(...)``, and the backend validates the same class
again on its side.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt, model_validator

__all__ = ["ImportanceLevel", "LossNormalization", "RetentionPolicy", "TrainConfig"]

#: Where the importance ratio is taken: per token (PPO/GRPO) or per sequence (GSPO).
ImportanceLevel = Literal["token", "sequence"]

#: How per-token losses are averaged into one number (see :attr:`TrainConfig.loss_normalization`).
LossNormalization = Literal["token", "sequence", "constant"]

_Fraction = Annotated[float, Field(gt=0.0, lt=1.0)]


class RetentionPolicy(BaseModel):
    """Which checkpoints to keep; the others are deleted (and stop being served).

    Attributes:
        keep_latest: the newest checkpoints kept, >= 1 (the latest is always kept). Default 1.
        best_metric: also keep the checkpoint with the best value of this step metric (e.g.
            ``"reward_mean"``: the mean reward of the groups that step trained on, i.e. of the
            rollouts sampled from the step before it). ``None``: no "best" is kept.
        mode: ``"max"`` (default) keeps the highest ``best_metric``, ``"min"`` the lowest.

    Step 0 (the base weights) is never deleted.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    keep_latest: PositiveInt = 1
    best_metric: str | None = None
    mode: Literal["max", "min"] = "max"


class TrainConfig(BaseModel):
    """Settings of one GRPO training step (one optimizer update over the groups sent).

    Every field is documented once, here, with its meaning, unit, default and interactions;
    cross-field rules live in one validator whose messages say what to change.

    Attributes:
        learning_rate: AdamW step size for the LoRA weights. Unitless, > 0. Default ``1e-4``
            (LoRA on a small model; full-model GRPO recipes use ~1e-6). The optimizer keeps
            its state across steps, so changing it between steps takes effect immediately.
        weight_decay: AdamW decoupled weight decay, >= 0. Default ``0.0``.
        lora_rank: rank ``r`` of the LoRA matrices. Used only when the model's adapter is
            first created (step 0); later steps keep the existing adapter's shape and a
            different value here is ignored with a logged warning. Default ``16``.
        lora_alpha: LoRA scaling numerator; the update is scaled by ``lora_alpha / lora_rank``.
            First creation only, like ``lora_rank``. Default ``32``.
        lora_dropout: dropout probability on the LoRA input, in ``[0, 1)``. First creation
            only. Default ``0.0`` (dropout makes the first micro-step's ratio differ from 1).
        lora_target_modules: names of the linear layers that get LoRA matrices (matched by
            suffix, PEFT's rule). First creation only. Default: the attention projections
            ``q_proj, k_proj, v_proj, o_proj``.
        epsilon: lower PPO clip range: the ratio is clipped to ``[1 - epsilon, ...]``. In
            ``(0, 1)``. Default ``0.2``.
        epsilon_high: upper clip range: ratio clipped to ``[..., 1 + epsilon_high]``.
            ``None`` (default) means the same as ``epsilon``; DAPO's "clip-higher" uses a
            larger value (e.g. ``0.28``) to keep low-probability tokens explorable.
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
            the whole step (micro-batching never changes the result):
            ``"token"`` (default): sum over all loss tokens / number of loss tokens (TRL
            ``bnpo``); ``"sequence"``: mean over sequences of each sequence's token mean (TRL
            ``grpo``; long sequences get less weight per token); ``"constant"``: sum / (number
            of sequences x ``max_tokens``) (Dr. GRPO / TRL ``dr_grpo``; no length bias).
        max_tokens: the constant of ``loss_normalization="constant"``, in tokens (typically
            the most completion tokens one trajectory may have). Required with
            ``"constant"`` and rejected otherwise.
        max_grad_norm: clip the global gradient L2 norm to this before the update; ``None``
            disables clipping (the norm is still measured and reported). Default ``1.0``.
        micro_batch_size: sequences per forward/backward pass; gradients of all micro-batches
            are accumulated into one update. Memory only: the result does not depend on it.
            Default ``4``.
        max_sequence_length: longest training sequence, in tokens (prompt + completions of a
            conversation). Longer sequences are dropped and counted in the metrics, never
            truncated. Default ``4096``.
        share_prefix: forward the prompt a group's sequences share ONCE per micro-batch (its KV
            cache repeated for the rows, gradients flowing through it) instead of once per
            sequence. Same loss and gradient to float precision; micro-batches then never mix
            groups. Used when the shared part is at least 32 tokens. Default ``True``
            (``bench/train.py``, 8 x (512 + 32) tokens on CPU: 3.6-7.6x tokens/s).
        seed: seeds torch before the step (LoRA initialisation, dropout). ``None`` leaves the
            generator alone. Default ``0``.
        retention: applied after the step's checkpoint is written (see :class:`RetentionPolicy`);
            ``None`` (default) keeps every checkpoint.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    learning_rate: PositiveFloat = 1e-4
    weight_decay: Annotated[float, Field(ge=0.0)] = 0.0
    lora_rank: PositiveInt = 16
    lora_alpha: PositiveFloat = 32.0
    lora_dropout: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.0
    lora_target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")
    epsilon: _Fraction = 0.2
    epsilon_high: PositiveFloat | None = None
    beta: Annotated[float, Field(ge=0.0)] = 0.0
    kl_ratio_correction: bool = True
    scale_rewards: bool = True
    importance_level: ImportanceLevel = "token"
    loss_normalization: LossNormalization = "token"
    max_tokens: PositiveInt | None = None
    max_grad_norm: PositiveFloat | None = 1.0
    micro_batch_size: PositiveInt = 4
    max_sequence_length: PositiveInt = 4096
    share_prefix: bool = True
    seed: int | None = 0
    retention: RetentionPolicy | None = None

    @model_validator(mode="after")
    def _check_combinations(self) -> TrainConfig:
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
        if not self.lora_target_modules or any(not name for name in self.lora_target_modules):
            raise ValueError(
                "lora_target_modules must name at least one linear layer, e.g. ('q_proj', 'v_proj'); "
                f"got {self.lora_target_modules!r}."
            )
        return self

    @property
    def clip_high(self) -> float:
        """The upper clip range actually used: ``epsilon_high``, or ``epsilon`` when unset."""
        return self.epsilon if self.epsilon_high is None else self.epsilon_high
