"""Third-party MCP servers from the package registries, as ``./dev setup`` installs them.

Python servers (``mcp-server-time``, ``mcp-server-git``) come with the ``test`` extra;
the Node servers (``@modelcontextprotocol/server-memory``, ``server-everything``) are
installed by ``./dev setup`` under ``.venv/node``. Tests that need one skip with a
reason naming ``./dev setup`` when it is missing.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.helpers.processes import stop_process, wait_for_line

REPO = Path(__file__).resolve().parents[2]
NODE_BIN = Path(os.environ.get("ART_ADAPTERS_NODE_PREFIX", REPO / ".venv" / "node")) / "node_modules" / ".bin"


def node_server(name: str) -> list[str]:
    """The command of a Node server installed by ``./dev setup`` (skips the test when it is missing)."""
    path = NODE_BIN / name
    if shutil.which("node") is None:
        pytest.skip("node is not installed; the Node MCP servers need node 20+ and `./dev setup`")
    if not path.exists():
        pytest.skip(f"{path} is missing: run `./dev setup` (it installs the Node MCP servers in .venv/node)")
    return [str(path)]


def python_server(module: str, *args: str) -> list[str]:
    """``python -m <module>`` for a Python server from the test extra (skips the test when missing)."""
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed: run `./dev setup` (the test extra pins it)")
    return [sys.executable, "-m", module, *args]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def everything_http() -> Iterator[str]:
    """``server-everything`` over streamable HTTP on a free port; yields its ``/mcp`` URL."""
    command = node_server("mcp-server-everything")
    port = free_port()
    process = subprocess.Popen(
        [*command, "streamableHttp"],
        env={**os.environ, "PORT": str(port)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for_line(process, process.stderr, "listening on port", "server-everything")
        # keep reading its log so a full pipe never blocks the server
        threading.Thread(target=lambda: [None for _ in process.stderr or ()], daemon=True).start()
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        stop_process(process)
