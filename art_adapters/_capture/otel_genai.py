"""Spans that follow the OpenTelemetry GenAI semantic conventions, and MCP ``tools/call`` spans.

They become the neutral :mod:`.otel_records` calls the span processor assembles, whichever GenAI
instrumentation (current or older attribute forms) produced them.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from art_adapters._capture import otel_records as records
from art_adapters._capture.assembly import model_name
from art_adapters._capture.otel_records import SpanModelCall, SpanToolCall
from art_adapters._trajectory import Message, ToolCall, ToolCallRecord, ToolSchema

__all__ = ["CHAT_OPERATIONS", "mcp_tool_record", "parse_genai_span", "parse_mcp_span"]

#: ``gen_ai.operation.name`` values that denote one call of a generative model.
CHAT_OPERATIONS = frozenset({"chat", "text_completion", "generate_content"})


def parse_genai_span(span: Any) -> SpanModelCall | SpanToolCall | None:
    """Turn a finished GenAI span into a model call or a tool call; ``None`` for other spans.

    Understood, for a chat span (``gen_ai.operation.name`` = ``chat``, ``text_completion``
    or ``generate_content``):

    - the current form: ``gen_ai.system_instructions``, ``gen_ai.input.messages`` and
      ``gen_ai.output.messages`` as JSON arrays of ``{"role", "parts": [...]}`` with
      ``text``, ``tool_call`` and ``tool_call_response`` parts; ``gen_ai.tool.definitions``;
      ``gen_ai.response.id``; ``gen_ai.usage.input_tokens`` / ``output_tokens``;
      ``gen_ai.response.model``, else ``gen_ai.request.model``, as the turn's model (else
      LangChain's ``ls_model_name`` as OpenLLMetry passes it on,
      ``traceloop.association.properties.ls_model_name``: it writes ``"unknown"`` as the
      request model of a chat model that LangChain cannot serialise);
    - the older forms: span events ``gen_ai.content.prompt`` / ``gen_ai.content.completion``
      carrying ``gen_ai.prompt`` / ``gen_ai.completion`` JSON, and the flattened
      ``gen_ai.prompt.{i}.role/content/...`` and ``gen_ai.completion.{i}...`` attributes.

    A tool span (``execute_tool``) gives ``gen_ai.tool.name``, ``gen_ai.tool.call.id``,
    ``gen_ai.tool.call.arguments`` and ``gen_ai.tool.call.result``. Spans of other operations
    (``invoke_agent``, ``invoke_workflow``: the official LangChain instrumentation's graph spans)
    are not model calls, whatever messages they carry.
    """
    attributes = span.attributes or {}
    operation = attributes.get("gen_ai.operation.name")
    if operation == "execute_tool":
        return _tool_call(span, attributes)
    if operation in CHAT_OPERATIONS or (operation is None and "gen_ai.input.messages" in attributes):
        return _model_call(span, attributes)
    return None  # invoke_agent / invoke_workflow carry messages too, but call no model themselves


def parse_mcp_span(span: Any) -> SpanToolCall | None:
    """Turn an MCP ``tools/call`` span into a tool call (``source="mcp"``); ``None`` otherwise.

    An MCP span (``mcp.method.name`` = ``tools/call``) gives what a GenAI tool span gives
    (``gen_ai.tool.name``, ``gen_ai.tool.call.id``, ``gen_ai.tool.call.arguments``,
    ``gen_ai.tool.call.result``) plus ``mcp.session.id``; an error result is marked by
    ``error.type`` or an error status.
    """
    attributes = span.attributes or {}
    if attributes.get("mcp.method.name") != "tools/call":
        return None
    record = mcp_tool_record(
        attributes,
        error=records.span_error(span) or _error_type(attributes),
        duration_s=records.span_duration(span),
        started_at=records.span_start(span),
        span_name=span.name,
    )
    return records.span_tool_call(span, record)


def mcp_tool_record(
    attributes: Mapping[str, Any],
    *,
    error: str | None = None,
    duration_s: float | None = None,
    started_at: datetime | None = None,
    span_name: str = "",
) -> ToolCallRecord:
    """The :class:`~art_adapters.ToolCallRecord` of an MCP ``tools/call`` span, from its attributes.

    The attributes are the MCP and GenAI ones (``gen_ai.tool.name``, ``gen_ai.tool.call.id``,
    ``gen_ai.tool.call.arguments``, ``gen_ai.tool.call.result``, ``mcp.server.name``,
    ``mcp.session.id``, ``error.type``); ``error`` is the failure's ``"Type: message"``, if the
    call raised. The record is an error with ``error`` or an ``error.type`` attribute (an MCP
    ``isError`` result). Both capture paths build an MCP call's record here: the span processor
    from a finished span, ``mcp_tools`` from the attributes it gives its span.
    """
    name = attributes.get("gen_ai.tool.name")
    if not isinstance(name, str) or not name:
        # "tools/call add" (FastMCP's, ours), "MCP send tools/call add" (the MCP SDK's)
        before, method, after = span_name.partition("tools/call")
        name = (after if method else before).strip() or "unknown"
    return records.tool_record(
        name,
        attributes.get("gen_ai.tool.call.arguments"),
        attributes.get("gen_ai.tool.call.result"),
        call_id=attributes.get("gen_ai.tool.call.id"),
        error=error,
        is_error=attributes.get("error.type") is not None,
        source="mcp",
        server=attributes.get("mcp.server.name", attributes.get("server.address")),
        session_id=attributes.get("mcp.session.id"),
        duration_s=duration_s,
        started_at=started_at,
    )


def _tool_call(span: Any, attributes: Mapping[str, Any]) -> SpanToolCall | None:
    name = attributes.get("gen_ai.tool.name")
    if not isinstance(name, str) or not name:
        name = span.name.removeprefix("execute_tool").strip()
    if not name:
        return None
    return records.tool_span_call(
        span,
        name,
        attributes.get("gen_ai.tool.call.arguments"),
        attributes.get("gen_ai.tool.call.result"),
        call_id=attributes.get("gen_ai.tool.call.id"),
    )


def _model_call(span: Any, attributes: Mapping[str, Any]) -> SpanModelCall | None:
    messages: list[Message] = []
    system = _parts_message("system", records.load_json(attributes.get("gen_ai.system_instructions")))
    if system is not None:
        messages.append(system)
    outputs: list[Message] = []
    if "gen_ai.input.messages" in attributes or "gen_ai.output.messages" in attributes:
        messages.extend(_parts_messages(records.load_json(attributes.get("gen_ai.input.messages"))))
        outputs = _parts_messages(records.load_json(attributes.get("gen_ai.output.messages")))
    else:
        legacy_in, legacy_out = _legacy_messages(span, attributes)
        messages.extend(legacy_in)
        outputs = legacy_out
    if system is not None and len(messages) > 1 and messages[1].role == "system":
        del messages[0]  # the instructions were also sent as a system message
    if not messages and not outputs:
        return None
    output = next((m for m in outputs if m.role == "assistant"), None)
    response_id = attributes.get("gen_ai.response.id")
    if output is not None and isinstance(response_id, str) and response_id:
        output.completion_id = response_id
    return SpanModelCall(
        span_id=span.context.span_id,
        start_ns=span.start_time or 0,
        messages=messages,
        tools=_tools(attributes.get("gen_ai.tool.definitions")),
        output=output,
        usage=_usage(attributes),
        error=records.span_error(span),
        model=model_name(
            attributes.get("gen_ai.response.model"),
            attributes.get("gen_ai.request.model"),
            attributes.get("traceloop.association.properties.ls_model_name"),
        ),
    )


def _parts_messages(value: Any) -> list[Message]:
    """Messages from a GenAI ``[{"role", "parts"}]`` array; tool responses become tool messages."""
    if not isinstance(value, list):
        return []
    messages: list[Message] = []
    for raw in value:
        if not isinstance(raw, Mapping):
            continue
        role = records.normalise_role(raw.get("role"))
        parts = raw.get("parts")
        if role is None or not isinstance(parts, list):
            if "parts" not in raw:  # an OpenAI-style message under the new attribute
                converted = records.message_from_openai(raw)
                if converted is not None:
                    messages.append(converted)
            continue
        responses = [p for p in parts if isinstance(p, Mapping) and p.get("type") == "tool_call_response"]
        for part in responses:
            call_id = part.get("id")
            messages.append(
                Message(
                    role="tool",
                    content=records.as_text(part.get("response")),
                    tool_call_id=str(call_id) if call_id else None,
                )
            )
        rest = [p for p in parts if not (isinstance(p, Mapping) and p.get("type") == "tool_call_response")]
        if responses and not rest:
            continue
        message = _parts_message(role, rest, name=raw.get("name"))
        if message is not None:
            messages.append(message)
    return messages


def _parts_message(role: str, parts: Any, *, name: Any = None) -> Message | None:
    """One message from a list of parts (text parts joined; tool calls collected)."""
    if isinstance(parts, str):
        return Message(role=role, content=parts)  # type: ignore[arg-type]
    if not isinstance(parts, list) or not parts:
        return None
    texts: list[str] = []
    others: list[dict[str, Any]] = []
    tool_calls: list[ToolCall] = []
    for part in parts:
        if not isinstance(part, Mapping):
            continue
        kind = part.get("type")
        if kind == "text":
            texts.append(records.as_text(part.get("content")) or "")
        elif kind == "tool_call":
            call = records.make_tool_call(part.get("id"), part.get("name"), part.get("arguments"))
            if call is not None:
                tool_calls.append(call)
        elif kind != "reasoning":
            others.append(dict(part))
    content: str | list[dict[str, Any]] | None
    if others:
        content = [{"type": "text", "text": text} for text in texts] + others
    else:
        content = "".join(texts) if texts else None
    if role == "assistant" and content is None and tool_calls:
        content = ""
    return Message(
        role=role,  # type: ignore[arg-type]
        content=content,
        name=name if isinstance(name, str) else None,
        tool_calls=tool_calls or None,
    )


def _legacy_messages(span: Any, attributes: Mapping[str, Any]) -> tuple[list[Message], list[Message]]:
    """Input and output messages from the pre-``gen_ai.input.messages`` forms."""
    prompt: Any = None
    completion: Any = None
    for event in getattr(span, "events", ()) or ():
        event_attributes = event.attributes or {}
        if event.name == "gen_ai.content.prompt":
            prompt = records.load_json(event_attributes.get("gen_ai.prompt"))
        elif event.name == "gen_ai.content.completion":
            completion = records.load_json(event_attributes.get("gen_ai.completion"))
    if prompt is None:
        prompt = records.indexed(records.unflatten(attributes, "gen_ai.prompt."))
    if completion is None:
        completion = records.indexed(records.unflatten(attributes, "gen_ai.completion."))
    inputs = [m for m in map(records.message_from_openai, _as_list(prompt)) if m is not None]
    outputs = [m for m in map(records.message_from_openai, _as_list(completion)) if m is not None]
    return inputs, outputs


def _as_list(value: Any) -> list[Any]:
    if isinstance(value, list):
        return value
    if isinstance(value, Mapping):
        choices = value.get("choices")
        if isinstance(choices, list):
            return [c.get("message") for c in choices if isinstance(c, Mapping)]
        return [value]
    return []


def _tools(value: Any) -> list[ToolSchema] | None:
    value = records.load_json(value)
    if not isinstance(value, list):
        return None
    tools = [t for t in map(records.tool_schema_from_definition, value) if t is not None]
    return tools or None


def _usage(attributes: Mapping[str, Any]) -> dict[str, int]:
    usage: dict[str, int] = {}
    prompt = records.as_int(
        attributes.get("gen_ai.usage.input_tokens", attributes.get("gen_ai.usage.prompt_tokens"))
    )
    completion = records.as_int(
        attributes.get("gen_ai.usage.output_tokens", attributes.get("gen_ai.usage.completion_tokens"))
    )
    if prompt is not None:
        usage["prompt_tokens"] = prompt
    if completion is not None:
        usage["completion_tokens"] = completion
    if prompt is not None and completion is not None:
        usage["total_tokens"] = prompt + completion
    return usage


def _error_type(attributes: Mapping[str, Any]) -> str | None:
    kind = attributes.get("error.type")
    return str(kind) if kind is not None else None
