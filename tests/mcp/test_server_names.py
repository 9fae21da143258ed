"""What a stdio command means: a bare ``python`` is the interpreter running us, and a server is named
after what the command runs (module, script, package, console script), never after an option's value."""

from __future__ import annotations

import sys

import pytest

import mcp_tools
from mcp_tools._config import parse_servers


@pytest.mark.parametrize(
    ("command", "name"),
    [
        ("python -m mcp_tools.servers.notes", "notes"),
        (f"{sys.executable} -m mcp_server_git --repository repo", "mcp_server_git"),
        ("uvx mcp-server-time --local-timezone UTC", "mcp-server-time"),
        ("npx -y @modelcontextprotocol/server-memory@2026.8.31", "server-memory"),
        ("node /srv/node_modules/@modelcontextprotocol/server-everything/dist/index.js stdio", "server-everything"),
        ("mcp-server-git --repository repo", "mcp-server-git"),
        ("pipx run mcp-server-fetch", "mcp-server-fetch"),
        ("uv run --with httpx weather.py", "weather"),
        ("python3 tools/search_server.py --index index", "search_server"),
    ],
)
def test_servers_are_named_after_what_the_command_runs(command: str, name: str) -> None:
    assert list(parse_servers(command)) == [name]


def test_a_bare_python_is_the_interpreter_running_us() -> None:
    for command in ("python -m mcp_tools.servers.notes", ["python3", "-m", "mcp_tools.servers.notes"]):
        (spec,) = parse_servers(command).values()
        assert isinstance(spec, mcp_tools.StdioServer) and spec.command == sys.executable
    assert mcp_tools.StdioServer(command="python").command == sys.executable
    assert mcp_tools.StdioServer(command="/usr/bin/python3").command == "/usr/bin/python3"  # a path is kept


async def test_the_readmes_notes_command_starts_in_our_environment() -> None:
    """The README's ``train-mcp "python -m mcp_tools.servers.notes"``: not the PATH's python (which may
    lack our dependencies), the one running us."""
    tools = await mcp_tools.load_tools("python -m mcp_tools.servers.notes")
    assert "create_note" in {t.name for t in tools}
