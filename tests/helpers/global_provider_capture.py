"""One ReAct run traced through the *global* tracer provider, as an application that configures
OpenTelemetry once (Langfuse's SDK, an OTLP exporter) has it; prints the captured trajectories as JSON.

Run as a subprocess (``python -m tests.helpers.global_provider_capture CLIENT``): the global provider
can be set once per process, so a pytest worker must not set it. OpenInference traces the graph
into that provider, and the MCP client traces itself there too:

- ``fastmcp``: a plain ``fastmcp.Client`` called from hand-written LangChain tools. FastMCP writes a
  ``tools/call NAME`` span (no call id, arguments or result) and the MCP SDK a ``MCP send tools/call
  NAME`` span under it; OpenInference's tool span is never current, so FastMCP's starts a trace of
  its own.
- ``sdk``: the MCP SDK's ``ClientSession`` called from hand-written tools (only the SDK's span).
- ``mcp_tools``: our tools; their ``tools/call`` span has the SDK's span under it.

The policy creates a note, reads a note that does not exist (an MCP ``isError`` result) and answers.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.tools import BaseTool, StructuredTool
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

import art_adapters as aa
import mcp_tools
from mcp_tools.servers import server_command
from tests.helpers.capture_fakes import PolicyChatModel, react_agent

CallTool = Callable[[str, dict[str, Any]], Awaitable[tuple[str, bool]]]


def notes_policy(messages: list[BaseMessage]) -> AIMessage:
    """Create a note, read note 99999 (it does not exist), then answer with the last tool result."""
    done = [m for m in messages if m.type == "tool"]
    steps = [("create_note", {"title": "plain", "body": "client"}, "call_create"),
             ("read_note", {"note_id": 99999}, "call_read")]  # fmt: skip
    if len(done) < len(steps):
        name, args, call_id = steps[len(done)]
        return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": call_id}])
    return AIMessage(content=f"done: {done[-1].text}")


def _hand_written_tools(call: CallTool) -> list[BaseTool]:
    """LangChain tools a user writes around an MCP client's ``call_tool``."""

    async def create_note(title: str, body: str) -> str:
        text, _ = await call("create_note", {"title": title, "body": body})
        return text

    async def read_note(note_id: int) -> str:
        text, _ = await call("read_note", {"note_id": note_id})
        return text

    return [
        StructuredTool.from_function(coroutine=create_note, name="create_note", description="Create a note."),
        StructuredTool.from_function(coroutine=read_note, name="read_note", description="Read a note by id."),
    ]


@asynccontextmanager
async def _fastmcp_tools() -> AsyncIterator[list[BaseTool]]:
    from fastmcp import Client
    from fastmcp.client.transports import StdioTransport

    command, *args = server_command("notes")
    async with Client(StdioTransport(command=command, args=args, keep_alive=False)) as client:

        async def call(name: str, arguments: dict[str, Any]) -> tuple[str, bool]:
            result = await client.call_tool(name, arguments, raise_on_error=False)
            return result.content[0].text, result.is_error

        yield _hand_written_tools(call)


@asynccontextmanager
async def _sdk_tools() -> AsyncIterator[list[BaseTool]]:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    command, *args = server_command("notes")
    async with (
        stdio_client(StdioServerParameters(command=command, args=args)) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()

        async def call(name: str, arguments: dict[str, Any]) -> tuple[str, bool]:
            result = await session.call_tool(name, arguments)
            return result.content[0].text, bool(result.is_error)

        yield _hand_written_tools(call)


@asynccontextmanager
async def _our_tools() -> AsyncIterator[list[BaseTool]]:
    tools = await mcp_tools.load_tools(server_command("notes"))
    async with mcp_tools.rollout():
        yield [t for t in tools if t.name in ("create_note", "read_note")]


CLIENTS = {"fastmcp": _fastmcp_tools, "sdk": _sdk_tools, "mcp_tools": _our_tools}


async def main(client: str) -> None:
    provider = TracerProvider()
    capture = aa.TrajectorySpanProcessor()
    provider.add_span_processor(capture)
    trace.set_tracer_provider(provider)
    from openinference.instrumentation.langchain import LangChainInstrumentor

    LangChainInstrumentor().instrument(tracer_provider=provider)
    async with CLIENTS[client]() as tools:
        agent = react_agent(PolicyChatModel(policy=notes_policy, model="policy"), tools)
        await agent.ainvoke({"messages": [("user", "remember this")]})
    provider.shutdown()  # emits whatever the processor still held
    json.dump([t.model_dump(mode="json") for t in capture.trajectories], sys.stdout)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
