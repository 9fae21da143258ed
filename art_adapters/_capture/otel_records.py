"""The neutral form that span parsers produce, and the helpers they share.

Each span convention (:mod:`.otel_genai`, :mod:`.otel_openinference`) turns a finished span into at most
one :class:`SpanModelCall` or :class:`SpanToolCall`, which the span processor assembles per trace.
Attribute values come from other people's instrumentation, so every helper here is total: malformed
input gives ``None`` or an empty result, never an exception.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from art_adapters._capture.assembly import ModelCall
from art_adapters._trajectory import FunctionCall, Message, ToolCall, ToolCallRecord, ToolSchema

__all__ = [
    "SpanModelCall",
    "SpanToolCall",
    "as_int",
    "as_text",
    "dump_arguments",
    "indexed",
    "load_json",
    "make_tool_call",
    "message_from_openai",
    "normalise_role",
    "span_duration",
    "span_error",
    "span_start",
    "span_tool_call",
    "tool_record",
    "tool_schema_from_definition",
    "unflatten",
    "unwrap_langchain_message",
    "unwrap_tool_input",
    "unwrap_tool_output",
]

_VALID_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
_ROLE_ALIASES = {"human": "user", "ai": "assistant", "model": "assistant", "function": "tool"}


@dataclass(kw_only=True)
class SpanModelCall(ModelCall):
    """One chat-model call seen in a span: a :class:`~art_adapters._capture.assembly.ModelCall` (input
    messages, tools, output, usage, error, model name as the span reports it: response model first,
    else the requested one) and where the span is.

    Attributes:
        span_id: the span's id, to merge nested spans that describe the same call.
        start_ns: the span's start time (ns since the epoch), for ordering.
    """

    span_id: int
    start_ns: int


@dataclass
class SpanToolCall:
    """One tool execution seen in a span (a LangChain tool, a GenAI ``execute_tool``, an MCP call)."""

    span_id: int
    start_ns: int
    record: ToolCallRecord
    end_ns: int = 0  # 0: unknown

    def encloses(self, other: SpanToolCall) -> bool:
        """Whether ``other`` started while this call ran (an MCP call made by this tool)."""
        return self.start_ns <= other.start_ns and (not self.end_ns or other.start_ns <= self.end_ns)


# shape: one keyword per ToolCallRecord field: the one place a tool span becomes a record
def tool_record(
    name: str,
    arguments: Any,
    result: Any,
    *,
    call_id: Any = None,
    error: str | None = None,
    is_error: bool = False,
    source: Literal["mcp", "otel"] = "otel",
    server: Any = None,
    session_id: Any = None,
    duration_s: float | None = None,
    started_at: datetime | None = None,
) -> ToolCallRecord:
    """A tool span's values as a :class:`ToolCallRecord`: the one place a tool span becomes a record.

    ``arguments`` and ``result`` are the span's attribute values (JSON strings, plain text or an
    instrumentation's LangChain envelope, see :func:`unwrap_tool_input` and :func:`unwrap_tool_output`);
    a call id missing from ``call_id`` is taken from those envelopes. ``error`` is the failure's
    ``"Type: message"``; the record is an error with one, with ``is_error``, or when the result says so.
    """
    parsed_arguments, wrapped_id = unwrap_tool_input(arguments)
    text, result_id, result_error = unwrap_tool_output(result)
    call_id = call_id or wrapped_id or result_id
    return ToolCallRecord(
        name=name,
        call_id=str(call_id) if call_id else None,
        arguments=parsed_arguments,
        result=text,
        is_error=is_error or error is not None or result_error,
        error=error,
        server=str(server) if server is not None else None,
        session_id=str(session_id) if session_id is not None else None,
        duration_s=duration_s,
        source=source,
        started_at=started_at,
    )


def span_tool_call(span: Any, record: ToolCallRecord) -> SpanToolCall:
    """``record`` as the tool call of the finished ``span`` (its id and start time)."""
    return SpanToolCall(
        span_id=span.context.span_id, start_ns=span.start_time or 0, record=record, end_ns=span.end_time or 0
    )


def tool_span_call(span: Any, name: str, arguments: Any, result: Any, *, call_id: Any = None) -> SpanToolCall:
    """The tool call of a finished tool ``span`` whose convention gives these values: its record
    (:func:`tool_record`, with the span's error, duration and start) and its place in the trace."""
    record = tool_record(
        name,
        arguments,
        result,
        call_id=call_id,
        error=span_error(span),
        duration_s=span_duration(span),
        started_at=span_start(span),
    )
    return span_tool_call(span, record)


def load_json(value: Any) -> Any:
    """Parse ``value`` when it is a JSON string; return it unchanged otherwise (never raises)."""
    if isinstance(value, str | bytes):
        try:
            return json.loads(value)
        except (ValueError, RecursionError):
            return value
    return value


def as_text(value: Any) -> str | None:
    """Render a tool result or message content as text: strings as-is, other values as JSON."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError):
        return str(value)


def as_int(value: Any) -> int | None:
    """An attribute value as an int, or ``None`` when it is not a number (bools excluded)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def dump_arguments(arguments: Any) -> str:
    """Tool-call arguments as the JSON string OpenAI's format carries."""
    if arguments is None:
        return "{}"
    if isinstance(arguments, str):
        return arguments
    try:
        return json.dumps(arguments, ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError):
        return str(arguments)


def normalise_role(role: Any) -> str | None:
    """Map a role name from any convention onto the OpenAI roles; ``None`` when unknown."""
    if not isinstance(role, str):
        return None
    role = role.strip().lower()
    role = _ROLE_ALIASES.get(role, role)
    return role if role in _VALID_ROLES else None


def make_tool_call(call_id: Any, name: Any, arguments: Any) -> ToolCall | None:
    """An OpenAI tool call from loose parts; ``None`` when the name is missing."""
    if not isinstance(name, str) or not name:
        return None
    return ToolCall(
        id=str(call_id) if call_id not in (None, "") else "",
        function=FunctionCall(name=name, arguments=dump_arguments(arguments)),
    )


def tool_schema_from_definition(definition: Any) -> ToolSchema | None:
    """A :class:`ToolSchema` from an OpenAI tool (``{"type", "function"}``) or a flat GenAI definition."""
    definition = load_json(definition)
    if not isinstance(definition, Mapping):
        return None
    function = definition.get("function")
    if isinstance(function, Mapping) and isinstance(function.get("name"), str):
        return ToolSchema(function=dict(function))
    name = definition.get("name")
    if not isinstance(name, str) or not name:
        return None
    flat: dict[str, Any] = {"name": name}
    if definition.get("description") is not None:
        flat["description"] = definition["description"]
    parameters = definition.get("parameters", definition.get("input_schema"))
    if parameters is not None:
        flat["parameters"] = load_json(parameters)
    return ToolSchema(function=flat)


def unwrap_langchain_message(value: Any) -> dict[str, Any] | None:
    """The fields of a serialised LangChain message, or ``None`` when ``value`` is not one.

    Instrumentations serialise LangChain messages two ways: ``dumpd`` form
    (``{"lc": 1, "type": "constructor", "id": [..., "ToolMessage"], "kwargs": {...}}``)
    and ``message_to_dict`` form (``{"type": "tool", "data": {...}}``).
    """
    if not isinstance(value, Mapping):
        return None
    if value.get("lc") == 1 and isinstance(value.get("kwargs"), Mapping):
        return dict(value["kwargs"])
    data = value.get("data")
    if isinstance(value.get("type"), str) and isinstance(data, Mapping) and "content" in data:
        return dict(data)
    return None


def unwrap_tool_output(value: Any) -> tuple[str | None, str | None, bool]:
    """A tool span's output as ``(text, tool_call_id, is_error)``.

    Understands plain strings, JSON values, serialised LangChain ``ToolMessage``\\ s
    (their ``status == "error"`` marks an error) and OpenLLMetry's ``{"output": ...}``
    envelope around them.
    """
    parsed = load_json(value)
    if isinstance(parsed, Mapping) and "output" in parsed and set(parsed) <= {"output", "kwargs"}:
        parsed = load_json(parsed["output"])
    message = unwrap_langchain_message(parsed)
    if message is not None:
        call_id = message.get("tool_call_id")
        return (
            as_text(message.get("content")),
            str(call_id) if call_id else None,
            message.get("status") == "error",
        )
    if isinstance(value, str):
        return value, None, False
    return as_text(parsed), None, False


def unwrap_tool_input(value: Any) -> tuple[dict[str, Any] | str | None, str | None]:
    """A tool span's input as ``(arguments, tool_call_id)``.

    Understands JSON objects, plain strings and OpenLLMetry's LangChain envelope
    ``{"input_str": ..., "inputs": {...}, "kwargs": {"tool_call_id": ...}}``.
    """
    parsed = load_json(value)
    if isinstance(parsed, Mapping) and ("input_str" in parsed or "inputs" in parsed):
        kwargs = parsed.get("kwargs")
        call_id = kwargs.get("tool_call_id") if isinstance(kwargs, Mapping) else None
        inputs = parsed.get("inputs")
        arguments: dict[str, Any] | str | None
        if isinstance(inputs, Mapping):
            arguments = dict(inputs)
        else:
            arguments = as_text(parsed.get("input_str"))
        return arguments, str(call_id) if call_id else None
    if isinstance(parsed, Mapping):
        return dict(parsed), None
    if parsed is None:
        return None, None
    return as_text(parsed), None


def unflatten(attributes: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    """Nest the flattened attributes under ``prefix`` (``a.0.b.c = v`` -> ``{"0": {"b": {"c": v}}}``).

    Keys stay strings; :func:`indexed` turns a node's numeric keys into an ordered list.
    """
    root: dict[str, Any] = {}
    for key, value in attributes.items():
        if not key.startswith(prefix):
            continue
        parts = key[len(prefix) :].split(".")
        node = root
        for part in parts[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = {}
                node[part] = child
            node = child
        if not isinstance(node.get(parts[-1]), dict):
            node[parts[-1]] = value
    return root


def indexed(node: Any) -> list[Any]:
    """The values of ``node``'s numeric keys, in index order (empty when ``node`` is not a dict)."""
    if not isinstance(node, dict):
        return []
    keyed = [(int(key), value) for key, value in node.items() if key.isdigit()]
    return [value for _, value in sorted(keyed, key=lambda item: item[0])]


def message_from_openai(data: Any) -> Message | None:
    """A :class:`Message` from an OpenAI-style message dict (as in legacy ``gen_ai.prompt`` JSON)."""
    if not isinstance(data, Mapping):
        return None
    role = normalise_role(data.get("role"))
    if role is None:
        return None
    tool_calls: list[ToolCall] = []
    raw_calls = data.get("tool_calls")
    raw_calls = indexed(raw_calls) if isinstance(raw_calls, dict) else raw_calls
    for raw in raw_calls if isinstance(raw_calls, list | tuple) else []:
        if not isinstance(raw, Mapping):
            continue
        function = raw.get("function") if isinstance(raw.get("function"), Mapping) else raw
        call = make_tool_call(raw.get("id"), function.get("name"), function.get("arguments"))
        if call is not None:
            tool_calls.append(call)
    content = data.get("content")
    if content is not None and not isinstance(content, str | list):
        content = as_text(content)
    tool_call_id = data.get("tool_call_id")
    return Message(
        role=role,  # type: ignore[arg-type]
        content=content,
        name=data["name"] if isinstance(data.get("name"), str) else None,
        tool_calls=tool_calls or None,
        tool_call_id=str(tool_call_id) if tool_call_id else None,
    )


def span_error(span: Any) -> str | None:
    """``"Type: message"`` (``"Type"`` when the message is empty) of a failed span, else ``None``: from
    its ``exception`` event, else its ``error.type`` attribute and status description."""
    status = getattr(span, "status", None)
    failed = status is not None and getattr(status.status_code, "name", "") == "ERROR"
    for event in getattr(span, "events", ()) or ():
        if event.name == "exception":
            attributes = event.attributes or {}
            kind = attributes.get("exception.type", "Exception")
            message = attributes.get("exception.message", "")
            return f"{kind}: {message}" if message else str(kind)
    if failed:
        # no exception event (the official OTel GenAI instrumentations): the semantic conventions'
        # ``error.type`` is the exception's class name, the status description its message
        kind = (getattr(span, "attributes", None) or {}).get("error.type")
        message = status.description or ""
        if kind and str(kind) != "_OTHER" and not message.startswith(f"{kind}:"):
            return f"{kind}: {message}" if message else str(kind)
        return message or "error"
    return None


def span_duration(span: Any) -> float | None:
    """The span's wall-clock duration in seconds, ``None`` when a timestamp is missing."""
    if span.start_time is None or span.end_time is None:
        return None
    return max(0.0, (span.end_time - span.start_time) / 1e9)


def span_start(span: Any) -> datetime | None:
    """The span's start time as an aware UTC datetime."""
    if span.start_time is None:
        return None
    return datetime.fromtimestamp(span.start_time / 1e9, tz=UTC)
