"""Which chat template and which parsers serve a base model: its "family", fixed at start-up.

What you train is what you deploy: the backend renders every prompt with the model's own
Jinja chat template (or the one given with ``--chat-template``, vLLM's flag), and parses tool
calls and reasoning with parsers named like vLLM's ``--tool-call-parser`` and
``--reasoning-parser``; :func:`resolve_model_family` chooses them.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from art_adapters.files import write_atomic

from .reasoning import REASONING_PARSERS
from .tool_parser import TOOL_CALL_PARSERS

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = [
    "CHAT_TEMPLATE_FILE",
    "SERVING_SETTINGS",
    "ModelFamily",
    "ModelFamilyError",
    "bundled_chat_template_path",
    "detect_reasoning_parser",
    "detect_tool_call_parser",
    "resolve_model_family",
    "write_serving_settings",
]

logger = logging.getLogger(__name__)

_BUNDLED_TEMPLATE = "smollm2-tool-use.jinja"


class ModelFamilyError(ValueError):
    """The template or a parser cannot be chosen; the message names the flag to pass."""


@dataclass(frozen=True)
class ModelFamily:
    """The rendering and parsing settings of one served base model.

    Attributes:
        chat_template: the Jinja chat template text every prompt is rendered with.
        chat_template_source: where it came from (a file path, ``"tokenizer"``, ``"inline"``).
        tool_call_parser: vLLM's ``--tool-call-parser`` name (``hermes``, ``llama3_json``) or
            ``None`` when the template has no tool support.
        reasoning_parser: vLLM's ``--reasoning-parser`` name (``qwen3``, ``deepseek_r1``) or ``None``.
    """

    chat_template: str
    chat_template_source: str
    tool_call_parser: str | None
    reasoning_parser: str | None

    def vllm_flags(self, chat_template_path: str | Path) -> list[str]:
        """The ``vllm serve`` flags that render and parse exactly like this backend."""
        flags = ["--chat-template", str(chat_template_path)]
        if self.tool_call_parser:
            flags += ["--enable-auto-tool-choice", "--tool-call-parser", self.tool_call_parser]
        if self.reasoning_parser:
            flags += ["--reasoning-parser", self.reasoning_parser]
        return flags


#: The file in the run directory that says how prompts are rendered and parsed (read by :mod:`.export`).
SERVING_SETTINGS = "serving.json"
CHAT_TEMPLATE_FILE = "chat_template.jinja"


def write_serving_settings(run_dir: Path, base_model: str, model_path: Path, family: ModelFamily) -> None:
    """Write ``chat_template.jinja`` and ``serving.json`` into the run directory (atomically).

    They record what every prompt of this run was rendered with, so an exported checkpoint can
    name the exact ``vllm serve`` flags that reproduce it.
    """
    write_atomic(run_dir / CHAT_TEMPLATE_FILE, family.chat_template.encode("utf-8"))
    settings = {
        "base_model": base_model,
        "base_model_path": str(Path(model_path).resolve()),
        "chat_template_file": CHAT_TEMPLATE_FILE,
        "chat_template_source": family.chat_template_source,
        "tool_call_parser": family.tool_call_parser,
        "reasoning_parser": family.reasoning_parser,
    }
    write_atomic(run_dir / SERVING_SETTINGS, (json.dumps(settings, indent=2) + "\n").encode("utf-8"))


def bundled_chat_template_path() -> Path:
    """The tool-capable chat template shipped for the bundled SmolLM2 (usable as vLLM's ``--chat-template``)."""
    return Path(str(resources.files("art_adapters_backend.serving") / "templates" / _BUNDLED_TEMPLATE))


def _looks_like_template(text: str) -> bool:
    return "{{" in text or "{%" in text


def _read_override(value: str | Path) -> tuple[str, str]:
    """``--chat-template``: a file path, or (as vLLM allows) the template text itself."""
    text = str(value)
    path = Path(text).expanduser()
    try:
        if path.is_file():
            return path.read_text(encoding="utf-8"), str(path)
    except OSError:  # a long inline template is not a valid path
        pass
    if _looks_like_template(text):
        return text, "inline"
    raise ModelFamilyError(
        f"--chat-template {text!r}: no such file (pass the path of a Jinja chat template file, "
        "or the template text itself)"
    )


def _tokenizer_template(tokenizer: PreTrainedTokenizerBase) -> str | None:
    template: Any = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):  # named templates: transformers' default is "default"
        template = template.get("default") or template.get("tool_use")
    return template if isinstance(template, str) and template.strip() else None


