"""Fixtures of the cross-family tests: the tiny Qwen3 model and its backend, and ``family``.

``family`` is parametrised over the families tested here: ``qwen3`` (a tiny random model on
Qwen3's real tokenizer and chat template, served with no flags: the template and parsers are
read off the model folder), ``smollm2`` (the bundled model with its shipped tool template, on
the session's shared backend) and ``llama3-json-flags`` (the same tiny model served with
``--chat-template`` and ``--tool-call-parser llama3_json``: not a Llama model, since no package
here ships a Llama 3 tokenizer with its chat template, but Llama 3's call syntax and the flags
end to end). Session-scoped, so pytest runs each family's tests together and
starts each backend once.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from art_adapters import LocalBackend
from tests.helpers.families_support import (
    HERMES_CALL,
    LLAMA3_JSON_CALL,
    LLAMA3_JSON_TEMPLATE,
    Family,
    qwen3_chat_template,
    tiny_qwen3_path,
)

FAMILIES = ["qwen3", "smollm2", "llama3-json-flags"]


@pytest.fixture(scope="session")
def qwen3_path() -> Path:
    """The tiny random Qwen3 model folder (built once, cached)."""
    return tiny_qwen3_path()


@pytest.fixture(scope="session")
async def qwen3_backend(
    qwen3_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[LocalBackend]:
    """A real backend serving the tiny Qwen3 folder as given: no template or parser flags."""
    async with LocalBackend(
        run_dir=tmp_path_factory.mktemp("qwen3-backend"), base_model=str(qwen3_path)
    ) as backend:
        yield backend


@pytest.fixture(scope="session")
async def llama3_json_backend(
    qwen3_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[LocalBackend]:
    """The tiny model served with ``--chat-template`` (a Llama 3.x-style file) and ``--tool-call-parser llama3_json``."""
    async with LocalBackend(
        run_dir=tmp_path_factory.mktemp("llama3-json-backend"),
        base_model=str(qwen3_path),
        extra_args=["--chat-template", str(LLAMA3_JSON_TEMPLATE), "--tool-call-parser", "llama3_json"],
    ) as backend:
        yield backend


def _on_tiny_qwen3(
    request: pytest.FixtureRequest, name: str, backend: LocalBackend, **serving: Any
) -> Family:
    """A family served from the tiny Qwen3 folder by ``backend`` (``serving``: the rest of it)."""
    from transformers import AutoTokenizer

    path: Path = request.getfixturevalue("qwen3_path")
    return Family(
        name=name,
        backend=backend,
        base_model=str(path),
        tokenizer=AutoTokenizer.from_pretrained(str(path)),
        **serving,
    )


def _qwen3(request: pytest.FixtureRequest) -> Family:
    return _on_tiny_qwen3(
        request,
        "qwen3",
        request.getfixturevalue("qwen3_backend"),
        chat_template=qwen3_chat_template(),
        tool_call_parser="hermes",
        reasoning_parser="qwen3",
        call_syntax=HERMES_CALL,
        forced_prefix="<think>\n\n</think>\n\n",
    )


def _smollm2(request: pytest.FixtureRequest) -> Family:
    from art_adapters_backend.bundled import resolve_model_path
    from transformers import AutoTokenizer

    template = resources.files("art_adapters_backend.serving") / "templates" / "smollm2-tool-use.jinja"
    return Family(
        name="smollm2",
        backend=request.getfixturevalue("local_backend"),
        base_model="smollm2-135m-instruct",
        tokenizer=AutoTokenizer.from_pretrained(str(resolve_model_path("smollm2-135m-instruct"))),
        chat_template=template.read_text(encoding="utf-8"),
        tool_call_parser="hermes",
        reasoning_parser=None,
        call_syntax=HERMES_CALL,
    )


def _llama3_json_flags(request: pytest.FixtureRequest) -> Family:
    return _on_tiny_qwen3(
        request,
        "llama3-json-flags",
        request.getfixturevalue("llama3_json_backend"),
        chat_template=LLAMA3_JSON_TEMPLATE.read_text(encoding="utf-8"),
        tool_call_parser="llama3_json",
        reasoning_parser=None,
        call_syntax=LLAMA3_JSON_CALL,
    )


@pytest.fixture(scope="session", params=FAMILIES)
def family(request: pytest.FixtureRequest) -> Any:
    """One model family with its running backend (see the module docstring)."""
    build = {"qwen3": _qwen3, "smollm2": _smollm2, "llama3-json-flags": _llama3_json_flags}[request.param]
    return build(request)
