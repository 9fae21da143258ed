"""Shared helpers for the MCP tests: bundled servers started for real, over stdio or HTTP."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from langchain_core.callbacks import AsyncCallbackHandler

from mcp_tools.servers import server_command
from tests.helpers.processes import announced_url


@contextmanager
def http_server(name: str, *args: str, port_file: Path | None = None) -> Iterator[str]:
    """Start a bundled server over streamable HTTP on a free port; yields its URL; stops it after."""
    extra = ["--port-file", str(port_file)] if port_file else []
    process = subprocess.Popen(
        server_command(name, "--transport", "http", "--port", "0", *extra, *args),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    with announced_url(process, f"server {name}") as url:
        yield url


#: The one entity of :func:`memory_file`.
SEED = {"type": "entity", "name": "Ada", "entityType": "person", "observations": ["wrote the first program"]}


@pytest.fixture
def memory_file(tmp_path: Path) -> Path:
    """A memory file holding one entity, as server-memory writes it (JSON lines)."""
    path = tmp_path / "data" / "memory.jsonl"
    path.parent.mkdir()
    path.write_text(json.dumps(SEED) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def start_http_server():
    """The :func:`http_server` context manager, for tests that start their own server."""
    return http_server


@pytest.fixture(scope="module")
def calc_url() -> Iterator[str]:
    """A calculator served over HTTP for the whole module."""
    with http_server("calculator") as url:
        yield url


@pytest.fixture(scope="module")
def notes_url() -> Iterator[str]:
    """A notes server (per-session state) served over HTTP for the whole module."""
    with http_server("notes") as url:
        yield url


@pytest.fixture
def event_log() -> EventLog:
    """A fresh :class:`EventLog` callback handler."""
    return EventLog()


class EventLog(AsyncCallbackHandler):
    """Collects tool starts/ends/errors and custom events, in order (a stand-in recorder for tests)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    async def on_tool_start(self, serialized: dict[str, Any], input_str: str, **kwargs: Any) -> None:
        self.events.append(("tool_start", serialized.get("name")))

    async def on_tool_end(self, output: Any, **kwargs: Any) -> None:
        self.events.append(("tool_end", output))

    async def on_tool_error(self, error: BaseException, **kwargs: Any) -> None:
        self.events.append(("tool_error", error))

    async def on_custom_event(self, name: str, data: Any, **kwargs: Any) -> None:
        self.events.append((name, data))

    def records(self) -> list[dict[str, Any]]:
        """The data of every MCP tool-record event."""
        from mcp_tools import TOOL_RECORD_EVENT

        return [data for name, data in self.events if name == TOOL_RECORD_EVENT]
