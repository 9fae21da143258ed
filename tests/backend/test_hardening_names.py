"""Model names and ``name@step`` references: only the canonical forms, so nothing aliases step 0."""

from __future__ import annotations

from pathlib import Path

import pytest
from art_adapters_backend.errors import BadRequestError, NotFoundError
from art_adapters_backend.serving.export import ExportError, parse_model_ref
from art_adapters_backend.serving.openai_types import ChatCompletionRequest
from art_adapters_backend.serving.registry import Registry
from pydantic import ValidationError

from art_adapters import TrainableModel

BASE = "base-model"
NOT_STEP_0 = ["-0", "+0", "00", "\u0660", "\uff10", " 0", "0 ", "0\n", "0_0", ""]


@pytest.mark.parametrize("name", ["agent\n", "agent\r\n", "\nagent", "agent ", "ag\u00e9nt", "agent\x00"])
def test_a_name_with_a_trailing_newline_or_other_junk_is_refused(tmp_path: Path, name: str) -> None:
    registry = Registry(tmp_path, BASE)
    with pytest.raises(BadRequestError, match="not a valid name"):
        registry.register(name, "p", BASE)
    with pytest.raises(BadRequestError, match="not a valid project"):
        registry.register("agent", name, BASE)
    with pytest.raises(ValidationError):
        TrainableModel(name=name)
    assert registry.list() == []


@pytest.mark.parametrize("step", NOT_STEP_0)
def test_only_the_canonical_step_resolves(tmp_path: Path, step: str) -> None:
    registry = Registry(tmp_path, BASE)
    registry.register("agent", "p", BASE)
    assert registry.resolve("agent@0").step == 0
    with pytest.raises(NotFoundError):
        registry.resolve(f"agent@{step}")


@pytest.mark.parametrize("step", NOT_STEP_0)
def test_export_references_are_canonical(step: str) -> None:
    assert parse_model_ref("agent@0") == ("agent", 0) and parse_model_ref("agent@12") == ("agent", 12)
    with pytest.raises(ExportError):
        parse_model_ref(f"agent@{step}")
    with pytest.raises(ExportError):
        parse_model_ref("agent\n")


def test_a_tool_name_with_a_trailing_newline_is_refused() -> None:
    tool = {"type": "function", "function": {"name": "add\n", "parameters": {"type": "object"}}}
    with pytest.raises(ValidationError, match="not a valid function name"):
        ChatCompletionRequest.model_validate(
            {"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": [tool]}
        )
