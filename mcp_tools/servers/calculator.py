"""A stateless calculator MCP server: ``add``, ``subtract``, ``multiply``, ``divide``, ``power``, ``sqrt``.

Results are plain numbers as text (``"12"``, ``"2.5"``). Mistakes the model can fix (dividing by zero,
the square root of a negative number, an overflowing power) are MCP tool errors (``isError``) with a
message saying what went wrong.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from mcp_tools import _compat
from mcp_tools.servers._runner import base_parser, serve

__all__ = ["build_server", "format_number", "main"]


def format_number(value: float) -> str:
    """A number as short text: integral values without ``.0``, others with up to 12 significant digits."""
    if math.isfinite(value) and value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.12g}"


def build_server() -> Any:
    """The calculator server with its tools registered."""
    server = _compat.create_server(
        "calculator", "Exact arithmetic. Call one tool per operation; results are numbers as text."
    )

    @server.tool()
    async def add(a: float, b: float) -> str:
        """Add two numbers: a + b."""
        return format_number(a + b)

    @server.tool()
    async def subtract(a: float, b: float) -> str:
        """Subtract b from a: a - b."""
        return format_number(a - b)

    @server.tool()
    async def multiply(a: float, b: float) -> str:
        """Multiply two numbers: a * b."""
        return format_number(a * b)

    @server.tool()
    async def divide(a: float, b: float) -> str:
        """Divide a by b: a / b. b must not be zero."""
        if b == 0:
            raise _compat.ServerToolError(f"cannot divide {format_number(a)} by zero; b must be non-zero")
        return format_number(a / b)

    @server.tool()
    async def power(base: float, exponent: float) -> str:
        """Raise base to exponent: base ** exponent."""
        try:
            result = math.pow(base, exponent)
        except (OverflowError, ValueError) as exc:
            raise _compat.ServerToolError(
                f"{format_number(base)} ** {format_number(exponent)} is not a finite real number ({exc})"
            ) from exc
        return format_number(result)

    @server.tool()
    async def sqrt(x: float) -> str:
        """Square root of x (x must be >= 0)."""
        if x < 0:
            raise _compat.ServerToolError(
                f"cannot take the square root of the negative number {format_number(x)}"
            )
        return format_number(math.sqrt(x))

    return server


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point.

    Run: ``python -m mcp_tools.servers.calculator [--transport http --port 0] [--debug-tools]``.
    """
    parser = base_parser("Calculator MCP server (stateless arithmetic).")
    return serve(lambda _args: build_server(), parser, argv)


if __name__ == "__main__":
    raise SystemExit(main())
