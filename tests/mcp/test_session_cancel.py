"""Cancelling a rollout while its MCP session is still starting must not leave the server behind."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

import pytest

import mcp_tools

# A "server" that starts, writes its pid, and never answers the MCP handshake.
_SILENT = "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(120)"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purpose
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


async def _wait_for_pid(pid_file: Path) -> int:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if pid_file.exists() and pid_file.read_text():
            return int(pid_file.read_text())
        await asyncio.sleep(0.05)
    raise AssertionError("the server never started")


def _session_tasks(*servers: str) -> list[asyncio.Task]:
    """Runner tasks of these servers' sessions still going (other tests' shared sessions live on the same loop)."""
    names = {f"mcp-session-{s}" for s in servers}
    return [t for t in asyncio.all_tasks() if t.get_name() in names and not t.done()]


@pytest.mark.parametrize("servers", [1, 2])
async def test_cancelling_open_stops_the_server_it_was_starting(tmp_path: Path, servers: int) -> None:
    pid_files = [tmp_path / f"pid{i}" for i in range(servers)]
    spec = {
        f"s{i}": {"command": sys.executable, "args": ["-c", _SILENT, str(f)]} for i, f in enumerate(pid_files)
    }
    session = mcp_tools.McpSession(spec, connect_timeout_s=60)
    opening = asyncio.create_task(session.open())
    pids = [await _wait_for_pid(f) for f in pid_files]
    opening.cancel()
    with pytest.raises(asyncio.CancelledError):
        await opening
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and (_session_tasks(*spec) or any(_alive(p) for p in pids)):
        await asyncio.sleep(0.1)
    assert not _session_tasks(*spec), "the session's runner task was left running"
    assert not any(_alive(p) for p in pids), "the server process was left running"


async def test_cancelling_open_closes_the_servers_already_up(tmp_path: Path) -> None:
    from mcp_tools.servers import server_command

    pid_file = tmp_path / "pid"
    command = server_command("calculator")
    spec = {
        "calc-cancel": {"command": command[0], "args": command[1:]},
        "silent-cancel": {"command": sys.executable, "args": ["-c", _SILENT, str(pid_file)]},
    }
    opening = asyncio.create_task(mcp_tools.McpSession(spec, connect_timeout_s=60).open())
    pid = await _wait_for_pid(pid_file)
    deadline = time.monotonic() + 20  # until the calculator's handshake is done; the other still starts
    while time.monotonic() < deadline and not _handshake_done("calc-cancel"):
        await asyncio.sleep(0.1)
    assert _handshake_done("calc-cancel")
    opening.cancel()
    with pytest.raises(asyncio.CancelledError):
        await opening
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and (_session_tasks(*spec) or _alive(pid)):
        await asyncio.sleep(0.1)
    assert not _session_tasks(*spec), "a session that had opened was left running"
    assert not _alive(pid)


def _handshake_done(server: str) -> bool:
    for task in _session_tasks(server):
        return task.get_coro().cr_frame.f_locals["self"]._ready.is_set()
    return False


async def test_a_server_that_never_handshakes_fails_at_connect_timeout_with_its_stderr() -> None:
    from art_adapters._errors import ToolServerError

    script = "import sys, time; print('booting, waiting for the database', file=sys.stderr, flush=True); time.sleep(120)"
    started = time.monotonic()
    with pytest.raises(ToolServerError, match="did not finish the handshake within 1s") as info:
        await mcp_tools.McpSession([sys.executable, "-c", script], name="slow", connect_timeout_s=1).open()
    assert (
        time.monotonic() - started < 6
    )  # not connect_timeout_s plus a 10 s wait for a close that cannot come
    assert "waiting for the database" in str(info.value)  # the stderr tail says why
    assert not _session_tasks("slow")


async def test_a_server_that_exits_at_start_is_reported_with_its_stderr() -> None:
    from art_adapters._errors import ToolServerError

    script = "import sys; sys.exit('config file /etc/notes.toml not found')"
    with pytest.raises(ToolServerError, match="MCP server 'broken'") as info:
        await mcp_tools.McpSession([sys.executable, "-c", script], name="broken", connect_timeout_s=10).open()
    assert "/etc/notes.toml not found" in str(info.value)


async def test_cancelling_a_call_cancels_its_request_and_the_session_goes_on() -> None:
    from mcp_tools.servers import server_command

    async with mcp_tools.McpSession(server_command("calculator", "--debug-tools"), name="calc") as session:
        with pytest.raises(TimeoutError):  # the caller's own deadline (a rollout's timeout_s)
            await asyncio.wait_for(session.call_tool("sleep", {"seconds": 5}), 0.3)
        await asyncio.sleep(0.1)
        orphans = [
            t for t in asyncio.all_tasks() if not t.done() and "call_tool" in t.get_coro().__qualname__
        ]
        assert not orphans, "the cancelled call's request kept running"
        result = await session.call_tool("add", {"a": 1, "b": 2})
        assert result["content"][0]["text"] == "3"


async def test_outside_a_rollout_a_crashed_shared_session_is_replaced() -> None:
    from art_adapters._errors import ToolServerError
    from mcp_tools.servers import server_command

    tools = {t.name: t for t in await mcp_tools.load_tools(server_command("calculator", "--debug-tools"))}
    assert await tools["add"].ainvoke({"a": 1, "b": 2}) == "3"
    with pytest.raises(ToolServerError, match="crash"):
        await tools["crash"].ainvoke({})
    # A notebook's loop never ends: the next call must get a working session, not "no longer usable" forever.
    assert await tools["add"].ainvoke({"a": 2, "b": 2}) == "4"
