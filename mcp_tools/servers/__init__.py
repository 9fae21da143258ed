"""MCP servers bundled for examples, tests and the demo.

:mod:`~mcp_tools.servers.calculator` is stateless; :mod:`~mcp_tools.servers.notes` keeps state per MCP
session, to show rollout isolation. Run one with ``python -m mcp_tools.servers.<name>`` (stdio), or add
``--transport http --port 0`` for streamable HTTP. Each ships a small hand-written scenario file
(:func:`shipped_scenarios`), which ``train-mcp`` trains on when no scenario writer is configured.
"""

import re as _re
import sys as _sys
from pathlib import Path as _Path

__all__ = ["server_command", "shipped_scenarios"]

_DATA = _Path(__file__).parent / "data"
_BUNDLED = _re.compile(r"(?:^|\s)-m\s+mcp_tools\.servers\.(\w+)(?:\s|$)")


def server_command(name: str, *args: str) -> list[str]:
    """The stdio command line of a bundled server with this interpreter, e.g. ``server_command("notes")``."""
    return [_sys.executable, "-m", f"mcp_tools.servers.{name}", *args]


def shipped_scenarios(server: str) -> _Path | None:
    """The hand-written scenarios (JSONL) shipped with the bundled server that *server* starts, else ``None``.

    *server* is a stdio command line (``"python -m mcp_tools.servers.notes"``); any other server,
    an HTTP URL included, has none.
    """
    match = _BUNDLED.search(server)
    if match is None:
        return None
    path = _DATA / f"{match.group(1)}_scenarios.jsonl"
    return path if path.is_file() else None
