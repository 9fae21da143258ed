"""Spans written by the Langfuse SDK (its LangChain ``CallbackHandler``, ``@observe``, ``start_observation``).

Langfuse (v3 and later) records each observation as an OpenTelemetry span whose
``langfuse.observation.*`` attributes hold the observation's type and its input and output as
JSON. This module reads the two kinds that matter for a trajectory back into the neutral
:mod:`.otel_records` calls: *generations* (model calls) and *tools* (tool executions); chains,
agents, retrievers and plain spans carry no call of their own and are left out.
See :func:`parse_langfuse_span` for the attributes read.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from art_adapters._capture import otel_records as records
from art_adapters._capture.assembly import model_name
from art_adapters._capture.langchain_convert import content_of
from art_adapters._capture.otel_records import SpanModelCall, SpanToolCall
from art_adapters._trajectory import Message, ToolCall, ToolSchema

__all__ = ["LangfuseSpanSkipped", "parse_langfuse_span"]

logger = logging.getLogger(__name__)

TYPE = "langfuse.observation.type"
INPUT = "langfuse.observation.input"
OUTPUT = "langfuse.observation.output"
MODEL = "langfuse.observation.model.name"
USAGE = "langfuse.observation.usage_details"
TOOL_CALL_ID = "langfuse.observation.metadata.tool_call_id"

#: Observation types that never hold a model or tool call of their own (Langfuse's span-like types).
_CONTAINERS = frozenset(
    {"span", "agent", "chain", "retriever", "evaluator", "guardrail", "event", "embedding"}
)
_USAGE_KEYS = (("input", "prompt_tokens"), ("output", "completion_tokens"), ("total", "total_tokens"))

_warned: set[str] = set()


class LangfuseSpanSkipped(ValueError):
    """A Langfuse observation that names a call but lacks what is needed to read it.

    Raised by :func:`parse_langfuse_span`; the trace state counts the span as skipped (the
    trajectory's ``logs`` say how many), and the reason is logged once per process.
    """


def parse_langfuse_span(span: Any) -> SpanModelCall | SpanToolCall | None:
    """Turn a finished Langfuse ``generation`` or ``tool`` observation into a model or tool call.

    Other observation types give ``None``.

    What the LangChain ``CallbackHandler`` writes, and what becomes of it:

    =======================================  =====================================================
    ``langfuse.observation.type``            ``generation`` -> :class:`SpanModelCall`,
                                             ``tool`` -> :class:`SpanToolCall`, others ignored
    ``langfuse.observation.input``           generation: the chat messages (``role``, ``content``,
                                             LangChain ``tool_calls``, ``tool_call_id``) followed
                                             by one ``{"role": "tool", "content": <OpenAI tool>}``
                                             entry per bound tool (the call's tool definitions);
                                             tool: the tool's arguments
    ``langfuse.observation.output``          generation: the assistant message; tool: the
                                             serialised ``ToolMessage`` (or the plain result)
    ``langfuse.observation.model.name``      the response's model name, else the requested one
    ``langfuse.observation.usage_details``   ``{"input", "output", "total"}`` token counts
    ``langfuse.observation.metadata.*``      JSON values; ``tool_call_id`` names a tool's call
    span name / status                       the tool's name; ``ERROR`` with the error's message
    =======================================  =====================================================

    The handler does not record the provider's response id, so assistant turns captured this way carry
    no ``completion_id`` (training re-tokenises them), and its error text is the exception's message
    without its type. Messages in OpenAI form (``tool_calls`` with ``function``; a dict input with
    ``messages`` and ``tools``), as Langfuse's OpenAI integration and hand-made generations record them,
    are read as well.

    Raises:
        LangfuseSpanSkipped: a generation without a readable input (its conversation is
            unknown, e.g. a masked or partially recorded observation).
    """
    attributes = span.attributes or {}
    kind = attributes.get(TYPE)
    if kind == "generation":
        return _model_call(span, attributes)
    if kind == "tool":
        return _tool_call(span, attributes)
    if kind not in _CONTAINERS:
        _warn_once(
            f"type:{kind}", "Langfuse observation type %r is not known; span %r ignored", kind, span.name
        )
    return None


def _warn_once(key: str, message: str, *args: Any) -> None:
    if key in _warned:
        logger.debug(message, *args)
        return
    _warned.add(key)
    logger.warning(message, *args)


def _skip(span: Any, reason: str) -> LangfuseSpanSkipped:
    _warn_once(
        f"skip:{reason}",
        "Langfuse generation %r skipped: %s (later ones are logged at debug level)",
        span.name,
        reason,
    )
    return LangfuseSpanSkipped(f"Langfuse generation {span.name!r}: {reason}")


def _model_call(span: Any, attributes: Mapping[str, Any]) -> SpanModelCall:
    if INPUT not in attributes:
        raise _skip(span, f"no input ({INPUT} missing)")
    messages, tools = _input(records.load_json(attributes[INPUT]))
    if not messages:
        raise _skip(span, f"its input ({INPUT}) holds no chat message")
    output = _output(attributes.get(OUTPUT))
    return SpanModelCall(
        span_id=span.context.span_id,
        start_ns=span.start_time or 0,
        messages=messages,
        tools=tools,
        output=output,
        usage=_usage(records.load_json(attributes.get(USAGE))),
        error=records.span_error(span),
        model=model_name(attributes.get(MODEL)),
    )


def _tool_call(span: Any, attributes: Mapping[str, Any]) -> SpanToolCall:
    result = records.load_json(attributes.get(OUTPUT))
    text, result_id, failed = _tool_result(result)
    call_id = records.load_json(attributes.get(TOOL_CALL_ID)) or result_id
    tool = records.tool_span_call(span, span.name, attributes.get(INPUT), text, call_id=call_id)
    tool.record.is_error = tool.record.is_error or failed
    return tool


def _input(value: Any) -> tuple[list[Message], list[ToolSchema] | None]:
    """A generation's input as (messages, tool definitions)."""
    tools: list[ToolSchema] = []
    if isinstance(value, Mapping) and isinstance(value.get("messages"), list):
        tools.extend(
            t for t in map(records.tool_schema_from_definition, value.get("tools") or []) if t is not None
        )
        value = value["messages"]
    if isinstance(value, str):  # a completion model's prompt
        return [Message(role="user", content=value)], None
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return [Message(role="user", content=v) for v in value], None
    messages: list[Message] = []
    for entry in value if isinstance(value, list) else []:
        if not isinstance(entry, Mapping):
            continue
        definition = _tool_definition(entry)
        if definition is not None:
            tools.append(definition)
            continue
        message = _message(entry)
        if message is not None:
            messages.append(message)
    return messages, tools or None


def _tool_definition(entry: Mapping[str, Any]) -> ToolSchema | None:
    """The tool of an input entry the handler appends for a bound tool (``role: tool``, a dict content)."""
    content = entry.get("content")
    if entry.get("role") != "tool" or not isinstance(content, Mapping) or "tool_call_id" in entry:
        return None
    return records.tool_schema_from_definition(content)


def _message(entry: Mapping[str, Any]) -> Message | None:
    """One message dict (the handler's form of a LangChain message, or OpenAI's) as a :class:`Message`."""
    role = records.normalise_role(entry.get("role"))
    extra = entry.get("additional_kwargs")
    if role == "system" and isinstance(extra, Mapping) and extra.get("__openai_role__") == "developer":
        role = "developer"
    if role is None:
        return None
    content = content_of(entry.get("content"))
    name = entry.get("name")
    name = name if isinstance(name, str) and name else None
    if role == "assistant":
        return Message(
            role="assistant",
            content="" if content is None else content,
            name=name,
            tool_calls=_tool_calls(entry),
        )
    if role == "tool":
        call_id = entry.get("tool_call_id")
        return Message(
            role="tool",
            content=records.as_text(content) if isinstance(content, list) else content,
            name=name,
            tool_call_id=str(call_id) if call_id else None,
        )
    return Message(role=role, content=content, name=name)  # type: ignore[arg-type]


def _tool_calls(entry: Mapping[str, Any]) -> list[ToolCall] | None:
    """An assistant message's tool calls: LangChain's (``name``, ``args``, ``id``) or OpenAI's
    (``function``), then the invalid ones (arguments kept verbatim)."""
    calls: list[ToolCall] = []
    for key in ("tool_calls", "invalid_tool_calls"):
        raw_calls = entry.get(key)
        for raw in raw_calls if isinstance(raw_calls, list) else []:
            if not isinstance(raw, Mapping):
                continue
            function = raw.get("function")
            if isinstance(function, Mapping):
                call = records.make_tool_call(raw.get("id"), function.get("name"), function.get("arguments"))
            else:
                arguments = raw.get("args")
                if arguments is None and key == "invalid_tool_calls":
                    arguments = ""
                call = records.make_tool_call(raw.get("id"), raw.get("name"), arguments)
            if call is not None:
                calls.append(call)
    return calls or None


def _output(value: Any) -> Message | None:
    """A generation's output: an assistant message dict, or a completion model's text."""
    value = records.load_json(value)
    if value is None:
        return None
    if isinstance(value, Mapping):
        message = _message({**value, "role": value.get("role", "assistant")})
        if message is not None and message.role == "assistant":
            return message
        return Message(role="assistant", content=content_of(value.get("content")) or "")
    return Message(role="assistant", content=records.as_text(value) or "")


def _tool_result(value: Any) -> tuple[Any, str | None, bool]:
    """A tool's output as (result, tool call id, is_error); a serialised ``ToolMessage`` is unwrapped."""
    if isinstance(value, Mapping) and value.get("type") == "tool" and "content" in value:
        content = content_of(value.get("content"))
        call_id = value.get("tool_call_id")
        return (
            content if isinstance(content, str) or content is None else records.as_text(content),
            str(call_id) if call_id else None,
            value.get("status") == "error",
        )
    return value, None, False


def _usage(value: Any) -> dict[str, int]:
    usage: dict[str, int] = {}
    if not isinstance(value, Mapping):
        return usage
    for key, name in _USAGE_KEYS:
        count = records.as_int(value.get(key))
        if count is not None:
            usage[name] = count
    return usage
