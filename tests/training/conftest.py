"""Shared fixtures of the training tests: the bundled model's folder and tokenizer."""

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
