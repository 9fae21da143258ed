"""One trace's spans, collected and assembled into a :class:`~art_adapters._trajectory.Trajectory`.

The span processor keeps one :class:`TraceState` per open trace; it builds the trajectory with the same
:func:`.assembly.assemble` the LangChain callback handler uses.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from art_adapters._capture.assembly import assemble, message_key
from art_adapters._capture.otel_genai import parse_genai_span, parse_mcp_span
from art_adapters._capture.otel_langfuse import parse_langfuse_span
from art_adapters._capture.otel_openinference import parse_openinference_span
from art_adapters._capture.otel_records import SpanModelCall, SpanToolCall, span_error, span_start
from art_adapters._trajectory import ToolCallRecord, Trajectory

__all__ = ["TraceState", "parse_span"]

logger = logging.getLogger(__name__)


def parse_span(span: Any) -> SpanModelCall | SpanToolCall | None:
    """Parse a span with whichever convention it follows; ``None`` when it is neither a model nor a tool call.

    A span with both Langfuse's and GenAI attributes (ours, exported for Langfuse) is read as GenAI.
    """
    attributes = span.attributes or {}
    if "openinference.span.kind" in attributes:
        return parse_openinference_span(span)
    if "mcp.method.name" in attributes:
        return parse_mcp_span(span)
    if "langfuse.observation.type" in attributes and "gen_ai.operation.name" not in attributes:
        return parse_langfuse_span(span)
    return parse_genai_span(span)


@dataclass
class TraceState:
    """What has been seen of one trace so far.

    It is fed finished spans (in end order, from one thread) and parses each with the
    convention it follows; :meth:`build` assembles them.

    An instrumentation that never makes its tool span current (OpenInference) leaves the
    MCP span outside that tool span: a sibling in the same trace, or, with no enclosing
    span, a trace of its own. :attr:`mcp_only` and :meth:`adopt` let the span processor
    move such a trace into the trace that holds its tool call.

    Attributes:
        trace_id: the trace's id.
        parents: span id -> parent span id, for every span seen (relevant or not).
        model_calls: parsed model calls, in end order.
        tool_calls: parsed tool calls, in end order.
        skipped: how many spans failed to parse (logged, never raised).
        scopes: span id -> the instrumentation scope that wrote it, for each parsed call (two
            instrumentations of one run report each call twice, in parallel span trees).
    """

    trace_id: int
    parents: dict[int, int | None] = field(default_factory=dict)
    model_calls: list[SpanModelCall] = field(default_factory=list)
    tool_calls: list[SpanToolCall] = field(default_factory=list)
    skipped: int = 0
    scopes: dict[int, str] = field(default_factory=dict)

    def add_link(self, span_id: int, parent_id: int | None) -> None:
        """Remember a span's parent (used to merge nested spans that describe one call)."""
        self.parents[span_id] = parent_id

    def add_span(self, span: Any) -> None:
        """Parse a finished span and keep what it describes; a malformed span is counted and skipped."""
        parent = span.parent.span_id if span.parent is not None else None
        self.add_link(span.context.span_id, parent)
        try:
            parsed = parse_span(span)
        except Exception:  # third-party attributes: never let one span break the trace
            self.skipped += 1
            logger.debug("could not parse span %r; skipped", getattr(span, "name", "?"), exc_info=True)
            return
        if parsed is not None:
            scope = getattr(span, "instrumentation_scope", None)
            self.scopes[span.context.span_id] = getattr(scope, "name", "") or ""
        if isinstance(parsed, SpanModelCall):
            self.model_calls.append(parsed)
        elif isinstance(parsed, SpanToolCall):
            self.tool_calls.append(parsed)

    @property
    def empty(self) -> bool:
        """Whether no model or tool call has been seen."""
        return not self.model_calls and not self.tool_calls

    @property
    def mcp_only(self) -> bool:
        """Whether the trace holds MCP ``tools/call`` spans and nothing else of interest.

        Such a trace is an MCP call made under a tool span that was not current (so the
        MCP span started a trace of its own); it belongs with the trace of that tool span.
        """
        return not self.model_calls and bool(self.tool_calls) and all(
            t.record.source == "mcp" for t in self.tool_calls
        )

    def claims(self, other: TraceState) -> bool:
        """Whether an MCP call of ``other`` belongs to a (non-MCP) tool call of this trace: one with
        its call id or, when the MCP span has none (FastMCP's, the MCP SDK's), with its tool's name
        whose span was running when the MCP call started."""
        tools = [t for t in self.tool_calls if t.record.source != "mcp"]
        mcp_calls = [t for t in other.tool_calls if t.record.source == "mcp"]
        return any(_made_by(mcp, tool) for mcp in mcp_calls for tool in tools)

    def adopt(self, other: TraceState) -> None:
        """Take over another trace's calls (an MCP-only trace whose tool call is in this one)."""
        self.parents.update(other.parents)
        self.scopes.update(other.scopes)
        self.model_calls.extend(other.model_calls)
        self.tool_calls.extend(other.tool_calls)
        self.skipped += other.skipped

    def split_off(self, root_span_id: int) -> TraceState | None:
        """Keep the calls made under the local root ``root_span_id``; return the others (or ``None``).

        Several local roots can share a trace (concurrent runs under one remote or foreign
        parent span). When one of them ends, the calls of the others, still running, must not
        go into its trajectory: a call is its own when the root is among its ancestors (every
        span under it has ended, so the chain is complete). An MCP call outside the root (a
        tool span that was never made current) goes with the root unless a tool call of the
        other runs has its call id.
        """

        def under(span_id: int) -> bool:
            return span_id == root_span_id or root_span_id in self._ancestors(span_id)

        mine_models = [c for c in self.model_calls if under(c.span_id)]
        other_models = [c for c in self.model_calls if not under(c.span_id)]
        other_tools = [t for t in self.tool_calls if t.record.source != "mcp" and not under(t.span_id)]
        other_ids = {t.record.call_id for t in other_tools if t.record.call_id is not None}
        for mcp in (t for t in self.tool_calls if t.record.source == "mcp" and not under(t.span_id)):
            if mcp.record.call_id is not None and mcp.record.call_id in other_ids:
                other_tools.append(mcp)
        if not other_models and not other_tools:
            return None
        moved = {t.span_id for t in other_tools}
        rest = TraceState(
            self.trace_id, parents=dict(self.parents), model_calls=other_models, scopes=dict(self.scopes)
        )
        rest.tool_calls = [t for t in self.tool_calls if t.span_id in moved]
        self.model_calls = mine_models
        self.tool_calls = [t for t in self.tool_calls if t.span_id not in moved]
        return rest

    def build(self, root: Any | None = None) -> Trajectory:
        """Assemble the trajectory; ``root`` (the trace's root span) supplies times and the error.

        The model calls are ordered by start time; calls that two instrumentations reported for
        the same request (nested model-call spans) are merged, and MCP ``tools/call`` spans with
        the tool span of the same call (the span that wraps them, or else the one with the same
        tool call id). The calls then go to :func:`.assembly.assemble`: a conversation that
        extends an earlier one replaces it, one that diverges is kept as an additional history,
        the longest is ``messages``.
        """
        trajectory = assemble(
            self._merged_model_calls(),
            [t.record for t in self._merged_tool_calls()],
            metadata={"trace_id": f"{self.trace_id:032x}", "capture": "otel"},
        )
        if self.skipped:
            trajectory.logs.append(f"{self.skipped} span(s) could not be parsed and were skipped")
        if root is not None:
            trajectory.metadata["root_span"] = root.name
            started = span_start(root)
            if started is not None:
                trajectory.started_at = started
            if root.end_time is not None:
                trajectory.finished_at = datetime.fromtimestamp(root.end_time / 1e9, tz=UTC)
            trajectory.error = span_error(root)
        return trajectory

    def _ancestors(self, span_id: int) -> Iterator[int]:
        """The span's ancestors, nearest first, lazily (a cycle ends the walk).

        Lazy, with a set of the seen ids: callers stop at the first ancestor they look for, and
        a list membership test per step made deep span trees cost O(N^3) to import.
        """
        seen: set[int] = set()
        parent = self.parents.get(span_id)
        while parent is not None and parent not in seen:
            seen.add(parent)
            yield parent
            parent = self.parents.get(parent)

    def _merged_model_calls(self) -> list[SpanModelCall]:
        """Model calls in start order; a call nested in another model call is folded into the outer one."""
        by_span = {c.span_id: c for c in self.model_calls}
        kept: list[SpanModelCall] = []
        keys: dict[int, tuple[Any, ...]] = {}  # span id -> _call_key, of the calls looked at
        for call in sorted(self.model_calls, key=lambda c: c.start_ns):
            outer = next((by_span[a] for a in self._ancestors(call.span_id) if a in by_span), None)
            if outer is None:
                outer = self._twin(call, kept, keys)
            if outer is None:
                kept.append(call)
                continue
            if outer.output is None:
                outer.output = call.output
            elif call.output is not None and outer.output.completion_id is None:
                outer.output.completion_id = call.output.completion_id
            for key, value in call.usage.items():
                outer.usage.setdefault(key, value)
            if outer.model is None:
                outer.model = call.model
            if outer.tools is None:
                outer.tools = call.tools
        return kept

    def _twin(
        self, call: SpanModelCall, kept: list[SpanModelCall], keys: dict[int, tuple[Any, ...]]
    ) -> SpanModelCall | None:
        """The kept call that another instrumentation reported for the same request as ``call``.

        Two instrumentations of one run (Langfuse's CallbackHandler beside OpenLLMetry, say) write
        each call twice, in parallel span trees: same input, same output, another scope.
        """
        scope = self.scopes.get(call.span_id)
        key = keys[call.span_id] = _call_key(call)
        for other in kept:
            if self.scopes.get(other.span_id) != scope and keys.get(other.span_id) == key:
                return other
        return None

    def _merged_tool_calls(self) -> list[SpanToolCall]:
        """Tool calls in start order; an MCP call replaces the record of the tool span of the same call.

        That tool span is the one around the MCP span or, when the instrumentation never made it
        current (OpenInference), the one with the same tool call id, or (an MCP span without one)
        the one of the same tool running when the MCP call started. An MCP span nested in another
        (the MCP SDK's request span under FastMCP's or ``mcp_tools``' call span) is the same call.
        """
        by_call_id: dict[str, SpanToolCall] = {}
        replaced: set[int] = set()
        for tool in sorted(self.tool_calls, key=lambda t: t.start_ns):
            if tool.record.source == "mcp" or tool.record.call_id is None:
                continue
            first = by_call_id.setdefault(tool.record.call_id, tool)
            if first is not tool and self.scopes.get(first.span_id) != self.scopes.get(tool.span_id):
                replaced.add(tool.span_id)  # the same call, from another instrumentation
        by_span = {t.span_id: t for t in self.tool_calls if t.span_id not in replaced}
        innermost_first = sorted(
            (t for t in by_span.values() if t.record.source != "mcp"), key=lambda t: t.start_ns, reverse=True
        )
        mcp_calls = sorted((t for t in self.tool_calls if t.record.source == "mcp"), key=lambda t: t.start_ns)
        for tool in mcp_calls:
            outer = next((by_span[a] for a in self._ancestors(tool.span_id) if a in by_span), None)
            if outer is not None and outer.record.source == "mcp":
                _fill(outer.record, tool.record)  # the same call, one layer down
                replaced.add(tool.span_id)
                continue
            if outer is None and tool.record.call_id is not None:
                outer = by_call_id.get(tool.record.call_id)
            if outer is None and tool.record.call_id is None:
                free = (t for t in innermost_first if t.span_id not in replaced)
                outer = next((t for t in free if _made_by(tool, t)), None)
            if outer is None:
                continue
            _fill(tool.record, outer.record)
            replaced.add(outer.span_id)
        kept = [t for t in self.tool_calls if t.span_id not in replaced]
        return sorted(kept, key=lambda t: t.start_ns)


def _made_by(mcp: SpanToolCall, tool: SpanToolCall) -> bool:
    """Whether the MCP call ``mcp`` is the one ``tool`` made: the same call id or, when the MCP span
    has none (FastMCP's, the MCP SDK's), the same tool's name and ``tool`` running when it started."""
    if mcp.record.call_id is not None:
        return mcp.record.call_id == tool.record.call_id
    return mcp.record.name == tool.record.name and tool.encloses(mcp)


def _fill(record: ToolCallRecord, other: ToolCallRecord) -> None:
    """Give ``record`` the call id, arguments, result, server and session ``other`` has and it lacks
    (FastMCP's span carries no arguments or result; the tool span around it does)."""
    for name in ("call_id", "arguments", "result", "server", "session_id"):
        if getattr(record, name) is None and getattr(other, name) is not None:
            setattr(record, name, getattr(other, name))


def _call_key(call: SpanModelCall) -> tuple[Any, ...]:
    """What makes two model calls the same request: its messages and its output."""
    output = message_key(call.output) if call.output is not None else None
    return tuple(message_key(m) for m in call.messages), output
