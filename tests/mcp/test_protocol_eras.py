"""MCP protocol eras end to end: a server that speaks only 2026-07-28 (stateless per-request envelope)
and one that speaks only the ``initialize`` handshake (answering 2025-06-18), both the real SDK's
``MCPServer`` (tests/helpers/mcp_era_server.py), over stdio and streamable HTTP, inside traced
``run_groups`` rollouts. Each server records the ``_meta`` of every ``tools/call``: the MCP SDK
carries the caller's W3C trace context there (``traceparent``), so the server's spans can join the
rollout's trace. What holds:

* ``mcp_tools.load_tools`` sends the handshake and, where it is refused, ``server/discover``: it
  speaks 2026-07-28 with the modern server and the handshake with the other (sessions, so state
  isolation, where a server has them), propagating the rollout's trace either way; a server that
  refuses both fails with ``ToolServerError`` naming the refusal.
* ``langchain.mcp.MCPAdapter`` (FastMCP 4.2.3) probes ``server/discover`` and speaks 2026-07-28 with
  the 2026-only server, propagating the rollout's trace, the tool record naming the server.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import art_adapters as aa
import mcp_tools
from art_adapters import ToolServerError, observe
from tests.helpers.processes import wait_for_line
from tests.helpers.third_party import free_port

mcp_adapter = pytest.importorskip("langchain.mcp", reason="langchain.mcp needs fastmcp: pip install fastmcp")
transports = pytest.importorskip("fastmcp.client.transports")


def _command(era: str, log: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "tests.helpers.mcp_era_server", era, str(log), *extra]


@contextmanager
def _served(era: str, log: Path, transport: str) -> Iterator[dict[str, Any]]:
    """How to reach the era server: ``{"command": [...]}`` (stdio) or ``{"url": ...}`` (HTTP, started here)."""
    if transport == "stdio":
        yield {"command": _command(era, log)}
        return
    port = free_port()
    process = subprocess.Popen(_command(era, log, "--port", str(port)), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)  # fmt: skip
    try:
        wait_for_line(process, process.stdout, "Uvicorn running", f"era server {era}")
        yield {"url": f"http://127.0.0.1:{port}/mcp"}
    finally:
        process.terminate()
        process.wait(10)


def _calls(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]


async def _traced_run(rollout: Any) -> tuple[list[aa.Trajectory], observe.Observer]:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    observer = observe.Observer(observe.ObserveConfig(run="eras"), span_exporter=InMemorySpanExporter())
    tracing = observe.RolloutTracing(observer=observer, step=0)
    groups = await aa.run_groups(rollout, [{"id": "s"}], n=2, progress=False, tracing=tracing)
    assert not groups[0].exceptions, groups[0].exceptions
    return groups[0].trajectories, observer


def _assert_trace_context_joined(calls: list[dict[str, Any]], trajectories: list[aa.Trajectory]) -> None:
    """Each rollout's call reached the server with the rollout's trace id in ``_meta.traceparent``."""
    trace_ids = sorted(call["meta"]["traceparent"].split("-")[1] for call in calls)
    assert trace_ids == sorted(t.metadata["trace_id"] for t in trajectories)


async def _mcp_tools_calls(
    era: str, log: Path, transport: str
) -> tuple[list[dict[str, Any]], list[aa.Trajectory]]:
    """Two traced rollouts calling the era server's ``echo`` through ``mcp_tools``: what the server
    recorded, and the trajectories (each checked to hold one record of the call)."""
    with _served(era, log, transport) as where:
        server = (mcp_tools.StdioServer(command=where["command"][0], args=where["command"][1:])
                  if "command" in where else mcp_tools.HttpServer(url=where["url"]))  # fmt: skip
        tools = await mcp_tools.load_tools({"era": server})

        async def rollout(scenario: dict[str, Any]) -> aa.Trajectory:
            handler = aa.TrajectoryCallbackHandler()
            async with mcp_tools.rollout():
                await tools[0].ainvoke({"text": "hi"}, config={"callbacks": [handler]})
            assert handler.trajectory is not None
            return handler.trajectory

        trajectories, observer = await _traced_run(rollout)
        observer.shutdown()
    for trajectory in trajectories:
        (record,) = trajectory.tool_records
        assert (record.server, record.name) == ("era", "echo") and "hi" in (record.result or "")
    return _calls(log), trajectories


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_mcp_tools_on_a_handshake_server_carries_the_rollouts_trace(tmp_path: Path, transport: str) -> None:
    calls, trajectories = await _mcp_tools_calls("handshake", tmp_path / "calls.jsonl", transport)
    assert len(calls) == 2 and all(c["protocol_version"] in ("2025-06-18", "2025-11-25") for c in calls)
    _assert_trace_context_joined(calls, trajectories)
    assert [t.tool_records[0].result for t in trajectories] == ["hi", "hi"]


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_langchain_mcp_speaks_2026_07_28_and_carries_the_rollouts_trace(tmp_path: Path, transport: str) -> None:
    log = tmp_path / "calls.jsonl"
    with _served("modern", log, transport) as where:

        async def rollout(scenario: dict[str, Any]) -> aa.Trajectory:
            target = (transports.StdioTransport(command=where["command"][0], args=where["command"][1:],
                                                keep_alive=False)
                      if "command" in where else transports.StreamableHttpTransport(where["url"]))  # fmt: skip
            handler = aa.TrajectoryCallbackHandler()
            async with mcp_adapter.MCPAdapter(target) as adapter:
                (echo,) = await adapter.list_tools()
                await echo.ainvoke({"text": "hi"}, config={"callbacks": [handler]})
            assert handler.trajectory is not None
            return handler.trajectory

        trajectories, observer = await _traced_run(rollout)
        observer.shutdown()
    calls = _calls(log)
    assert len(calls) == 2 and {c["protocol_version"] for c in calls} == {"2026-07-28"}
    assert all(c["meta"]["io.modelcontextprotocol/protocolVersion"] == "2026-07-28" for c in calls)
    _assert_trace_context_joined(calls, trajectories)
    for trajectory in trajectories:
        (record,) = trajectory.tool_records
        assert (record.server, record.name) == ("era-modern", "echo") and "hi" in (record.result or "")


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_mcp_tools_speaks_2026_07_28_with_a_modern_only_server(tmp_path: Path, transport: str) -> None:
    # It once sent only the initialize handshake, which this server refuses: load_tools failed.
    # Now the refusal is followed by server/discover on a fresh connection.
    calls, trajectories = await _mcp_tools_calls("modern", tmp_path / "calls.jsonl", transport)
    assert len(calls) == 2 and {c["protocol_version"] for c in calls} == {"2026-07-28"}
    assert all(c["meta"]["io.modelcontextprotocol/protocolVersion"] == "2026-07-28" for c in calls)
    _assert_trace_context_joined(calls, trajectories)


async def test_a_server_that_refuses_both_eras_fails_naming_the_refusal(tmp_path: Path) -> None:
    command = _command("neither", tmp_path / "calls.jsonl")
    with pytest.raises(ToolServerError, match="could not start MCP server 'era'.*MCPError"):
        await mcp_tools.load_tools({"era": mcp_tools.StdioServer(command=command[0], args=command[1:])})
