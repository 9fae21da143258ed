"""A test MCP server that reports failures as plain text, without ``isError``, as mcp-server-sqlite does.

``read_query(query)`` runs SQL on an in-memory SQLite database with one table, ``books(title, year)``;
a failing query answers the text ``"Database error: <sqlite's message>"`` as a normal result. Serve it
over stdio: ``python -m tests.helpers.plain_error_server``.
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Sequence
from typing import Any

from mcp_tools import _compat
from mcp_tools.servers._runner import base_parser, serve


def command() -> list[str]:
    """The stdio command line of this server with this interpreter."""
    return [sys.executable, "-m", "tests.helpers.plain_error_server"]


def build_server() -> Any:
    """The server, its database seeded with three books."""
    server = _compat.create_server("plain-errors", "A book database; errors come back as plain text.")
    db = sqlite3.connect(":memory:", check_same_thread=False)
    db.execute("CREATE TABLE books (title TEXT, year INTEGER)")
    db.executemany("INSERT INTO books VALUES (?, ?)", [("Piranesi", 2020), ("Klara and the Sun", 2021),
                                                       ("The Overstory", 2018)])  # fmt: skip

    @server.tool()
    async def read_query(query: str) -> str:
        """Run a SELECT query on the books database (table books: title, year)."""
        try:
            rows = db.execute(query).fetchall()
        except sqlite3.Error as exc:
            return f"Database error: {exc}"
        return "\n".join(", ".join(str(v) for v in row) for row in rows) or "no rows"

    return server


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    return serve(lambda _args: build_server(), base_parser("Plain-text-error test server."), argv)


if __name__ == "__main__":
    raise SystemExit(main())
