"""LangChain objects -> the OpenAI-format records of :mod:`art_adapters._trajectory`.

Pure functions used by the callback handler. They read LangChain messages by their public attributes,
so this module imports nothing from LangChain at run time, and build records with ``model_construct``
(LangChain already validated the messages), which keeps conversion cheap.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from art_adapters._capture.assembly import model_name
from art_adapters._capture.otel_records import as_text, tool_schema_from_definition
from art_adapters._trajectory import FunctionCall, Message, ToolCall, ToolSchema

if TYPE_CHECKING:
    from langchain_core.messages import BaseMessage
    from langchain_core.outputs import LLMResult

__all__ = [
    "ToolsCache",
    "completion_id",
    "content_of",
    "convert_messages",
    "error_text",
    "message_from_langchain",
    "output_message",
    "output_model",
    "output_usage",
    "requested_model",
    "tool_output",
    "tools_from_invocation",
    "usage_of",
]

_ROLES = {
    "system": "system",
    "human": "user",
    "ai": "assistant",
    "tool": "tool",
    "SystemMessageChunk": "system",
    "HumanMessageChunk": "user",
    "AIMessageChunk": "assistant",
    "ToolMessageChunk": "tool",
}
#: Completion ids as OpenAI-compatible servers (our backend included) issue them.
#: The response header our backend sets to the completion id (lower-cased, as httpx reports it).
COMPLETION_ID_HEADER = "x-completion-id"
_COMPLETION_ID = re.compile(r"^chatcmpl-[A-Za-z0-9_-]+$")


def content_of(content: Any) -> str | list[dict[str, Any]] | None:
    """Message content in OpenAI form: text blocks joined into one string, other blocks kept as parts."""
    if content is None or isinstance(content, str):
        return content
    if not isinstance(content, list):
        return as_text(content)
    parts: list[dict[str, Any]] = []
    for block in content:
        if isinstance(block, str):
            parts.append({"type": "text", "text": block})
        elif isinstance(block, Mapping):
            if block.get("type") == "text":
                parts.append({"type": "text", "text": str(block.get("text", ""))})
            elif block.get("type") not in ("tool_use", "reasoning", "thinking"):
                parts.append(dict(block))
    if all(p.get("type") == "text" for p in parts):
        return "".join(p["text"] for p in parts)
    return parts


def _call(call_id: Any, name: str, arguments: str) -> ToolCall:
    return ToolCall.model_construct(
        id=str(call_id or ""),
        type="function",
        function=FunctionCall.model_construct(name=name, arguments=arguments),
    )


def _tool_calls(message: Any) -> list[ToolCall] | None:
    calls: list[ToolCall] = []
    for call in getattr(message, "tool_calls", None) or []:
        name = call.get("name")
        if not name:
            continue
        arguments = call.get("args")
        text = arguments if isinstance(arguments, str) else json.dumps(arguments or {}, ensure_ascii=False)
        calls.append(_call(call.get("id"), str(name), text))
    for call in (
        getattr(message, "invalid_tool_calls", None) or []
    ):  # malformed JSON from the model: keep it verbatim
        if call.get("name"):
            calls.append(_call(call.get("id"), str(call["name"]), str(call.get("args") or "")))
    return calls or None


def _message(
    role: str, content: Any, *, name: Any = None, tool_calls: Any = None, tool_call_id: Any = None
) -> Message:
    return Message.model_construct(
        role=role,
        content=content,
        name=name if isinstance(name, str) and name else None,
        tool_calls=tool_calls,
        tool_call_id=str(tool_call_id) if tool_call_id else None,
    )


def message_from_langchain(message: BaseMessage | Any) -> Message | None:
    """One LangChain message as an OpenAI-format :class:`Message`; ``None`` for unknown kinds."""
    kind = getattr(message, "type", None)
    if kind in ("chat", "ChatMessageChunk"):
        role = str(getattr(message, "role", ""))
        role = {"human": "user", "ai": "assistant"}.get(role, role)
    else:
        role = _ROLES.get(str(kind))
    if (
        role == "system"
        and (getattr(message, "additional_kwargs", None) or {}).get("__openai_role__") == "developer"
    ):
        role = "developer"
    if role not in ("system", "developer", "user", "assistant", "tool"):
        return None
    content = content_of(getattr(message, "content", None))
    name = getattr(message, "name", None)
    if role == "assistant":
        return _message(
            "assistant", "" if content is None else content, name=name, tool_calls=_tool_calls(message)
        )
    if role == "tool":
        if isinstance(content, list):
            content = as_text(content)
        return _message("tool", content, name=name, tool_call_id=getattr(message, "tool_call_id", None))
    return _message(role, content, name=name)


def completion_id(message: Any, llm_output: Mapping[str, Any] | None = None) -> str | None:
    """The provider's response id of a model output: ``response_metadata["id"]``, ``llm_output["id"]``,
    our backend's ``X-Completion-Id`` response header (kept by ``ChatOpenAI(include_response_headers=True)``,
    also when streaming, where LangChain drops the chunks' ids), or the message id when it has the
    ``chatcmpl-`` form (LangChain's own ``run-``/``lc_run--`` ids are not)."""
    metadata = getattr(message, "response_metadata", None) or {}
    headers = metadata.get("headers")
    header_id = None
    if isinstance(headers, Mapping):
        header_id = next((v for k, v in headers.items() if str(k).lower() == COMPLETION_ID_HEADER), None)
    for value in (metadata.get("id"), (llm_output or {}).get("id"), header_id):
        if isinstance(value, str) and value:
            return value
    message_id = getattr(message, "id", None)
    if isinstance(message_id, str) and _COMPLETION_ID.match(message_id):
        return message_id
    return None


def usage_of(message: Any, llm_output: Mapping[str, Any] | None = None) -> dict[str, int]:
    """Token usage of one model output as ``prompt_tokens`` / ``completion_tokens`` / ``total_tokens``."""
    usage = getattr(message, "usage_metadata", None)
    if isinstance(usage, Mapping) and ("input_tokens" in usage or "output_tokens" in usage):
        prompt, completion = int(usage.get("input_tokens") or 0), int(usage.get("output_tokens") or 0)
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": int(usage.get("total_tokens") or prompt + completion),
        }
    token_usage = (llm_output or {}).get("token_usage")
    if isinstance(token_usage, Mapping):
        return {
            key: int(token_usage[key])
            for key in ("prompt_tokens", "completion_tokens", "total_tokens")
            if isinstance(token_usage.get(key), int)
        }
    return {}


