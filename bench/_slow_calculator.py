"""A stand-in for a remote MCP tool: the bundled calculator's ``add`` and ``subtract``, each call
taking 1-3 s (seeded by its arguments, so every configuration of bench/pipeline.py waits alike).

Serve it like the bundled servers: over stdio (``python bench/_slow_calculator.py``, what the bench
does) or ``--transport http --port 0 --port-file FILE`` (streamable HTTP on 127.0.0.1).
"""

from __future__ import annotations

import asyncio
import random
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root

from mcp_tools import _compat  # noqa: E402
from mcp_tools.servers._runner import base_parser, serve  # noqa: E402
from mcp_tools.servers.calculator import format_number  # noqa: E402


def latency(*key: float) -> float:
    """1-3 s, the same for the same arguments."""
    return random.Random(repr(key)).uniform(1.0, 3.0)


def build_server() -> Any:
    """The slow calculator."""
    server = _compat.create_server("calculator", "Exact arithmetic. Call one tool per operation.")

    @server.tool()
    async def add(a: float, b: float) -> str:
        """Add two numbers: a + b."""
        await asyncio.sleep(latency(a, b, 1))
        return format_number(a + b)

    @server.tool()
    async def subtract(a: float, b: float) -> str:
        """Subtract b from a: a - b."""
        await asyncio.sleep(latency(a, b, 2))
        return format_number(a - b)

    return server


if __name__ == "__main__":
    raise SystemExit(serve(lambda args: build_server(), base_parser(__doc__.split("\n\n")[0]), None))