def detect_tool_call_parser(template: str) -> str | None:
    """The tool-call parser a chat template's call syntax implies (``None``: the template has no tools).

    Raises:
        ModelFamilyError: the template renders tools in a syntax no parser here knows.
    """
    if "<tool_call>" in template:
        return "hermes"
    if '"parameters"' in template and ("<|eot_id|>" in template or "ipython" in template):
        return "llama3_json"
    if "tools" in template or "tool_calls" in template:
        raise ModelFamilyError(
            "the chat template renders tools, but not in a call syntax recognised here: pass "
            f"--tool-call-parser ({', '.join(sorted(TOOL_CALL_PARSERS))}) naming the model's syntax"
        )
    return None


def detect_reasoning_parser(template: str) -> str | None:
    """The reasoning parser a chat template implies (``None``: no thinking markers)."""
    if "<think>" not in template and "</think>" not in template:
        return None
    return "qwen3" if "<|im_start|>" in template else "deepseek_r1"


def _check_name(name: str, known: dict[str, Any], flag: str) -> str:
    if name not in known:
        raise ModelFamilyError(f"{flag} {name!r} is not known here; use one of: {', '.join(sorted(known))}")
    return name


def resolve_model_family(
    tokenizer: PreTrainedTokenizerBase,
    *,
    bundled: bool,
    chat_template: str | Path | None = None,
    tool_call_parser: str | None = None,
    reasoning_parser: str | None = None,
) -> ModelFamily:
    """Choose the template and parsers for a base model, once, at start-up.

    Where it cannot choose it fails with a message naming the flag to pass:

    * **Template**: ``--chat-template`` (a file, or the template text itself, as vLLM accepts);
      else, for the bundled SmolLM2 (whose own template has no tool block), the tool-capable
      template shipped in ``art_adapters_backend/serving/templates/``; else the tokenizer's own
      ``chat_template``. A tokenizer without one is a start-up error naming ``--chat-template``.
    * **Tool-call parser**: the flag, else read off the template: ``<tool_call>`` is ``hermes``
      (Qwen2.5, Qwen3, Hermes, our SmolLM2 template); ``"parameters"`` with Llama 3's
      ``<|eot_id|>``/``ipython`` is ``llama3_json``. A template that renders ``tools`` in a syntax
      we do not recognise is a start-up error naming ``--tool-call-parser``; one that never
      mentions tools gets no parser (requests with tools are then refused with a 400).
    * **Reasoning parser**: the flag, else ``qwen3`` for a ChatML template that knows
      ``<think>`` (Qwen3), ``deepseek_r1`` for another template that does; none otherwise.

    Args:
        tokenizer: the base model's tokenizer.
        bundled: whether the model is the bundled SmolLM2 (its shipped tool template is the default).
        chat_template: ``--chat-template``: a file or the template text; ``None`` for the default.
        tool_call_parser: ``--tool-call-parser``; ``None`` to read it off the template.
        reasoning_parser: ``--reasoning-parser``; ``None`` to read it off the template.

    Raises:
        ModelFamilyError: no chat template, or a parser cannot be chosen; the message names the flag.
    """
    if chat_template is not None:
        text, source = _read_override(chat_template)
    elif bundled:
        path = bundled_chat_template_path()
        text, source = path.read_text(encoding="utf-8"), str(path)
    else:
        found = _tokenizer_template(tokenizer)
        if found is None:
            raise ModelFamilyError(
                "the model's tokenizer has no chat template (tokenizer_config.json 'chat_template' or "
                "chat_template.jinja): pass --chat-template FILE with the template the model was trained on"
            )
        text, source = found, "tokenizer"
    tool = (
        _check_name(tool_call_parser, TOOL_CALL_PARSERS, "--tool-call-parser")
        if tool_call_parser
        else detect_tool_call_parser(text)
    )
    reasoning = (
        _check_name(reasoning_parser, REASONING_PARSERS, "--reasoning-parser")
        if reasoning_parser
        else detect_reasoning_parser(text)
    )
    family = ModelFamily(text, source, tool, reasoning)
    logger.info(
        "chat template from %s; tool-call parser %s; reasoning parser %s",
        source,
        tool or "none",
        reasoning or "none",
    )
    return family
