"""An MCP server (the real SDK's ``MCPServer``) that speaks only one protocol era, and records what it got.

``python -m tests.helpers.mcp_era_server ERA LOG [--port N]``: ERA ``modern`` answers only the
stateless 2026-07-28 envelope (``initialize`` is refused as a 2026-only server refuses it),
``handshake`` only the 2025-06-18 ``initialize`` handshake (``server/discover`` is an unknown
method, as on a 2025 server, and the handshake is pinned to 2025-06-18), ``neither`` refuses
both (a server of an era no SDK here speaks). The gate is a
``ServerMiddleware``, the SDK's documented hook that runs before the handshake. Every
``tools/call`` appends ``{"protocol_version", "meta"}`` (the request's ``_meta``, where the
client's trace context travels) to LOG as a JSON line. Over stdio by default, or streamable HTTP
on 127.0.0.1:N with ``--port``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError

METHOD_NOT_FOUND, UNSUPPORTED_PROTOCOL_VERSION = -32601, -32022
HANDSHAKE_VERSION, MODERN_VERSION = "2025-06-18", "2026-07-28"


class EraGate:
    """Refuse the other era's requests; record each ``tools/call``'s ``_meta``."""

    def __init__(self, era: str, log: Path) -> None:
        self.era, self.log = era, log

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        params = dict(ctx.params or {})
        if self.era == "modern" and ctx.method == "initialize":
            raise MCPError(UNSUPPORTED_PROTOCOL_VERSION, "this server speaks only 2026-07-28",
                           {"supported": [MODERN_VERSION], "requested": params.get("protocolVersion")})  # fmt: skip
        if self.era == "neither" and ctx.method in ("initialize", "server/discover"):
            raise MCPError(UNSUPPORTED_PROTOCOL_VERSION, "this server speaks only 2099-01-01",
                           {"supported": ["2099-01-01"], "requested": params.get("protocolVersion")})  # fmt: skip
        if self.era == "handshake":
            if ctx.method == "server/discover":
                raise MCPError(METHOD_NOT_FOUND, "Method not found: server/discover")
            if ctx.method == "initialize":  # a 2025-06-18 server answers with its own version
                result = await call_next(ctx)
                body = result.model_dump(by_alias=True, mode="json", exclude_none=True) if hasattr(
                    result, "model_dump") else dict(result or {})  # fmt: skip
                return {**body, "protocolVersion": HANDSHAKE_VERSION}
        if ctx.method == "tools/call":
            with self.log.open("a", encoding="utf-8") as out:
                out.write(json.dumps({"protocol_version": ctx.protocol_version, "meta": params.get("_meta")}) + "\n")
        return await call_next(ctx)


def build(era: str, log: Path) -> MCPServer:
    """The ``echo`` server behind the era gate."""
    server = MCPServer(f"era-{era}", middleware=[EraGate(era, log)])

    @server.tool()
    def echo(text: str) -> str:
        """Return the text."""
        return text

    return server


def _answer_discover_as_unknown() -> None:
    """Over stdio, answer ``server/discover`` as a 2025 server does (-32601) before the SDK sees it.

    The SDK's server settles a stdio connection's era on a ``server/discover`` before any middleware
    runs, so the gate alone cannot make it a faithful 2025 server there. A thread reads the real
    stdin, answers the probe itself (the client waits for that answer before it sends anything else,
    so the lines cannot interleave) and passes every other line on through a pipe the SDK reads.
    """
    source = os.fdopen(os.dup(0), "rb")
    read_end, write_end = os.pipe()
    os.dup2(read_end, 0)

    def relay() -> None:
        for line in source:
            try:
                message = json.loads(line)
            except ValueError:
                message = None
            if isinstance(message, dict) and message.get("method") == "server/discover":
                error = {"code": METHOD_NOT_FOUND, "message": "Method not found: server/discover"}
                os.write(1, json.dumps({"jsonrpc": "2.0", "id": message.get("id"), "error": error}).encode() + b"\n")
                continue
            os.write(write_end, line)
        os.close(write_end)

    threading.Thread(target=relay, name="discover-refuser", daemon=True).start()


def main(argv: Sequence[str] | None = None) -> None:
    """Run the server (see the module docstring)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("era", choices=["modern", "handshake", "neither"])
    parser.add_argument("log", type=Path)
    parser.add_argument("--port", type=int)
    args = parser.parse_args(argv)
    server = build(args.era, args.log)
    if args.port is None:
        if args.era == "handshake":
            _answer_discover_as_unknown()
        server.run("stdio")
    else:
        print(f"listening on http://127.0.0.1:{args.port}/mcp", flush=True)
        server.run("streamable-http", host="127.0.0.1", port=args.port)


if __name__ == "__main__":
    main(sys.argv[1:])
