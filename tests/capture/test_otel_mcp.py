"""Real MCP tools in a real LangGraph graph traced by OpenInference: one trajectory, one record per call.

OpenInference never makes its spans current, so the ``tools/call`` span that ``mcp_tools``
emits is not a child of OpenInference's tool span: without a parent span it is a trace of
its own, with one it is a sibling in the graph's trace. Either way the span processor must
merge it into the graph's tool record by the tool call id (``gen_ai.tool.call.id``) and
emit one trajectory whose tool record matches the callback handler's for the same run.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider

import mcp_tools
from art_adapters._capture.langchain import TrajectoryCallbackHandler
from art_adapters._capture.otel import TrajectorySpanProcessor
from art_adapters._trajectory import ToolCallRecord
from mcp_tools.servers import server_command
from tests.helpers.capture_fakes import PolicyChatModel, call_once, react_agent
from tests.helpers.langchain_instrumentations import instrumented_with

QUESTION = {"messages": [("user", "what is 2 + 3")]}


#: Call ``add(2, 3)`` once, then answer with its result.
add_once = call_once("add", {"a": 2, "b": 3}, "call_add_2_3", lambda result: f"2 + 3 = {result}")


@pytest.fixture(scope="module")
def traced() -> Iterator[tuple[TracerProvider, TrajectorySpanProcessor]]:
    """A provider that OpenInference's LangChain instrumentation traces into (instrumented once)."""
    provider = TracerProvider()
    processor = TrajectorySpanProcessor()
    provider.add_span_processor(processor)
    try:
        with instrumented_with("openinference", provider):
            yield provider, processor
    finally:
        provider.shutdown()


def comparable(record: ToolCallRecord) -> dict[str, Any]:
    """A record without its timings (the two capture paths time the call separately)."""
    return record.model_dump(exclude={"duration_s", "started_at"})


@pytest.mark.parametrize("parent_span", [False, True], ids=["no-parent-span", "parent-span"])
async def test_the_mcp_span_merges_into_the_graphs_tool_record(traced, parent_span: bool) -> None:
    provider, capture = traced
    capture.pop_trajectories()
    tools = await mcp_tools.load_tools(server_command("calculator"), tracer_provider=provider)
    agent = react_agent(PolicyChatModel(policy=add_once), [t for t in tools if t.name == "add"])
    handler = TrajectoryCallbackHandler()
    async with mcp_tools.rollout() as scope:
        if parent_span:
            with provider.get_tracer("test").start_as_current_span("rollout"):
                await agent.ainvoke(QUESTION, config={"callbacks": [handler]})
        else:
            await agent.ainvoke(QUESTION, config={"callbacks": [handler]})
        session_id = scope.sessions[0].session_ids["calculator"]

    (trajectory,) = capture.trajectories
    assert trajectory.messages[-1].content == "2 + 3 = 5"
    (record,) = trajectory.tool_records
    assert (record.name, record.call_id, record.result, record.source) == ("add", "call_add_2_3", "5", "mcp")
    assert (record.server, record.session_id) == ("calculator", session_id)
    assert [comparable(r) for r in trajectory.tool_records] == [
        comparable(r) for r in handler.trajectory.tool_records
    ]


# -- the same orderings on plain SDK spans (no LangChain), to pin the processor's rules down --


def mcp_span(tracer: Any, call_id: str, context: Any = None) -> None:
    """End one MCP ``tools/call add`` span (as ``mcp_tools`` writes it) in ``context`` or the current one."""
    with tracer.start_as_current_span("tools/call add", context=context) as span:
        span.set_attribute("mcp.method.name", "tools/call")
        span.set_attribute("gen_ai.tool.name", "add")
        span.set_attribute("gen_ai.tool.call.id", call_id)
        span.set_attribute("gen_ai.tool.call.arguments", '{"a": 1, "b": 2}')
        span.set_attribute("gen_ai.tool.call.result", "3")
        span.set_attribute("mcp.server.name", "calculator")
        span.set_attribute("mcp.session.id", "s1")


def tool_span(tracer: Any, call_id: str, parent: Any) -> Any:
    """Start (not as current) a GenAI ``execute_tool add`` span under ``parent``; the caller ends it."""
    from opentelemetry import trace

    span = tracer.start_span("execute_tool add", context=trace.set_span_in_context(parent))
    span.set_attribute("gen_ai.operation.name", "execute_tool")
    span.set_attribute("gen_ai.tool.name", "add")
    span.set_attribute("gen_ai.tool.call.id", call_id)
    span.set_attribute("gen_ai.tool.call.result", "3")
    return span


