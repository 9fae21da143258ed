"""MCP tools in real LangGraph agents: every tools/call captured by the handler and as OTel spans,
one session per rollout, and a server that crashes or hangs mid-call ends the rollout clearly."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Iterator

import pytest
from langchain_core.messages import AIMessage
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import mcp_tools
from art_adapters._capture.langchain import TrajectoryCallbackHandler
from art_adapters._capture.otel import TrajectorySpanProcessor
from art_adapters._errors import ConfigError, ToolServerError
from mcp_tools.servers import server_command
from tests.helpers.capture_fakes import PolicyChatModel, calculator_policy, react_agent

QUESTION = {"messages": [("user", "what is 2 + 3 times 4")]}


def call(name: str, args: dict, call_id: str) -> dict:
    return {"name": name, "args": args, "id": call_id, "type": "tool_call"}


def scripted(*turns: AIMessage):
    """A policy that plays ``turns`` in order, one per model call (by the number of AI messages so far)."""

    def policy(messages):
        done = sum(1 for m in messages if m.type == "ai")
        return turns[min(done, len(turns) - 1)]

    return policy


@pytest.fixture
def otel() -> Iterator[tuple[TracerProvider, InMemorySpanExporter, TrajectorySpanProcessor]]:
    """A real SDK provider with an in-memory exporter and our span processor."""
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    processor = TrajectorySpanProcessor()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    provider.add_span_processor(processor)
    yield provider, exporter, processor
    provider.shutdown()


async def test_react_agent_over_stdio_records_every_mcp_call_in_the_trajectory_and_as_spans(otel) -> None:
    provider, exporter, processor = otel
    tools = await mcp_tools.load_tools(server_command("calculator"), tracer_provider=provider)
    agent = react_agent(PolicyChatModel(policy=calculator_policy), tools)
    handler = TrajectoryCallbackHandler()
    async with mcp_tools.rollout() as scope:
        await agent.ainvoke(QUESTION, config={"callbacks": [handler]})
        session_id = scope.sessions[0].session_ids["calculator"]
    trajectory = handler.trajectory
    assert [m.content for m in trajectory.messages if m.role == "tool"] == ["5", "12"]
    assert trajectory.messages[-1].content == "The results are 5 and 12."
    records = sorted(trajectory.tool_records, key=lambda r: r.name)
    assert [(r.name, r.call_id, r.arguments, r.result, r.is_error, r.source, r.server) for r in records] == [
        ("add", "call_add_2_3_4", {"a": 2, "b": 3}, "5", False, "mcp", "calculator"),
        ("multiply", "call_mul_2_3_4", {"a": 3, "b": 4}, "12", False, "mcp", "calculator"),
    ]
    assert {r.session_id for r in records} == {session_id}  # parallel calls of one rollout share its session
    assert all(r.duration_s and r.duration_s > 0 for r in records)
    assert [t.name for t in trajectory.tools] == ["add", "subtract", "multiply", "divide", "power", "sqrt"]

    spans = sorted(
        (s for s in exporter.get_finished_spans() if s.name.startswith("tools/call")), key=lambda s: s.name
    )
    assert [s.name for s in spans] == ["tools/call add", "tools/call multiply"]
    attributes = dict(spans[0].attributes)
    assert attributes["mcp.method.name"] == "tools/call" and attributes["mcp.session.id"] == session_id
    assert attributes["gen_ai.tool.name"] == "add" and attributes["gen_ai.tool.call.id"] == "call_add_2_3_4"
    assert json.loads(attributes["gen_ai.tool.call.arguments"]) == {"a": 2, "b": 3}
    assert attributes["gen_ai.tool.call.result"] == "5"
    # The span processor sees the same calls (each span is its own trace here: nothing else is instrumented).
    from_spans = sorted((r for t in processor.trajectories for r in t.tool_records), key=lambda r: r.name)
    assert [(r.name, r.call_id, r.arguments, r.result, r.session_id) for r in from_spans] == [
        (r.name, r.call_id, r.arguments, r.result, r.session_id) for r in records
    ]


async def test_mcp_tool_errors_reach_the_model_and_the_record(calc_url: str) -> None:
    tools = await mcp_tools.load_tools(calc_url, name="calc")
    policy = scripted(
        AIMessage(content="", tool_calls=[call("divide", {"a": 1, "b": 0}, "d1")]),
        AIMessage(content="cannot divide by zero"),
    )
    handler = TrajectoryCallbackHandler()
    async with mcp_tools.rollout():
        await react_agent(PolicyChatModel(policy=policy), tools).ainvoke(
            QUESTION, config={"callbacks": [handler]}
        )
    trajectory = handler.trajectory
    (record,) = trajectory.tool_records
    assert record.is_error and record.source == "mcp" and record.server == "calc" and record.call_id == "d1"
    assert "by zero" in record.result and trajectory.error is None
    tool_message = next(m for m in trajectory.messages if m.role == "tool")
    assert "by zero" in tool_message.content  # the model read the error and could recover


def notes_policy(title: str):
    return scripted(
        AIMessage(
            content="", tool_calls=[call("create_note", {"title": title, "body": "private"}, f"c-{title}")]
        ),
        AIMessage(content="", tool_calls=[call("search_notes", {"query": "private"}, f"s-{title}")]),
        AIMessage(content="done"),
    )


async def test_one_session_per_rollout_keeps_stateful_servers_apart(notes_url: str, calc_url: str) -> None:
    tools = await mcp_tools.load_tools({"notes": {"url": notes_url}, "calc": {"url": calc_url}})
    assert {t.name for t in tools} >= {"create_note", "search_notes", "add"}
    handler = TrajectoryCallbackHandler()

    async def one(title: str) -> None:
        async with mcp_tools.rollout():
            agent = react_agent(PolicyChatModel(policy=notes_policy(title)), tools)
            await agent.ainvoke({"messages": [("user", f"note {title}")]}, config={"callbacks": [handler]})

    await asyncio.gather(one("alpha"), one("beta"), one("gamma"))
    assert len(handler.trajectories) == 3
    sessions = set()
    for trajectory in handler.trajectories:
        title = trajectory.messages[1].content.split()[-1]
        create, search = trajectory.tool_records
        assert create.result == "created note #13"  # every rollout starts from the same seed
        assert create.session_id == search.session_id  # one session for the whole rollout
        assert f"#13 {title}" in search.result
        assert not any(other in search.result for other in {"alpha", "beta", "gamma"} - {title})
        sessions.add(create.session_id)
    assert len(sessions) == 3


async def test_a_server_that_crashes_mid_call_ends_the_rollout_with_the_trajectory_kept() -> None:
    tools = await mcp_tools.load_tools(server_command("calculator", "--debug-tools"), name="calc")
    policy = scripted(
        AIMessage(content="", tool_calls=[call("add", {"a": 1, "b": 2}, "a1")]),
        AIMessage(content="", tool_calls=[call("crash", {}, "x1")]),
        AIMessage(content="unreachable"),
    )
    handler = TrajectoryCallbackHandler()
    started = time.monotonic()
    with pytest.raises(ToolServerError, match=r"crash.*(crashed|exited|ended)") as info:
        async with mcp_tools.rollout():
            await react_agent(PolicyChatModel(policy=policy), tools).ainvoke(
                QUESTION, config={"callbacks": [handler]}
            )
    assert time.monotonic() - started < 20
    assert "crash tool called" in str(info.value)  # the server's stderr tail is in the message
    trajectory = handler.trajectory
    assert trajectory.error is not None and trajectory.error.startswith("ToolServerError")
    assert [m.role for m in trajectory.messages] == ["system", "user", "assistant", "tool", "assistant"]
    first, crashed = trajectory.tool_records
    assert (first.name, first.result, first.is_error) == ("add", "3", False)
    assert (crashed.name, crashed.call_id, crashed.is_error, crashed.source) == ("crash", "x1", True, "mcp")
    assert crashed.error.startswith("ToolServerError")


async def test_a_server_that_hangs_fails_within_the_call_timeout() -> None:
    tools = await mcp_tools.load_tools(
        server_command("calculator", "--debug-tools"), name="calc", call_timeout_s=1
    )
    policy = scripted(
        AIMessage(content="", tool_calls=[call("sleep", {"seconds": 60}, "s1")]), AIMessage(content="x")
    )
    handler = TrajectoryCallbackHandler()
    started = time.monotonic()
    with pytest.raises(ToolServerError, match="no answer within 1s"):
        async with mcp_tools.rollout():
            await react_agent(PolicyChatModel(policy=policy), tools).ainvoke(
                QUESTION, config={"callbacks": [handler]}
            )
    assert time.monotonic() - started < 15
    (record,) = handler.trajectory.tool_records
    assert record.is_error and "no answer within 1s" in record.error
    assert handler.trajectory.error.startswith("ToolServerError")


async def test_mcp_tools_are_async_only(calc_url: str) -> None:
    tools = await mcp_tools.load_tools(calc_url)
    add = next(t for t in tools if t.name == "add")
    with pytest.raises(ConfigError, match="async only"):
        await asyncio.to_thread(add.invoke, {"a": 1, "b": 2})


async def test_outside_a_rollout_one_shared_session_with_a_warning(calc_url: str, caplog) -> None:
    tools = await mcp_tools.load_tools(calc_url, name="calc")
    add = next(t for t in tools if t.name == "add")
    with caplog.at_level(logging.WARNING, logger="mcp_tools"):
        assert await add.ainvoke({"a": 1, "b": 2}) == "3"
        assert await add.ainvoke({"a": 2, "b": 2}) == "4"
    warnings = [r for r in caplog.records if "outside `mcp_tools.rollout()`" in r.getMessage()]
    assert len(warnings) == 1


async def test_an_explicit_session_binds_its_tools(calc_url: str) -> None:
    async with mcp_tools.McpSession(calc_url, name="calc") as session:
        tools = await session.load_tools()
        handler = TrajectoryCallbackHandler()
        agent = react_agent(PolicyChatModel(policy=calculator_policy), tools)
        await agent.ainvoke(QUESTION, config={"callbacks": [handler]})  # no rollout() needed
        assert {r.session_id for r in handler.trajectory.tool_records} == {session.session_ids["calc"]}
    assert not session.is_open


async def test_a_server_that_cannot_start_is_a_clear_error() -> None:
    with pytest.raises(ToolServerError, match=re.escape("could not start MCP server")):
        await mcp_tools.load_tools(["/nonexistent/mcp-server"], connect_timeout_s=10)
    with pytest.raises(ConfigError, match="cannot use int"):
        await mcp_tools.load_tools(42)
