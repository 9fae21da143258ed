"""Test helper: tiny randomly initialised causal language models, built in code (no hub).

Every tiny model of the tests has the same layout (2 layers, 4 attention heads on 2 key/value
heads, an MLP twice as wide as the hidden size, the tokenizer's vocabulary and pad token); the
callers choose the architecture, the hidden size and their own special tokens.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def tiny_config(config_class: Any, tokenizer: Any, *, hidden_size: int, **fields: Any) -> Any:
    """A ``config_class`` (e.g. ``LlamaConfig``) of the tiny layout for ``tokenizer``; ``fields`` add to it."""
    return config_class(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        pad_token_id=tokenizer.pad_token_id,
        **fields,
    )


def save_random_model(config: Any, tokenizer: Any, folder: Path, *, seed: int) -> None:
    """Initialise a causal LM of ``config`` (fp32) from ``seed`` and save it and ``tokenizer`` into ``folder``."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
