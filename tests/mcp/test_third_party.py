"""``load_tools`` against third-party MCP servers from the registries, not only our own.

Real processes, real stdio and streamable HTTP, no mocks: ``mcp-server-time`` (PyPI,
Python, stdio), ``@modelcontextprotocol/server-everything`` (npm, Node, stdio and
streamable HTTP) and ``@modelcontextprotocol/server-memory`` (npm, Node, stdio; its
state isolation is in ``test_isolation.py``). Pinned versions: pyproject's ``test``
extra and ``./dev``.
"""

from __future__ import annotations

import json
import logging
import sys

import pytest

import mcp_tools
from art_adapters._errors import ToolServerError
from tests.helpers.third_party import everything_http, node_server, python_server


def by_name(tools: list) -> dict:
    return {t.name: t for t in tools}


async def test_python_server_over_stdio() -> None:
    tools = by_name(await mcp_tools.load_tools(python_server("mcp_server_time"), name="time"))
    assert set(tools) == {"get_current_time", "convert_time"}
    assert tools["convert_time"].metadata == {"mcp_server": "time", "mcp_tool": "convert_time"}
    assert "timezone" in tools["get_current_time"].args
    async with mcp_tools.rollout():
        result = json.loads(
            await tools["convert_time"].ainvoke(
                {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}
            )
        )
    assert result["target"]["datetime"].split("T")[1].startswith("21:00")


async def test_node_servers_over_stdio(tmp_path) -> None:
    everything = by_name(await mcp_tools.load_tools(node_server("mcp-server-everything"), name="everything"))
    assert {"echo", "get-sum"} <= set(everything)
    memory = mcp_tools.StdioServer(
        command=node_server("mcp-server-memory")[0], env={"MEMORY_FILE_PATH": str(tmp_path / "m.jsonl")}
    )
    assert {"create_entities", "read_graph", "delete_entities"} <= {
        t.name for t in await mcp_tools.load_tools(memory)
    }
    async with mcp_tools.rollout():
        assert await everything["echo"].ainvoke({"message": "hi"}) == "Echo: hi"
        assert "5" in await everything["get-sum"].ainvoke({"a": 2, "b": 3})


async def test_node_server_over_streamable_http(caplog: pytest.LogCaptureFixture) -> None:
    with everything_http() as url, caplog.at_level(logging.WARNING, logger="mcp_tools"):
        tools = by_name(await mcp_tools.load_tools(url, name="everything"))
        assert {"echo", "get-sum"} <= set(tools)
        async with mcp_tools.rollout() as scope:
            assert await tools["echo"].ainvoke({"message": "over http"}) == "Echo: over http"
            session_id = scope.sessions[0].session_ids["everything"]
        assert session_id and not session_id.startswith("local-")  # the server's own Mcp-Session-Id
    # its toggles are annotated as writing, and an HTTP server cannot get state copies: say so
    assert "reached over HTTP" in caplog.text and "toggle-simulated-logging" in caplog.text


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (["no-such-mcp-server-xyz", "--flag"], "the command was not found"),
        ([sys.executable, "-c", "import sys; print('bad config', file=sys.stderr); sys.exit(3)"], "bad"),
    ],
    ids=["missing-command", "exits-at-start"],
)
async def test_a_server_that_cannot_start_names_the_command_and_the_root_cause(
    command: list[str], expected: str
) -> None:
    with pytest.raises(ToolServerError) as info:
        await mcp_tools.load_tools(command, name="broken", connect_timeout_s=20)
    message = str(info.value)
    assert message.startswith("could not start MCP server 'broken' (")
    assert command[0] in message and expected in message
    assert "ExceptionGroup" not in message and "TaskGroup" not in message
