"""A genuine 2025-06-18 MCP server, not an emulation: a calculator on mcp 1.22 (newest protocol
2025-06-18, no ``server/discover``; tests/helpers/mcp_2025_server.py), run from its own side venv
(``.venv-mcp-2025``, built once, ~10 s), over stdio and streamable HTTP. Our clients, on mcp 2.x:

* the MCP SDK's ``ClientSession`` negotiates 2025-06-18 in the ``initialize`` handshake;
* ``mcp_tools.load_tools`` calls its tool, one handshake session per rollout;
* ``langchain.mcp.MCPAdapter`` probes ``server/discover``, is refused, and falls back to the handshake.

Building the venv needs the package index; when pip fails the tests skip with pip's own message.
"""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest

import mcp_tools
from tests.helpers.processes import wait_for_line
from tests.helpers.side_venv import ensure_side_venv
from tests.helpers.third_party import free_port

SERVER = Path(__file__).resolve().parents[1] / "helpers" / "mcp_2025_server.py"
#: mcp 1.22 is the last release whose newest protocol is 2025-06-18 and that imports with today's pydantic.
REQUIREMENTS = ["mcp==1.22.0"]


@pytest.fixture(scope="module")
def python_2025() -> Path:
    """The side venv's interpreter (mcp 1.22)."""
    python, note = ensure_side_venv(".venv-mcp-2025", REQUIREMENTS)
    if python is None:
        pytest.skip(note)
    return python


@contextmanager
def _served(python: Path, transport: str) -> Iterator[dict[str, Any]]:
    """``{"command": [...]}`` for stdio, or ``{"url": ...}`` of a server started here for HTTP."""
    if transport == "stdio":
        yield {"command": [str(python), str(SERVER)]}
        return
    port = free_port()
    process = subprocess.Popen([str(python), str(SERVER), str(port)], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)  # fmt: skip
    try:
        wait_for_line(process, process.stdout, "Uvicorn running", "mcp 1.22 server")
        yield {"url": f"http://127.0.0.1:{port}/mcp"}
    finally:
        process.terminate()
        process.wait(10)


@asynccontextmanager
async def _sdk_session(where: dict[str, Any]) -> AsyncIterator[Any]:
    """The MCP SDK's own ``ClientSession`` on the server, not yet initialised."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client
    from mcp.client.streamable_http import streamable_http_client

    if "command" in where:
        command, *args = where["command"]
        context = stdio_client(StdioServerParameters(command=command, args=args))
    else:
        context = streamable_http_client(where["url"])
    async with context as streams, ClientSession(streams[0], streams[1]) as session:
        yield session


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_our_clients_on_mcp_2x_call_a_genuine_2025_06_18_server(python_2025: Path, transport: str) -> None:
    with _served(python_2025, transport) as where:
        async with _sdk_session(where) as session:
            assert (await session.initialize()).protocol_version == "2025-06-18"

        source = " ".join(where["command"]) if "command" in where else where["url"]
        (add,) = await mcp_tools.load_tools(source)
        async with mcp_tools.rollout() as scope:
            assert await add.ainvoke({"a": 2, "b": 3}) == "5"
            assert [bool(s.session_ids) for s in scope.sessions] == [True]  # a handshake session

        adapter_module = pytest.importorskip("langchain.mcp", reason="langchain.mcp needs fastmcp")
        transports = pytest.importorskip("fastmcp.client.transports")
        if "command" in where:
            command, *args = where["command"]
            client_transport = transports.StdioTransport(command=command, args=args, keep_alive=False)
        else:
            client_transport = transports.StreamableHttpTransport(where["url"])
        async with adapter_module.MCPAdapter(client_transport) as adapter:
            (adapted,) = await adapter.list_tools()
            content = await adapted.ainvoke({"a": 2, "b": 3})
        assert [part["text"] for part in content] == ["5"]
