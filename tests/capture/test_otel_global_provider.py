"""MCP clients that trace themselves into the global tracer provider, beside OpenInference's graph spans:
one trajectory per run and one record per MCP call, whichever client made it.

An application that sets the global provider once (Langfuse's SDK does; so does any OTLP set-up)
gets the MCP SDK's own ``MCP send tools/call NAME`` span for every call, and, with a plain
``fastmcp.Client``, FastMCP's ``tools/call NAME`` span too: neither carries the tool call id, and
FastMCP's starts a trace of its own (OpenInference's tool span is never current). Before this was
handled, each call gave a second, nameless record and an empty trajectory of its own.

Each case runs in a subprocess (:mod:`tests.helpers.global_provider_capture`): the global provider can
be set once per process, and a pytest worker runs other tests after this one. Real notes server over
stdio, real LangGraph ReAct agent with a scripted policy model, the real OTel SDK and OpenInference.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from typing import Any

import pytest

NO_FASTMCP = pytest.mark.skipif(
    importlib.util.find_spec("fastmcp") is None, reason="fastmcp is not installed"
)


def captured(client: str) -> list[dict[str, Any]]:
    """The trajectories the subprocess captured with ``client``."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.helpers.global_provider_capture", client],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.mark.parametrize(
    ("client", "marks_is_error", "server"),
    [
        pytest.param("fastmcp", True, None, marks=NO_FASTMCP),
        ("sdk", False, None),  # the SDK's span does not mark an isError result
        ("mcp_tools", True, "notes"),
    ],
)
def test_one_trajectory_and_one_mcp_record_per_call(
    client: str, marks_is_error: bool, server: str | None
) -> None:
    trajectories = captured(client)
    assert len(trajectories) == 1, [(len(t["messages"]), t["tool_records"]) for t in trajectories]
    (trajectory,) = trajectories
    roles = [m["role"] for m in trajectory["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "tool", "assistant"], roles
    assert trajectory["messages"][-1]["content"].startswith("done: ")
    create, read = trajectory["tool_records"]
    for record, name, call_id in ((create, "create_note", "call_create"), (read, "read_note", "call_read")):
        assert (record["name"], record["call_id"], record["source"]) == (name, call_id, "mcp"), record
        assert record["server"] == server, record
        assert record["duration_s"] is not None and record["duration_s"] > 0, record
    assert create["arguments"] == {"title": "plain", "body": "client"} and not create["is_error"]
    assert create["result"].startswith("created note #"), create
    assert read["arguments"] == {"note_id": 99999}
    assert "no note with id 99999" in read["result"], read
    assert read["is_error"] is marks_is_error, read
    if server is not None:  # ours: the session the rollout used
        assert create["session_id"] and create["session_id"] == read["session_id"], (create, read)
