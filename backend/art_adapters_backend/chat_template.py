"""Render OpenAI chat messages (and tools) into the model's ChatML prompt, as text and token ids.

SmolLM2's own template is plain ChatML (``<|im_start|>role\\ncontent<|im_end|>\\n``, a default
system turn when none is given) and has no tool block, so tools are rendered here,
Hermes style: the system turn lists the tools' JSON schemas inside ``<tools></tools>``,
says how to call one (``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``) and
shows ONE worked example built from the first tool (a 135M model makes 0% correct calls
without such a foothold, 72% with it). Assistant tool calls are rendered as that same
text; tool results as ``<tool_response>...</tool_response>`` in a user turn.

Prefix property: for every history ``h`` and continuation ``c``, the tokens of ``h`` with
the generation prompt are a prefix of the tokens of ``h + [assistant reply] + c``. Token
ids are produced segment by segment (turn headers, contents and turn ends tokenised
separately), so no BPE merge ever crosses a turn boundary and the property holds for
token ids, not only for text. Exact-token training relies on it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Self

from pydantic import BaseModel

from art_adapters.content import content_text

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = [
    "DEFAULT_SYSTEM_PROMPT",
    "TOOL_CALL_PREFIX",
    "TOOL_CALL_SUFFIX",
    "ChatTemplate",
    "example_arguments",
    "render_tool_call",
    "tools_system_block",
]

#: SmolLM2's default system turn, added when the conversation has no system message.
DEFAULT_SYSTEM_PROMPT = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
#: What precedes and follows the JSON of a tool call in the model's text.
TOOL_CALL_PREFIX = "<tool_call>\n"
TOOL_CALL_SUFFIX = "\n</tool_call>"

_IM_START = "<|im_start|>"
_IM_END = "<|im_end|>"


def render_tool_call(name: str, arguments: Any) -> str:
    """``<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>`` for one call.

    ``arguments`` may be the object or its JSON string (an unparsable string is kept as is).
    """
    if isinstance(arguments, str):
        # RecursionError: nested too deep to be real arguments (loading, or dumping one level deeper)
        try:
            parsed = json.loads(arguments) if arguments.strip() else {}
            return (
                TOOL_CALL_PREFIX
                + json.dumps({"name": name, "arguments": parsed}, ensure_ascii=False)
                + TOOL_CALL_SUFFIX
            )
        except (json.JSONDecodeError, RecursionError):
            pass
    return (
        TOOL_CALL_PREFIX
        + json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
        + TOOL_CALL_SUFFIX
    )


#: Nesting levels the worked example follows; deeper values are left empty (a schema nested
#: hundreds deep is valid JSON and would hit Python's recursion limit).
_MAX_EXAMPLE_DEPTH = 16


def _example_value(schema: Any, counter: list[int], depth: int = 0) -> Any:
    if not isinstance(schema, Mapping):  # a boolean schema (``true``: anything) or junk
        return "example"
    if depth > _MAX_EXAMPLE_DEPTH:
        return None
    if schema.get("enum"):
        return schema["enum"][0]
    if "const" in schema:
        return schema["const"]
    if "default" in schema:
        return schema["default"]
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            return _example_value(schema[key][0], counter, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind == "integer":
        counter[0] += 1
        return counter[0] + 1
    if kind == "number":
        counter[0] += 1
        return counter[0] + 1.5
    if kind == "boolean":
        return True
    if kind == "array":
        items = schema.get("items")
        return [_example_value(items, counter, depth + 1)] if isinstance(items, Mapping) else []
    if kind == "object" or "properties" in schema:
        return example_arguments(schema, counter, depth + 1)
    if kind == "null":
        return None
    return "example"


def example_arguments(
    parameters: Mapping[str, Any], counter: list[int] | None = None, depth: int = 0
) -> dict[str, Any]:
    """Placeholder arguments that fit a parameters schema (required properties, else all)."""
    counter = counter if counter is not None else [0]
    properties = parameters.get("properties")
    if not isinstance(properties, Mapping):
        return {}
    required = parameters.get("required")
    names = [n for n in properties if not isinstance(required, list) or n in required] or list(properties)
    return {
        name: _example_value(
            properties[name] if isinstance(properties[name], Mapping) else {}, counter, depth
        )
        for name in names
    }


def tools_system_block(tools: Sequence[Mapping[str, Any]]) -> str:
    """The Hermes-style tool section of the system turn, with one worked example.

    ``tools`` are OpenAI tool objects (``{"type": "function", "function": {...}}``).
    """
    lines = [json.dumps(tool, ensure_ascii=False) for tool in tools]
    first = tools[0]["function"]
    example = render_tool_call(first["name"], example_arguments(first.get("parameters") or {}))
    return (
        "# Tools\n\n"
        "You may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n"
        "<tools>\n" + "\n".join(lines) + "\n</tools>\n\n"
        "For each function call, return a json object with function name and arguments within "
        "<tool_call></tool_call> XML tags:\n"
        "<tool_call>\n"
        '{"name": <function-name>, "arguments": <args-json-object>}\n'
        "</tool_call>\n\n"
        f"For example, a call of {first['name']} looks like this (use the values the user's request "
        f"needs, not these):\n{example}\n\n"
        "When a tool result arrives inside <tool_response></tool_response>, use it to answer the user."
    )


def _as_dict(message: Mapping[str, Any] | BaseModel) -> dict[str, Any]:
    if isinstance(message, BaseModel):
        return message.model_dump(exclude_none=True, by_alias=True)
    return dict(message)


def _tool_dicts(tools: Iterable[Mapping[str, Any] | BaseModel] | None) -> list[dict[str, Any]]:
    out = []
    for tool in tools or []:
        data = _as_dict(tool)
        function = data.get("function") or {}
        compact = {"name": function.get("name")}
        if function.get("description"):
            compact["description"] = function["description"]
        compact["parameters"] = function.get("parameters") or {"type": "object", "properties": {}}
        out.append({"type": "function", "function": compact})
    return out


class _Exact(str):
    """A segment whose token ids are known exactly (a sampled turn): encoded as ``ids``."""

    ids: list[int]

    def __new__(cls, text: str, ids: list[int]) -> Self:
        obj = super().__new__(cls, text)
        obj.ids = list(ids)
        return obj


class _Content(str):
    """A segment of message text (system, user or tool content): its special-token
    strings are tokenised as plain text, so a message (a tool's output, say) that contains
    ``<|im_end|>`` cannot close its turn and forge another one."""


class ChatTemplate:
    """ChatML rendering with Hermes-style tools for one tokenizer.

    Args:
        tokenizer: the model's tokenizer (its ``<|im_start|>``/``<|im_end|>`` must be single tokens).
        default_system_prompt: the system turn added when a conversation has none.
    """

    def __init__(
        self, tokenizer: PreTrainedTokenizerBase, default_system_prompt: str = DEFAULT_SYSTEM_PROMPT
    ) -> None:
        self.tokenizer = tokenizer
        self.default_system_prompt = default_system_prompt
        self._cache: dict[tuple[bool, str], list[int]] = {}
        #: message -> the exact token ids this server sampled for that tool-call turn, or None
        #: (set by the server: :class:`~.sampled_turns.SampledTurns`).
        self.sampled_turns: Callable[[Mapping[str, Any]], list[int] | None] | None = None

    def segments(
        self,
        messages: Sequence[Mapping[str, Any] | BaseModel],
        tools: Iterable[Mapping[str, Any] | BaseModel] | None = None,
        *,
        add_generation_prompt: bool = True,
    ) -> list[str]:
        """The prompt as the list of text segments that are tokenised one by one."""
        dicts = [_as_dict(m) for m in messages]
        tool_dicts = _tool_dicts(tools)
        out: list[str] = []
        if not dicts or dicts[0].get("role") not in ("system", "developer"):
            system = self.default_system_prompt
            if tool_dicts:
                system += "\n\n" + tools_system_block(tool_dicts)
            self._turn(out, "system", system)
        for i, message in enumerate(dicts):
            role = message.get("role")
            if role in ("system", "developer"):
                text = content_text(message.get("content"))
                if i == 0 and tool_dicts:
                    text = (text + "\n\n" if text else "") + tools_system_block(tool_dicts)
                self._turn(out, "system", text)
            elif role == "user":
                self._turn(out, "user", content_text(message.get("content")))
            elif role == "assistant":
                exact = self.sampled_turns(message) if self.sampled_turns and message.get("tool_calls") else None
                if exact is not None:
                    text = self.tokenizer.decode(exact)
                    out.extend([f"{_IM_START}assistant\n", _Exact(text, exact), f"{_IM_END}\n"])
                else:
                    self._turn(out, "assistant", self.assistant_text(message))
            elif role == "tool":
                text = "<tool_response>\n" + content_text(message.get("content")) + "\n</tool_response>"
                self._turn(out, "user", text)
            else:
                raise ValueError(f"unknown message role {role!r}")
        if add_generation_prompt:
            out.append(f"{_IM_START}assistant\n")
        return out

    @staticmethod
    def assistant_text(message: Mapping[str, Any]) -> str:
        """The text of an assistant turn: its content, then its tool calls as ``<tool_call>`` blocks."""
        text = content_text(message.get("content"))
        calls = [
            render_tool_call((call.get("function") or {}).get("name", ""), (call.get("function") or {}).get("arguments", "{}"))
            for call in message.get("tool_calls") or []
        ]  # fmt: skip
        if calls:
            text = (text + "\n" if text else "") + "\n".join(calls)
        return text

    @staticmethod
    def _turn(out: list[str], role: str, content: str) -> None:
        """Append one turn. System, user and tool text is :class:`_Content` (special-token strings in
        it stay text); an assistant turn's text is what the model wrote and is tokenised as it is."""
        out.append(f"{_IM_START}{role}\n")
        if content:
            out.append(content if role == "assistant" else _Content(content))
        out.append(f"{_IM_END}\n")

    def render(
        self,
        messages: Sequence[Mapping[str, Any] | BaseModel],
        tools: Iterable[Mapping[str, Any] | BaseModel] | None = None,
        *,
        add_generation_prompt: bool = True,
    ) -> str:
        """The prompt text."""
        return "".join(self.segments(messages, tools, add_generation_prompt=add_generation_prompt))

    def encode(
        self,
        messages: Sequence[Mapping[str, Any] | BaseModel],
        tools: Iterable[Mapping[str, Any] | BaseModel] | None = None,
        *,
        add_generation_prompt: bool = True,
    ) -> list[int]:
        """The prompt token ids (segment by segment, so histories extend as token prefixes)."""
        ids: list[int] = []
        for segment in self.segments(messages, tools, add_generation_prompt=add_generation_prompt):
            ids.extend(segment.ids if isinstance(segment, _Exact) else self._encode_segment(segment))
        return ids

    def _encode_segment(self, segment: str) -> list[int]:
        is_content = isinstance(segment, _Content)
        key = (is_content, str(segment))  # the same text is two token sequences: markup vs. content
        cached = self._cache.get(key)
        if cached is None:
            encoded = self.tokenizer(segment, add_special_tokens=False, split_special_tokens=is_content)
            cached = list(encoded["input_ids"])
            if len(segment) < 4096 and len(self._cache) < 4096:  # headers, system blocks, tool blocks
                self._cache[key] = cached
        return list(cached)
