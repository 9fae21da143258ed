"""OpenTelemetry spans for MCP ``tools/call``, following the MCP and GenAI semantic conventions.

The caller keeps the span's attributes too and turns them into the call's record with
:func:`art_adapters.mcp_tool_record`, the function the span processor reads the span with, so a live
record and an exported span say the same.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

if TYPE_CHECKING:
    from opentelemetry.trace import Span, TracerProvider

__all__ = ["record_outcome", "tool_call_attributes", "tool_call_span"]

_TRACER_NAME = "mcp_tools"


def tool_call_attributes(
    tool: str, *, server: str, session_id: str | None, call_id: str | None, arguments: dict[str, Any]
) -> dict[str, Any]:
    """The attributes a ``tools/call <tool>`` span starts with (:func:`record_outcome` adds the rest)."""
    attributes: dict[str, Any] = {
        "mcp.method.name": "tools/call",
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": tool,
        "gen_ai.tool.type": "extension",
        "gen_ai.tool.call.arguments": json.dumps(arguments, ensure_ascii=False, default=str),
        "mcp.server.name": server,
    }
    if session_id:
        attributes["mcp.session.id"] = session_id
    if call_id:
        attributes["gen_ai.tool.call.id"] = call_id
    return attributes


@contextmanager
def tool_call_span(
    tool: str, attributes: dict[str, Any], *, tracer_provider: TracerProvider | None = None
) -> Iterator[Span]:
    """Open the ``tools/call <tool>`` span with ``attributes`` around one call (current while it runs).

    One CLIENT span per call, following the MCP and GenAI semantic conventions:
    ``mcp.method.name``, ``mcp.session.id``, ``gen_ai.operation.name = execute_tool``,
    ``gen_ai.tool.name``, ``gen_ai.tool.call.id``, ``gen_ai.tool.call.arguments`` and (from
    :func:`record_outcome`) ``gen_ai.tool.call.result`` (JSON / text). An MCP ``isError``
    result or a failed call sets the span's status to ERROR with ``error.type``. Uses the
    global tracer provider unless one is passed.
    """
    tracer = trace.get_tracer(_TRACER_NAME, tracer_provider=tracer_provider)
    with tracer.start_as_current_span(
        f"tools/call {tool}",
        kind=SpanKind.CLIENT,
        attributes=attributes,
        record_exception=True,
        set_status_on_exception=True,
    ) as span:
        yield span


def record_outcome(
    span: Span, *, result: str | None, is_error: bool, error_type: str | None = None
) -> dict[str, Any]:
    """Put the result on the span; mark it ERROR for an MCP ``isError`` result or a failure.

    Returns the attributes set, so the caller's copy of the span's attributes stays whole.
    """
    attributes: dict[str, Any] = {}
    if result is not None:
        attributes["gen_ai.tool.call.result"] = result
    if is_error:
        attributes["error.type"] = error_type or "tool_error"
    span.set_attributes(attributes)
    if is_error:
        span.set_status(Status(StatusCode.ERROR, (result or error_type or "tool error")[:200]))
    return attributes
