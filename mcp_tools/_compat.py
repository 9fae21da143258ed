"""The one place that knows the difference between mcp 1.x and mcp 2.x.

art-adapters allows ``mcp>=1.20,<3``: mcp 2.x is current, but ``langchain-mcp-adapters`` 0.3.x pins
``mcp<2`` and its users must be able to use us. ``ClientSession`` and ``stdio_client`` are called the
same way in both; the rest of the package works on the JSON wire form of results (:func:`to_wire`).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, TextIO

import mcp
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.shared import exceptions as _mcp_exceptions

logger = logging.getLogger(__name__)

__all__ = [
    "MCP_MAJOR",
    "MCP_VERSION",
    "ClientSession",
    "McpProtocolError",
    "ServerContext",
    "ServerToolError",
    "create_server",
    "error_code",
    "list_params",
    "negotiate",
    "open_stdio",
    "open_streamable_http",
    "run_stdio_server",
    "session_key",
    "streamable_http_app",
    "to_wire",
]

MCP_VERSION: str = importlib.metadata.version("mcp")
MCP_MAJOR: int = int(MCP_VERSION.split(".", 1)[0])

#: The exception a client request raises when the server answers with a JSON-RPC error
#: (``McpError`` in mcp 1.x, ``MCPError`` in 2.x).
McpProtocolError: type[Exception] = getattr(_mcp_exceptions, "MCPError", None) or _mcp_exceptions.McpError

#: JSON-RPC error code the SDKs use when the transport closed under a pending request.
CONNECTION_CLOSED = -32000

if MCP_MAJOR >= 2:
    from mcp.server.mcpserver import Context as ServerContext
    from mcp.server.mcpserver import MCPServer as _Server
    from mcp.server.mcpserver.exceptions import ToolError as ServerToolError
else:  # pragma: no cover - exercised in the langchain-mcp-adapters compat venv
    from mcp.server.fastmcp import Context as ServerContext  # type: ignore[no-redef]
    from mcp.server.fastmcp import FastMCP as _Server  # type: ignore[no-redef]
    from mcp.server.fastmcp.exceptions import ToolError as ServerToolError  # type: ignore[no-redef]


#: The JSON-RPC error a server answers a protocol version it does not speak with (MCP 2026-07-28).
UNSUPPORTED_PROTOCOL_VERSION = -32022


def speaks_discover(session: Any) -> bool:
    """Whether this SDK can open a 2026-07-28 session (``server/discover``; mcp 2.x only)."""
    return callable(getattr(session, "discover", None))


async def negotiate(session: Any, *, modern: bool) -> None:
    """Open the session: the ``initialize`` handshake, or with ``modern`` the stateless 2026-07-28
    protocol through the SDK's public :meth:`ClientSession.discover` (newest version both speak)."""
    if modern:
        await session.discover()
    else:
        await session.initialize()


def error_code(exc: BaseException) -> int | None:
    """The JSON-RPC error code of a protocol error, or ``None`` for anything else."""
    error = getattr(exc, "error", None)
    code = getattr(error, "code", None)
    return code if isinstance(code, int) else None


def to_wire(model: Any) -> dict[str, Any]:
    """A result model as its JSON wire form (camelCase keys in every mcp version).

    The models' field names are camelCase (``isError``) in mcp 1.x and snake_case (``is_error``)
    in 2.x; the wire form is the same in both.
    """
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def list_params(cursor: str | None) -> Any:
    """Pagination parameters for ``list_tools`` (``None`` for the first page)."""
    if cursor is None:
        return None
    return mcp.types.PaginatedRequestParams(cursor=cursor)


@asynccontextmanager
async def open_stdio(
    command: str,
    args: list[str],
    *,
    env: dict[str, str] | None,
    cwd: str | None,
    errlog: TextIO,
) -> AsyncIterator[tuple[Any, Any]]:
    """Spawn a stdio server; yields the (read, write) stream pair for a ``ClientSession``."""
    params = StdioServerParameters(command=command, args=args, env=env, cwd=cwd)
    async with stdio_client(params, errlog=errlog) as streams:
        yield streams[0], streams[1]


@asynccontextmanager
async def open_streamable_http(
    url: str,
    *,
    headers: dict[str, str] | None,
    timeout_s: float,
) -> AsyncIterator[tuple[Any, Any, Callable[[], str | None]]]:
    """Connect to a streamable-HTTP server; yields (read, write, get_session_id).

    The SDK's client yields (read, write, get_id) in mcp 1.x and (read, write) in 2.x, so the
    session id is also read from the responses' ``mcp-session-id`` header.
    """
    from mcp.client import streamable_http as transport_module
    from mcp.shared._httpx_utils import create_mcp_http_client  # same private helper in 1.x and 2.x

    seen: dict[str, str | None] = {"id": None}

    async def remember_session_id(response: Any) -> None:
        session_id = response.headers.get("mcp-session-id")
        if session_id:
            seen["id"] = session_id

    # The SDK's HTTP library is httpx in 1.x and httpx2 in 2.x; its factory builds the right client.
    http_library = importlib.import_module("httpx2" if MCP_MAJOR >= 2 else "httpx")
    timeout = http_library.Timeout(timeout_s, read=max(timeout_s, 300.0))
    client = create_mcp_http_client(headers=headers, timeout=timeout)
    client.event_hooks = {"request": [], "response": [remember_session_id]}
    connect = getattr(transport_module, "streamable_http_client", None)
    async with client:
        if connect is not None:
            context = connect(url, http_client=client)
        else:  # pragma: no cover - mcp < 1.24 only has the deprecated spelling
            context = transport_module.streamablehttp_client(url, headers=headers)
        async with context as streams:
            if len(streams) >= 3:
                get_id = streams[2]
                yield streams[0], streams[1], lambda: get_id() or seen["id"]
            else:
                yield streams[0], streams[1], lambda: seen["id"]


def create_server(name: str, instructions: str) -> Any:
    """A high-level MCP server (``FastMCP`` in 1.x, ``MCPServer`` in 2.x); register tools with ``.tool()``."""
    return _Server(name=name, instructions=instructions)


def streamable_http_app(server: Any, *, host: str) -> Any:
    """The server's streamable-HTTP ASGI app, served at ``/mcp``."""
    if MCP_MAJOR >= 2:
        return server.streamable_http_app(host=host)
    server.settings.host = host  # pragma: no cover - 1.x reads host (DNS-rebinding protection) from settings
    return server.streamable_http_app()  # pragma: no cover


def session_key(ctx: Any) -> str:
    """A key that is the same for every request of one MCP session, on the server side.

    Over HTTP it is the ``mcp-session-id`` header. Over stdio one process serves one
    session, so the key is constant. (``ctx.session`` is connection-scoped in 1.x but
    a fresh per-request object in 2.x, so it cannot serve as the key.)
    """
    request = getattr(ctx.request_context, "request", None)
    headers = getattr(request, "headers", None)
    session_id = headers.get("mcp-session-id") if headers is not None else None
    return f"http:{session_id}" if session_id else "stdio"


async def run_stdio_server(server: Any) -> None:
    """Serve over stdin/stdout until the client closes the pipe."""
    await server.run_stdio_async()
