"""A test MCP server whose answers change on every call, to tell a replayed answer from a live one.

``tick(label)`` answers ``"<label>#<n>@<run>"``: ``n`` counts every call the process has answered and
``run`` is random per process, so no two live answers are ever equal, even across restarts.
``oops(label)`` answers an MCP tool error (``isError``) with the same kind of text, and ``sleep`` (with
``--debug-tools``) hangs a call. ``--calls-file PATH`` appends one line per answered call there, so a
test can count the calls that really reached the server. Serve it over stdio (default) or streamable
HTTP (``--transport http --port 0``), like the bundled servers.
"""

from __future__ import annotations

import itertools
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mcp_tools import _compat
from mcp_tools.servers._runner import base_parser, serve


def command(*args: str) -> list[str]:
    """The stdio command line of this server with this interpreter."""
    return [sys.executable, "-m", "tests.helpers.counter_server", *args]


def build_server(calls_file: Path | None) -> Any:
    """The counter server; every answered call is appended to *calls_file* when given."""
    server = _compat.create_server("counter", "Answers change on every call.")
    run = uuid.uuid4().hex[:8]
    counter = itertools.count(1)

    def answer(label: str) -> str:
        text = f"{label}#{next(counter)}@{run}"
        if calls_file is not None:
            with calls_file.open("a", encoding="utf-8") as handle:
                handle.write(text + "\n")
        return text

    @server.tool()
    async def tick(label: str) -> str:
        """A fresh answer for every call: label, call number and the process's random run id."""
        return answer(label)

    @server.tool()
    async def oops(label: str) -> str:
        """Always an MCP tool error, with a fresh text."""
        raise _compat.ServerToolError(f"oops {answer(label)}")

    return server


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    parser = base_parser("An MCP server whose answers change on every call (tests only).")
    parser.add_argument("--calls-file", type=Path, help="append each answered call to this file")
    return serve(lambda args: build_server(args.calls_file), parser, argv)


if __name__ == "__main__":
    raise SystemExit(main())
