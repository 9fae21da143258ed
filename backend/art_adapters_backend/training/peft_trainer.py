"""The default trainer: transformers + PEFT LoRA, in fp32 on CPU (or on a CUDA device).

It loads its own copy of the base model, separate from the inference engine's, so a
training step never changes what is being served; the new adapter reaches serving only
as a checkpoint folder.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

import torch

from art_adapters import TrainConfig

from .trainer import LoraTrainer

if TYPE_CHECKING:
    from peft import PeftModel

__all__ = ["PeftTrainer"]

logger = logging.getLogger(__name__)


class PeftTrainer(LoraTrainer):
    """GRPO LoRA training with plain transformers + PEFT.

    Args:
        model_path: a local Hugging Face causal-LM folder (e.g. from
            ``art_adapters_backend.bundled.resolve_model_path``).
        device: ``"cpu"`` (fp32) or a CUDA device (bf16 where supported, else fp32).
    """

    def __init__(self, model_path: str | os.PathLike[str], device: str = "cpu") -> None:
        import transformers

        # transformers 5 slices hidden states by a boolean (B, T) logits_to_keep (checked on 5.23).
        self.select_logits = int(transformers.__version__.split(".")[0]) >= 5
        super().__init__(model_path, device)

    def _load_base(self) -> tuple[torch.nn.Module, int]:
        from transformers import AutoConfig, AutoModelForCausalLM

        dtype = torch.float32
        if self.device.type == "cuda" and torch.cuda.is_bf16_supported():
            dtype = torch.bfloat16
        model = AutoModelForCausalLM.from_pretrained(str(self.model_path), dtype=dtype, local_files_only=True)
        model.to(self.device)
        config = AutoConfig.from_pretrained(str(self.model_path), local_files_only=True)
        pad = config.pad_token_id if config.pad_token_id is not None else config.eos_token_id
        if isinstance(pad, list):
            pad = pad[0]
        if pad is None:
            pad = 0  # padded positions are masked out of attention and loss; any id works
        for p in model.parameters():
            p.requires_grad_(False)
        logger.info("loaded %s on %s (%s) for training", self.model_path, self.device, dtype)
        return model, int(pad)

    def _attach_lora(self, config: TrainConfig) -> PeftModel:
        from peft import LoraConfig, get_peft_model

        lora = LoraConfig(
            r=config.lora_rank,
            lora_alpha=config.lora_alpha,
            lora_dropout=config.lora_dropout,
            target_modules=list(config.lora_target_modules),
            task_type="CAUSAL_LM",
        )
        try:
            return get_peft_model(self.base, lora)
        except ValueError as exc:
            raise ValueError(
                f"cannot attach LoRA to {list(config.lora_target_modules)} in {self.model_path}: {exc}; "
                "set lora_target_modules to linear layer names of this model"
            ) from exc
