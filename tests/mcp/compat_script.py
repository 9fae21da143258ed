"""Run inside ``.venv-compat`` (mcp 1.x + langchain-mcp-adapters) by ``test_compat_venv.py``.

Prints one JSON object on stdout with what the test checks:

* ``mcp_version``: the mcp the venv really has;
* ``adapters``: the trajectory of a ReAct agent whose tools come from
  ``langchain_mcp_adapters.client.MultiServerMCPClient`` (our calculator over stdio),
  captured by ``TrajectoryCallbackHandler`` through the ordinary tool callbacks;
* ``ours``: the same agent on ``mcp_tools.load_tools`` (the notes server, two calls in
  one rollout), i.e. our middleware and bundled servers on mcp 1.x;
* ``http_isolated``: whether two HTTP sessions of the notes server (run by mcp 1.x's
  FastMCP) keep separate state.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # a script: the repository root, for tests.helpers

from langchain_core.messages import AIMessage

import mcp_tools
from art_adapters import TrajectoryCallbackHandler
from mcp_tools.servers import server_command
from tests.helpers.capture_fakes import PolicyChatModel, calculator_policy, react_agent

QUESTION = {"messages": [("user", "what is 2 + 3 times 4")]}


async def adapters_run() -> dict:
    from langchain_mcp_adapters.client import MultiServerMCPClient

    command = server_command("calculator")
    client = MultiServerMCPClient(
        {"calc": {"command": command[0], "args": command[1:], "transport": "stdio"}}
    )
    tools = await client.get_tools()
    handler = TrajectoryCallbackHandler()
    await react_agent(PolicyChatModel(policy=calculator_policy), tools).ainvoke(
        QUESTION, config={"callbacks": [handler]}
    )
    return handler.trajectory.model_dump(mode="json")


def notes_policy(messages):
    done = sum(1 for m in messages if m.type == "ai")
    turns = [
        AIMessage(
            content="",
            tool_calls=[
                {
                    "name": "create_note",
                    "args": {"title": "compat", "body": "mcp one"},
                    "id": "c1",
                    "type": "tool_call",
                }
            ],
        ),
        AIMessage(
            content="",
            tool_calls=[
                {"name": "search_notes", "args": {"query": "mcp one"}, "id": "s1", "type": "tool_call"}
            ],
        ),
        AIMessage(content="done"),
    ]
    return turns[min(done, 2)]


async def ours_run() -> dict:
    tools = await mcp_tools.load_tools(server_command("notes"))
    handler = TrajectoryCallbackHandler()
    async with mcp_tools.rollout():
        await react_agent(PolicyChatModel(policy=notes_policy), tools).ainvoke(
            QUESTION, config={"callbacks": [handler]}
        )
    return handler.trajectory.model_dump(mode="json")


async def http_isolated() -> bool:
    process = subprocess.Popen(  # noqa: ASYNC220 - a test script; the server must outlive this call
        server_command("notes", "--transport", "http", "--port", "0"), stdout=subprocess.PIPE, text=True
    )
    try:
        line = process.stdout.readline()
        url = line.rsplit(" ", 1)[-1].strip()
        async with mcp_tools.McpSession(url) as first, mcp_tools.McpSession(url) as second:
            await first.call_tool("create_note", {"title": "only-first", "body": "x"})
            mine = await first.call_tool("search_notes", {"query": "only-first"})
            theirs = await second.call_tool("search_notes", {"query": "only-first"})
        text = lambda result: result["content"][0]["text"]
        return "only-first" in text(mine) and text(theirs).startswith("no notes")
    finally:
        process.terminate()
        process.wait(10)


async def main() -> None:
    result = {
        "mcp_version": version("mcp"),
        "adapters": await adapters_run(),
        "ours": await ours_run(),
        "http_isolated": await http_isolated(),
    }
    sys.stdout.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    asyncio.run(main())
