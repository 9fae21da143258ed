"""Which ``lora_target_modules`` a base model has, checked before a train request is accepted.

PEFT matches each entry of ``target_modules`` against a module's full dotted name: equal to
it, or a dotted suffix of it (``q_proj`` and ``self_attn.q_proj`` both match
``model.layers.0.self_attn.q_proj``). An entry that matches no module LoRA can wrap would make
the step fail after the request was accepted; :func:`unknown_targets` finds those up front.
The module names come from the model's architecture built on the ``meta`` device (no
weights are read).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

__all__ = ["lora_module_names", "unknown_targets"]

logger = logging.getLogger(__name__)

#: Module classes PEFT's LoRA can wrap (by class name: transformers' GPT-2 style ``Conv1D`` too).
_LORA_WRAPPABLE = frozenset(
    {"Linear", "Embedding", "Conv1d", "Conv2d", "Conv3d", "Conv1D", "MultiheadAttention"}
)


def lora_module_names(model_path: str | Path) -> frozenset[str] | None:
    """The full names of the modules of ``model_path``'s architecture that LoRA can wrap.

    ``None`` when the architecture cannot be built here (the step itself then reports a bad name).
    """
    try:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM

        config = AutoConfig.from_pretrained(model_path)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
    except Exception as exc:  # an architecture transformers cannot build without its weights/code
        logger.warning("cannot list the modules of %s to check lora_target_modules: %s", model_path, exc)
        return None
    modules = model.named_modules()
    return frozenset(name for name, module in modules if type(module).__name__ in _LORA_WRAPPABLE)


def unknown_targets(targets: Iterable[str], names: Iterable[str]) -> list[str]:
    """The entries of ``targets`` that match none of ``names`` the way PEFT matches them."""
    names = list(names)
    return [t for t in targets if not any(n == t or n.endswith(f".{t}") for n in names)]