@pytest.fixture
def plain() -> Iterator[tuple[Any, TrajectorySpanProcessor]]:
    """A tracer on a fresh provider with the span processor."""
    provider = TracerProvider()
    processor = TrajectorySpanProcessor()
    provider.add_span_processor(processor)
    yield provider.get_tracer("test"), processor
    provider.shutdown()


def test_an_mcp_trace_of_its_own_joins_the_trace_of_its_tool_call(plain) -> None:
    from opentelemetry.context import Context

    tracer, processor = plain
    root = tracer.start_span("graph")  # never current, like OpenInference's spans
    tool = tool_span(tracer, "c1", root)
    mcp_span(tracer, "c1", context=Context())  # its own trace
    assert processor.trajectories == []  # held: the graph's trace may have its tool call
    tool.end()
    root.end()
    (trajectory,) = processor.trajectories
    (record,) = trajectory.tool_records
    assert (record.call_id, record.source, record.server, record.session_id) == (
        "c1",
        "mcp",
        "calculator",
        "s1",
    )
    assert trajectory.metadata["root_span"] == "graph"


def test_an_mcp_span_beside_its_tool_span_replaces_its_record(plain) -> None:
    tracer, processor = plain
    with tracer.start_as_current_span("rollout") as root:
        tool = tool_span(tracer, "c1", root)
        mcp_span(tracer, "c1")  # a sibling of the tool span, not its child
        tool.end()
    (trajectory,) = processor.trajectories
    assert [(r.call_id, r.source) for r in trajectory.tool_records] == [("c1", "mcp")]


def test_an_mcp_trace_that_no_open_trace_claims_is_emitted_on_its_own(plain) -> None:
    from opentelemetry.context import Context

    tracer, processor = plain
    other = tracer.start_span("unrelated")
    tool = tool_span(tracer, "other-call", other)
    mcp_span(tracer, "c1", context=Context())
    assert processor.trajectories == []
    tool.end()
    other.end()  # the trace it waited on ended without its call: emitted alone, after that trace
    unrelated, mcp_only = processor.trajectories
    assert [(r.call_id, r.source) for r in mcp_only.tool_records] == [("c1", "mcp")]
    assert [(r.call_id, r.source) for r in unrelated.tool_records] == [("other-call", "otel")]
    mcp_span(tracer, "c2", context=Context())  # nothing open: emitted at once
    assert [r.call_id for r in processor.trajectory.tool_records] == ["c2"]


# -- one mapping from an MCP span's attributes to a record, for both capture paths --


ATTRIBUTES = {
    "mcp.method.name": "tools/call",
    "gen_ai.tool.name": "divide",
    "gen_ai.tool.call.id": "d1",
    "gen_ai.tool.call.arguments": '{"a": 1, "b": 0}',
    "mcp.server.name": "calc",
    "mcp.session.id": "s1",
}


def test_mcp_tool_record_reads_an_mcp_spans_attributes() -> None:
    from art_adapters import mcp_tool_record

    ok = mcp_tool_record({**ATTRIBUTES, "gen_ai.tool.call.result": "0.5"}, duration_s=0.25)
    assert (ok.name, ok.call_id, ok.arguments, ok.result, ok.is_error, ok.error) == (
        "divide", "d1", {"a": 1, "b": 0}, "0.5", False, None
    )  # fmt: skip
    assert (ok.server, ok.session_id, ok.source, ok.duration_s) == ("calc", "s1", "mcp", 0.25)
    reported = mcp_tool_record({**ATTRIBUTES, "gen_ai.tool.call.result": "by zero", "error.type": "x"})
    assert (reported.is_error, reported.error, reported.result) == (True, None, "by zero")  # isError
    raised = mcp_tool_record(ATTRIBUTES, error="ToolServerError: gone")
    assert (raised.is_error, raised.error, raised.result) == (True, "ToolServerError: gone", None)
    unnamed = {k: v for k, v in ATTRIBUTES.items() if k != "gen_ai.tool.name"}
    assert mcp_tool_record(unnamed, span_name="tools/call divide").name == "divide"


def test_the_span_processor_reads_an_mcp_span_with_the_same_mapping(plain) -> None:
    from art_adapters import mcp_tool_record

    tracer, processor = plain
    with tracer.start_as_current_span("tools/call divide", attributes=ATTRIBUTES) as span:
        span.set_attribute("gen_ai.tool.call.result", "0.5")
    (record,) = processor.trajectory.tool_records
    expected = mcp_tool_record({**ATTRIBUTES, "gen_ai.tool.call.result": "0.5"})
    assert comparable(record) == comparable(expected)
