"""The Unsloth trainer: the same GRPO step, with the model loaded by ``unsloth.FastLanguageModel``.

Unsloth patches transformers when imported, so import this module only in a process that trains with
it (the backend picks one trainer per process). Install: ``pip install 'art-adapters[unsloth]'`` on a
CUDA machine.
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

__all__ = ["UnslothTrainer"]

logger = logging.getLogger(__name__)


def _fast_language_model() -> type:
    try:
        from unsloth import FastLanguageModel
    except ImportError as exc:
        raise ImportError(
            "the Unsloth trainer needs unsloth: pip install 'art-adapters[unsloth]' on a CUDA machine "
            f"(or `pip install --no-deps unsloth unsloth_zoo` to try it on CPU); import failed with: {exc}"
        ) from exc
    return FastLanguageModel


class UnslothTrainer(LoraTrainer):
    """GRPO LoRA training on a model loaded by Unsloth's ``FastLanguageModel``.

    Uses Unsloth's documented entry points only: ``FastLanguageModel.from_pretrained`` (16/32-bit
    weights, no quantisation, local folder), ``FastLanguageModel.get_peft_model`` for the LoRA and
    ``FastLanguageModel.for_training``. The loss, batching, saving and loading are the shared ones
    of :class:`~.trainer.LoraTrainer`.

    Args:
        model_path: a local Hugging Face causal-LM folder.
        device: ``"cuda"`` normally; ``"cpu"`` works with Unsloth's CPU fallback (Unsloth 2026.10
            installed with ``pip install --no-deps unsloth unsloth_zoo`` imports and trains, slowly).
        max_seq_length: the longest sequence Unsloth prepares for, in tokens.
    """

    #: Unsloth replaces the model's forward; keep the plain full-logits path.
    select_logits = False

    def __init__(
        self, model_path: str | os.PathLike[str], device: str = "cuda", max_seq_length: int = 4096
    ) -> None:
        self.max_seq_length = max_seq_length
        super().__init__(model_path, device)

    def _load_base(self) -> tuple[torch.nn.Module, int]:
        fast = _fast_language_model()
        dtype = torch.float32 if self.device.type == "cpu" else None  # None: Unsloth picks bf16/fp16 on GPU
        model, tokenizer = fast.from_pretrained(
            model_name=str(self.model_path),
            max_seq_length=self.max_seq_length,
            dtype=dtype,
            load_in_4bit=False,
            device_map={"": str(self.device)} if self.device.type == "cuda" else None,
            local_files_only=True,
        )
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        logger.info("Unsloth loaded %s on %s for training", self.model_path, self.device)
        return model, int(pad if pad is not None else 0)

    def _attach_lora(self, config: TrainConfig) -> PeftModel:
        fast = _fast_language_model()
        model = fast.get_peft_model(
            self.base,
            r=config.lora_rank,
            target_modules=list(config.lora_target_modules),
            lora_alpha=config.lora_alpha,
            lora_dropout=config.lora_dropout,
            bias="none",
            use_gradient_checkpointing=False,
            random_state=config.seed if config.seed is not None else 3407,
        )
        fast.for_training(model)
        return model
