"""MCP servers bundled for examples, tests and the demo.

* :mod:`mcp_tools.servers.calculator` — stateless arithmetic (``add``, ``subtract``,
  ``multiply``, ``divide``, ``power``, ``sqrt``); mistakes such as dividing by zero
  are MCP tool errors (``isError``) the model can read.
* :mod:`mcp_tools.servers.notes` — a stateful notes store backed by SQLite, seeded
  from ``data/notes_seed.json``; each MCP session gets its own copy unless ``--db``
  names a shared file.

Run one with ``python -m mcp_tools.servers.<name>`` (stdio), or add
``--transport http --port 0`` for streamable HTTP (the bound URL is printed on
stdout and written to ``--port-file``). ``--debug-tools`` (or
``MCP_TOOLS_DEBUG_TOOLS=1``) adds ``crash`` and ``sleep`` tools for failure tests.
"""

import sys as _sys

__all__ = ["server_command"]


def server_command(name: str, *args: str) -> list[str]:
    """The stdio command line of a bundled server with this interpreter, e.g. ``server_command("notes")``."""
    return [_sys.executable, "-m", f"mcp_tools.servers.{name}", *args]
