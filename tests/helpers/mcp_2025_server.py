"""A calculator MCP server on an older MCP SDK (mcp 1.22: newest protocol 2025-06-18, no
``server/discover``), run from its own side venv by tests/mcp/test_mcp_2025_server.py.

``python mcp_2025_server.py`` serves over stdio; ``python mcp_2025_server.py PORT`` over streamable
HTTP on 127.0.0.1:PORT (path ``/mcp``). Standalone: it imports nothing of this project, whose
packages need mcp 2.x.
"""

import sys

from mcp.server.fastmcp import FastMCP

server = FastMCP("calculator-2025", host="127.0.0.1", port=int(sys.argv[1]) if len(sys.argv) > 1 else 8000)


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


if __name__ == "__main__":
    server.run("streamable-http" if len(sys.argv) > 1 else "stdio")
