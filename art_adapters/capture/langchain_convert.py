"""LangChain objects -> the OpenAI-format records of :mod:`art_adapters.trajectory`.

Pure functions used by the callback handler. They read LangChain messages by their
public attributes (``type``, ``content``, ``tool_calls``, ``tool_call_id``, ``name``,
``response_metadata``, ``usage_metadata``), so this module imports nothing from
LangChain at run time.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from art_adapters.capture.otel_records import as_text, tool_schema_from_definition
from art_adapters.trajectory import FunctionCall, Message, ToolCall, ToolSchema

if TYPE_CHECKING:
    from langchain_core.messages import BaseMessage
    from langchain_core.outputs import LLMResult

__all__ = [
    "completion_id",
    "content_of",
    "error_text",
    "message_from_langchain",
    "output_message",
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


def _tool_calls(message: Any) -> list[ToolCall] | None:
    calls: list[ToolCall] = []
    for call in getattr(message, "tool_calls", None) or []:
        name = call.get("name")
        if not name:
            continue
        arguments = call.get("args")
        calls.append(
            ToolCall(
                id=str(call.get("id") or ""),
                function=FunctionCall(
                    name=name,
                    arguments=arguments if isinstance(arguments, str) else json.dumps(arguments or {}, ensure_ascii=False),
                ),
            )
        )
    for call in getattr(message, "invalid_tool_calls", None) or []:  # malformed JSON from the model: keep it verbatim
        if call.get("name"):
            calls.append(
                ToolCall(id=str(call.get("id") or ""), function=FunctionCall(name=call["name"], arguments=call.get("args") or ""))
            )
    return calls or None


def message_from_langchain(message: BaseMessage | Any) -> Message | None:
    """One LangChain message as an OpenAI-format :class:`Message`; ``None`` for unknown kinds."""
    kind = getattr(message, "type", None)
    if kind in ("chat", "ChatMessageChunk"):
        role = str(getattr(message, "role", ""))
        role = {"human": "user", "ai": "assistant"}.get(role, role)
    else:
        role = _ROLES.get(str(kind))
    if role == "system" and (getattr(message, "additional_kwargs", None) or {}).get("__openai_role__") == "developer":
        role = "developer"
    if role not in ("system", "developer", "user", "assistant", "tool"):
        return None
    content = content_of(getattr(message, "content", None))
    name = getattr(message, "name", None)
    if role == "assistant":
        tool_calls = _tool_calls(message)
        if content is None:
            content = ""
        return Message(role="assistant", content=content, name=name or None, tool_calls=tool_calls)
    if role == "tool":
        if isinstance(content, list):
            content = as_text(content)
        call_id = getattr(message, "tool_call_id", None)
        return Message(role="tool", content=content, name=name or None, tool_call_id=str(call_id) if call_id else None)
    return Message(role=role, content=content, name=name or None)  # type: ignore[arg-type]


def completion_id(message: Any, llm_output: Mapping[str, Any] | None = None) -> str | None:
    """The provider's response id of a model output: ``response_metadata["id"]``, ``llm_output["id"]``,
    or the message id when it has the ``chatcmpl-`` form (LangChain's own ``run-``/``lc_run--`` ids are not)."""
    metadata = getattr(message, "response_metadata", None) or {}
    for value in (metadata.get("id"), (llm_output or {}).get("id")):
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


def output_message(response: LLMResult) -> tuple[Message | None, dict[str, int]]:
    """The assistant message of a model call's result (its first generation), with its usage."""
    generations = response.generations[0] if response.generations else []
    if not generations:
        return None, {}
    generation = generations[0]
    llm_output = response.llm_output or {}
    message = getattr(generation, "message", None)
    if message is None:  # a completion (non-chat) model
        return Message(role="assistant", content=generation.text), usage_of(None, llm_output)
    converted = message_from_langchain(message)
    if converted is None or converted.role != "assistant":
        converted = Message(role="assistant", content=content_of(getattr(message, "content", "")) or "")
    converted.completion_id = completion_id(message, llm_output)
    return converted, usage_of(message, llm_output)


def tools_from_invocation(invocation_params: Mapping[str, Any] | None) -> list[ToolSchema] | None:
    """The tools bound to a model call (``invocation_params["tools"]``), OpenAI function format."""
    raw = (invocation_params or {}).get("tools")
    if not isinstance(raw, list | tuple):
        return None
    tools = [t for t in map(tool_schema_from_definition, raw) if t is not None]
    return tools or None


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
