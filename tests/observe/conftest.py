"""Fixtures for the observability tests: one real scored run shared by the module's tests.

The run is real end to end: a LangGraph ReAct agent (LangChain's fake-free ``PolicyChatModel``
from the capture tests, scripted tool calls) calls the bundled calculator MCP server over
stdio and a plain LangChain tool; ``run_groups`` replays 2 scenarios x 3 rollouts with our
callback handler capturing; RULER scores each group on the scripted judge server over HTTP.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from langchain_core.messages import AIMessage
from langchain_core.tools import tool

import art_adapters as aa
from tests.helpers.capture_fakes import PolicyChatModel, calculator_policy, react_agent
from tests.helpers.judge_server import JudgeServer

SCENARIOS = [
    {"id": "calc-2-3-4", "q": "what is 2 + 3 times 4"},
    {"id": "calc-5-1-6", "q": "what is 5 + 1 times 6"},
]


@tool
def remember(text: str) -> str:
    """Write a note to the scratchpad (a plain LangChain tool, not MCP)."""
    return f"noted: {text}"


def policy(messages: list[Any]) -> AIMessage:
    """The calculator policy plus a call to the local ``remember`` tool on the first turn."""
    reply = calculator_policy(messages)
    if messages[-1].type == "human" and reply.tool_calls:
        calls = [
            *reply.tool_calls,
            {"name": "remember", "args": {"text": "started"}, "id": "call_note", "type": "tool_call"},
        ]
        return AIMessage(content=reply.content, tool_calls=calls)
    return reply


@pytest.fixture(scope="session")
def judge_server() -> Iterator[JudgeServer]:
    """The scripted OpenAI-compatible judge (scores 1, 1/2, 1/3... with "because tN" explanations)."""
    with JudgeServer() as server:
        yield server


@pytest.fixture(scope="session")
async def scored_groups(
    judge_server: JudgeServer, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[list[aa.TrajectoryGroup]]:
    """2 scenarios x 3 captured rollouts over a real MCP server, scored by RULER."""
    from langchain_openai import ChatOpenAI

    import mcp_tools
    from mcp_tools.servers import server_command

    tools = await mcp_tools.load_tools(server_command("calculator"))
    agent = react_agent(PolicyChatModel(policy=policy), [*tools, remember])
    attempts: dict[str, int] = {}

    async def rollout(scenario: dict[str, Any]) -> aa.Trajectory:
        attempt = attempts.get(scenario["id"], 0)
        attempts[scenario["id"]] = attempt + 1
        handler = aa.TrajectoryCallbackHandler()
        async with mcp_tools.rollout():
            await agent.ainvoke(
                {"messages": [("user", f"{scenario['q']} (try {attempt})")]}, config={"callbacks": [handler]}
            )
        assert handler.trajectory is not None
        return handler.trajectory

    groups = await aa.run_groups(rollout, SCENARIOS, n=3, max_concurrency=3, progress=False)
    judge_server.reset()
    judge = ChatOpenAI(base_url=judge_server.url, api_key="test", model="scripted-judge", max_retries=0)
    yield await aa.ruler_score_groups(groups, judge=judge, cache=tmp_path_factory.mktemp("ruler-cache"))
