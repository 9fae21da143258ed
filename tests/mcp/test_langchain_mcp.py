"""Tools of LangChain's own MCP adapter (``langchain.mcp.MCPAdapter``, on FastMCP) inside ``run_groups``.

A real LangGraph ReAct agent (deterministic policy model) calls the bundled notes server, started
over stdio through FastMCP, no mocks. The trajectory handler records each call with its server
(``langchain.mcp`` names it in the tool's ``mcp.server`` metadata), arguments, result, error and
duration; one adapter per rollout, entered for the rollout (``StdioTransport(keep_alive=False)``),
is one MCP session and one server process per rollout, so rollouts do not see each other's writes.
"""

from __future__ import annotations

import re
import sys
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage

import art_adapters as aa
from tests.helpers.capture_fakes import PolicyChatModel, react_agent

mcp_adapter = pytest.importorskip("langchain.mcp", reason="langchain.mcp needs fastmcp: pip install fastmcp")
transports = pytest.importorskip("fastmcp.client.transports")


def notes_policy(messages: list[BaseMessage]) -> AIMessage:
    """Create a note titled after the task, read a note that does not exist, list notes, answer."""
    task = next(str(m.content) for m in messages if m.type == "human")
    title = re.sub(r"\W+", "-", task).strip("-")
    done = [m for m in messages if m.type == "tool"]
    steps = [
        ("create_note", {"title": title, "body": "written by this rollout"}),
        ("read_note", {"note_id": 99999}),
        ("list_notes", {"limit": 50}),
    ]
    if len(done) < len(steps):
        name, args = steps[len(done)]
        return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": f"call_{len(done)}_{title}"}])
    return AIMessage(content=f"Listed: {done[-1].text}")


async def _rollout(scenario: dict[str, Any]) -> aa.Trajectory:
    transport = transports.StdioTransport(
        command=sys.executable, args=["-m", "mcp_tools.servers.notes"], keep_alive=False
    )
    handler = aa.TrajectoryCallbackHandler()
    async with mcp_adapter.MCPAdapter(transport) as adapter:  # this rollout's session
        tools = await adapter.list_tools()
        agent = react_agent(PolicyChatModel(policy=notes_policy, model="policy"), tools)
        await agent.ainvoke({"messages": [("user", scenario["task"])]}, config={"callbacks": [handler]})
    assert handler.trajectory is not None
    return handler.trajectory


async def test_langchain_mcp_tools_get_records_and_one_session_per_rollout() -> None:
    scenarios = [{"id": "a", "task": "remember alpha"}, {"id": "b", "task": "remember beta"}]
    groups = await aa.run_groups(_rollout, scenarios, n=2, max_concurrency=4, progress=False)
    assert [len(g.trajectories) for g in groups] == [2, 2], [g.exceptions for g in groups]
    for group, scenario in zip(groups, scenarios, strict=True):
        title = scenario["task"].replace(" ", "-")
        for trajectory in group.trajectories:
            created, missing, listed = trajectory.tool_records
            assert [r.name for r in trajectory.tool_records] == ["create_note", "read_note", "list_notes"]
            assert {r.server for r in trajectory.tool_records} == {"notes"}
            assert created.arguments == {"title": title, "body": "written by this rollout"}
            assert not created.is_error and created.duration_s is not None and created.duration_s > 0
            assert missing.is_error and "99999" in (missing.result or "")  # the server's isError, as data
            assert listed.result is not None and title in listed.result
            # its own session: no other rollout's note, not even the same scenario's other rollout
            others = {s["task"].replace(" ", "-") for s in scenarios} - {title}
            assert not any(other in listed.result for other in others)
            assert listed.result.count(title) == 1, listed.result
