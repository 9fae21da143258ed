"""``AdapterConfig``: the LoRA shape and optimizer settings every training objective (GRPO, SFT) holds,
and each objective's default learning rate, written once."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt, model_validator

__all__ = ["GRPO_LEARNING_RATE", "SFT_LEARNING_RATE", "AdapterConfig", "RetentionPolicy"]

#: :attr:`TrainConfig.learning_rate`'s default: LoRA on a small model (full-model GRPO recipes use ~1e-6).
GRPO_LEARNING_RATE = 1e-4
#: :attr:`SFTConfig.learning_rate`'s default: a common LoRA SFT rate (TRL's ``2e-5`` is for full fine-tuning).
SFT_LEARNING_RATE = 2e-4


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


class AdapterConfig(BaseModel):
    """The settings :class:`TrainConfig` (GRPO) and :class:`SFTConfig` share, documented once.

    Attributes:
        weight_decay: AdamW decoupled weight decay, >= 0. Default ``0.0``.
        lora_rank: rank ``r`` of the LoRA matrices. Used only when the model's adapter is
            first created (step 0); later steps keep the existing adapter's shape and a
            different value here is ignored with a logged warning. Default ``16``, the same for
            both objectives, so GRPO continues on the adapter an SFT step made and vice versa.
        lora_alpha: LoRA scaling numerator; the update is scaled by ``lora_alpha / lora_rank``.
            First creation only, like ``lora_rank``. Default ``32``.
        lora_dropout: dropout probability on the LoRA input, in ``[0, 1)``. First creation
            only. Default ``0.0`` (dropout makes the first micro-step's ratio differ from 1).
        lora_target_modules: names of the linear layers that get LoRA matrices (matched by
            suffix, PEFT's rule). First creation only. Default: the attention projections
            ``q_proj, k_proj, v_proj, o_proj``.
        max_grad_norm: clip each update's global gradient L2 norm to this; ``None`` disables
            clipping (the norm is still measured and reported). Default ``1.0``.
        micro_batch_size: sequences per forward/backward pass; gradients of an update's
            micro-batches are accumulated into it. Memory only: the result does not depend on
            it. Default ``4``.
        micro_batch_tokens: most tokens one forward/backward pass processes (its rows padded to
            the longest, a shared prefix counted once); a micro-batch stops short of
            ``micro_batch_size`` rows rather than pass it, and a longer sequence goes alone.
            Memory only, like ``micro_batch_size``: what a backward pass keeps grows with these
            tokens (about 2 MB a token for the bundled 135M model in fp32 on CPU: a step of 16
            ~800-token sequences peaked at +7.7 GB with four rows a micro-batch, +2.1 GB with
            this default, in the same time; ``bench/train_memory.py``). ``None``: rows only.
            Default ``1024``; raise it on a GPU with memory to spare.
        share_prefix: forward the prompt a micro-batch's sequences share ONCE (its KV cache
            repeated for the rows, gradients flowing through it) instead of once per sequence.
            Same loss and gradient to float precision; a GRPO step's micro-batches then never mix
            groups (an SFT step's sequences are one group). Used when the shared part is at least
            32 tokens. Default ``True`` (``bench/train.py``, 8 x (512 + 32) tokens on CPU: GRPO
            3.6-7.6x tokens/s).
        max_sequence_length: longest training sequence, in tokens (prompt + completions of a
            conversation). Longer sequences are dropped and counted in the metrics, never
            truncated. Default ``4096``.
        seed: seeds torch before the step (LoRA initialisation, dropout); an SFT step also
            shuffles pass ``e``'s sequences with ``seed + e``. ``None`` leaves the generator
            (and the order) alone. Default ``0``.
        retention: applied after the step's checkpoint is written (see :class:`RetentionPolicy`);
            ``None`` (default) keeps every checkpoint.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    weight_decay: Annotated[float, Field(ge=0.0)] = 0.0
    lora_rank: PositiveInt = 16
    lora_alpha: PositiveFloat = 32.0
    lora_dropout: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.0
    lora_target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")
    max_grad_norm: PositiveFloat | None = 1.0
    micro_batch_size: PositiveInt = 4
    micro_batch_tokens: PositiveInt | None = 1024
    share_prefix: bool = True
    max_sequence_length: PositiveInt = 4096
    seed: int | None = 0
    retention: RetentionPolicy | None = None

    @model_validator(mode="after")
    def _check_lora_targets(self) -> Any:
        if not self.lora_target_modules or any(not name for name in self.lora_target_modules):
            raise ValueError(
                "lora_target_modules must name at least one linear layer, e.g. ('q_proj', 'v_proj'); "
                f"got {self.lora_target_modules!r}."
            )
        return self

    def adapter_settings(self) -> dict[str, Any]:
        """These settings as keyword arguments (for another objective's config on the same adapter)."""
        return self.model_dump(include=set(AdapterConfig.model_fields))
