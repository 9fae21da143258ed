"""Shared fixtures of the training tests: the bundled model's folder and tokenizer, a trainer on it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def bundled_path() -> Path:
    """The bundled SmolLM2-135M-Instruct as an fp32 Hugging Face folder (converted once, cached)."""
    from art_adapters_backend.bundled import resolve_model_path

    return resolve_model_path("smollm2-135m-instruct")


@pytest.fixture(scope="session")
def tokenizer(bundled_path: Path) -> Any:
    """The bundled model's tokenizer (ChatML template)."""
    from art_adapters_backend.bundled import load_tokenizer

    return load_tokenizer(bundled_path)


@pytest.fixture(scope="session")
def render(tokenizer: Any) -> Any:
    """The tokenizer's own chat template as a ``Renderer`` (the server passes its ChatTemplate)."""

    def _render(
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        *,
        add_generation_prompt: bool = True,
    ) -> list[int]:
        out = tokenizer.apply_chat_template(
            list(messages), tools=tools, add_generation_prompt=add_generation_prompt, tokenize=True
        )
        return list(out["input_ids"] if isinstance(out, Mapping) or hasattr(out, "keys") else out)

    return _render


@pytest.fixture(scope="module")
def trainer(bundled_path: Path) -> Any:
    """A ``PeftTrainer`` on the bundled model (CPU), one per test module."""
    from art_adapters_backend.training.peft_trainer import PeftTrainer

    return PeftTrainer(bundled_path, device="cpu")


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread() -> Any:
    """Run the training tests' torch math on one thread, restored afterwards.

    On this 2-core machine shared by several test processes, torch's default of one
    thread per core oversubscribes the CPU: a LoRA step on 4 x 40 tokens took 9-22 s with
    2 threads and 2.4-3.3 s with 1 (measured under a load average of ~7).
    """
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
