"""The command line shared by the bundled servers: transport, address, debug tools.

Every bundled server takes the same options, so tests and the demo start any of them the same way over
stdio or streamable HTTP.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import socket
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from art_adapters.files import write_atomic
from mcp_tools import _compat

logger = logging.getLogger(__name__)

__all__ = ["add_debug_tools", "base_parser", "serve"]

DEBUG_ENV = "MCP_TOOLS_DEBUG_TOOLS"


def base_parser(description: str) -> argparse.ArgumentParser:
    """An argument parser with the options every bundled server has.

    ``--transport stdio`` (default) serves on stdin/stdout. ``--transport http`` serves
    streamable HTTP at ``http://HOST:PORT/mcp``; ``--port 0`` picks a free port, and the
    bound URL is printed on stdout as ``MCP server listening on <url>`` and written to
    ``--port-file`` (the port number alone) so a parent process can find it.
    ``--debug-tools`` (or the environment variable ``MCP_TOOLS_DEBUG_TOOLS=1``) adds
    :func:`add_debug_tools`'s tools.
    """
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--transport", choices=["stdio", "http"], default="stdio", help="default: stdio")
    parser.add_argument("--host", default="127.0.0.1", help="HTTP bind address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="HTTP port; 0 picks a free one (default 8000)")
    parser.add_argument(
        "--port-file", type=Path, help="write the bound HTTP port to this file once listening"
    )
    parser.add_argument(
        "--debug-tools",
        action="store_true",
        default=os.environ.get(DEBUG_ENV, "") not in ("", "0"),
        help=f"add `crash` and `sleep` tools for failure tests (also: {DEBUG_ENV}=1)",
    )
    parser.add_argument("--log-level", default="WARNING", help="stderr log level (default WARNING)")
    return parser


def add_debug_tools(server: Any) -> None:
    """Register ``crash`` and ``sleep``: test-only ways to make the server die or hang mid-call.

    ``crash`` makes the process exit at once, mid-call; ``sleep`` hangs the call for the given
    seconds. They exist only to test failure handling.
    """

    @server.tool()
    async def crash(exit_code: int = 1) -> str:
        """Test only: the server process exits immediately, without answering."""
        sys.stderr.write(f"crash tool called: exiting with status {exit_code}\n")
        sys.stderr.flush()
        os._exit(exit_code)

    @server.tool()
    async def sleep(seconds: float) -> str:
        """Test only: wait this many seconds before answering (a hung call)."""
        await asyncio.sleep(seconds)
        return f"slept {seconds:g}s"


async def _serve_http(server: Any, host: str, port: int, port_file: Path | None) -> None:
    import uvicorn

    # IPPROTO_TCP named, not 0: asyncio sets TCP_NODELAY only on sockets that say they are TCP, and
    # without it every response written in two parts waits 40 ms for the client's delayed ACK.
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    bound_port = sock.getsockname()[1]
    app = _compat.streamable_http_app(server, host=host)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    uvicorn_server = uvicorn.Server(config)

    async def announce() -> None:
        while not uvicorn_server.started:
            await asyncio.sleep(0.02)
        if port_file is not None:
            write_atomic(port_file, str(bound_port).encode("utf-8"))
        # The one line a parent process reads: stdout is free in HTTP mode.
        sys.stdout.write(f"MCP server listening on http://{host}:{bound_port}/mcp\n")
        sys.stdout.flush()

    announcer = asyncio.create_task(announce())
    try:
        await uvicorn_server.serve(sockets=[sock])
    finally:
        announcer.cancel()


def serve(
    build: Callable[[argparse.Namespace], Any], parser: argparse.ArgumentParser, argv: Sequence[str] | None
) -> int:
    """Parse *argv*, build the server with *build(args)*, and serve it until stopped; returns the exit status."""
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr)
    server = build(args)
    if args.debug_tools:
        add_debug_tools(server)
    try:
        if args.transport == "stdio":
            asyncio.run(_compat.run_stdio_server(server))
        else:
            asyncio.run(_serve_http(server, args.host, args.port, args.port_file))
    except KeyboardInterrupt:
        pass
    return 0
