"""MCP servers bundled for examples, tests and the demo.

:mod:`~mcp_tools.servers.calculator` is stateless; :mod:`~mcp_tools.servers.notes` keeps state per MCP
session, to show rollout isolation. Run one with ``python -m mcp_tools.servers.<name>`` (stdio), or add
``--transport http --port 0`` for streamable HTTP.
"""

import sys as _sys

__all__ = ["server_command"]


def server_command(name: str, *args: str) -> list[str]:
    """The stdio command line of a bundled server with this interpreter, e.g. ``server_command("notes")``."""
    return [_sys.executable, "-m", f"mcp_tools.servers.{name}", *args]