def _first_generation(response: LLMResult) -> Any:
    generations = response.generations[0] if response.generations else []
    return generations[0] if generations else None


def output_message(response: LLMResult) -> Message | None:
    """The assistant message of a model call's result (its first generation), with its completion id."""
    generation = _first_generation(response)
    if generation is None:
        return None
    message = getattr(generation, "message", None)
    if message is None:  # a completion (non-chat) model
        return Message(role="assistant", content=generation.text)
    converted = message_from_langchain(message)
    if converted is None or converted.role != "assistant":
        converted = Message(role="assistant", content=content_of(getattr(message, "content", "")) or "")
    converted.completion_id = completion_id(message, response.llm_output)
    return converted


def output_usage(response: LLMResult) -> dict[str, int]:
    """Token usage of a model call's result."""
    generation = _first_generation(response)
    return usage_of(getattr(generation, "message", None), response.llm_output)


def output_model(response: LLMResult) -> str | None:
    """The model name a call's result reports: the message's ``response_metadata["model_name"]``
    (``ChatOpenAI`` copies the response's ``model`` there, streamed or not), its generation info,
    or ``llm_output["model_name"]``; ``None`` when none does."""
    generation = _first_generation(response)
    metadata = getattr(getattr(generation, "message", None), "response_metadata", None) or {}
    info = getattr(generation, "generation_info", None) or {}
    llm_output = response.llm_output or {}
    return model_name(
        metadata.get("model_name"),
        metadata.get("model"),
        info.get("model_name"),
        llm_output.get("model_name"),
        llm_output.get("model"),
    )


def requested_model(
    invocation_params: Mapping[str, Any] | None, metadata: Mapping[str, Any] | None
) -> str | None:
    """The model name a call asked for: ``invocation_params["model"]`` (or ``model_name``,
    ``model_id``), else LangChain's ``ls_model_name`` metadata; ``None`` when neither says."""
    params = invocation_params or {}
    return model_name(
        params.get("model"),
        params.get("model_name"),
        params.get("model_id"),
        (metadata or {}).get("ls_model_name"),
    )


def convert_messages(messages: list[Any]) -> list[Message]:
    """LangChain messages as OpenAI-format messages (unknown kinds skipped)."""
    return [m for m in map(message_from_langchain, messages) if m is not None]


def tools_from_invocation(invocation_params: Mapping[str, Any] | None) -> list[ToolSchema] | None:
    """The tools bound to a model call (``invocation_params["tools"]``), OpenAI function format."""
    raw = (invocation_params or {}).get("tools")
    if not isinstance(raw, list | tuple):
        return None
    tools = [t for t in map(tool_schema_from_definition, raw) if t is not None]
    return tools or None


class ToolsCache:
    """:func:`tools_from_invocation` remembered per bound tool list.

    A model bound with ``bind_tools`` hands the same list object to every call, so a
    run's calls (and concurrent runs of one graph) convert their tools once. Keyed by
    the list's identity while holding a reference to it, so an id is never reused.
    """

    def __init__(self, max_entries: int = 256) -> None:
        self._max_entries = max_entries
        self._entries: dict[int, tuple[Any, list[ToolSchema] | None]] = {}

    def __call__(self, invocation_params: Mapping[str, Any] | None) -> list[ToolSchema] | None:
        """The tools of one call's invocation params (converted on first sight of their list)."""
        raw = (invocation_params or {}).get("tools")
        if not isinstance(raw, list | tuple):
            return None
        entry = self._entries.get(id(raw))
        if entry is not None and entry[0] is raw:
            return entry[1]
        tools = tools_from_invocation(invocation_params)
        if len(self._entries) >= self._max_entries:
            self._entries.clear()
        self._entries[id(raw)] = (raw, tools)
        return tools


def tool_output(output: Any) -> tuple[str | None, bool, str | None]:
    """A tool's output as ``(text, is_error, tool_call_id)``; a ``ToolMessage`` with ``status="error"`` is an error."""
    if getattr(output, "type", None) == "tool":
        call_id = getattr(output, "tool_call_id", None)
        content = content_of(output.content)
        return (
            content if isinstance(content, str) or content is None else as_text(content),
            getattr(output, "status", "success") == "error",
            str(call_id) if call_id else None,
        )
    if output is None or isinstance(output, str):
        return output, False, None
    if getattr(output, "content", None) is not None:  # another message type
        return as_text(content_of(output.content)), False, None
    return as_text(output), False, None


def error_text(error: BaseException) -> str:
    """``"Type: message"`` for a recorded failure (``"Type"`` when the message is empty)."""
    message = str(error)
    return f"{type(error).__name__}: {message}" if message else type(error).__name__
