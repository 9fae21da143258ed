"""``McpSession``: one MCP session per server, opened together and closed together.

A stateful server keys its state on the session, so one rollout must use one session for all its calls
(the known complaint about langchain-mcp-adapters is a new session per call).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Self

from art_adapters import ConfigError
from mcp_tools._config import HttpServer, McpClientConfig, StdioServer, client_config, parse_servers
from mcp_tools._connection import ServerConnection
from mcp_tools._isolation import SessionState, warn_unisolated

if TYPE_CHECKING:
    from pathlib import Path
    from types import TracebackType

    from langchain_core.tools import BaseTool
    from opentelemetry.trace import TracerProvider

    from mcp_tools._cassette import Cassette

logger = logging.getLogger(__name__)

__all__ = ["McpSession"]


class McpSession:
    """Live MCP sessions with one or several servers, usable as ``async with``.

    Use it explicitly::

        async with mcp_tools.McpSession({"calc": [...], "notes": "http://..."}) as session:
            tools = await session.load_tools()
            await graph.ainvoke(inputs, config={"callbacks": [handler]})

    or let :func:`mcp_tools.load_tools` open one lazily per :func:`mcp_tools.rollout`.

    A stdio server with per-rollout state (see :func:`mcp_tools.with_state`) gets fresh
    copies of its data files for each session, and its own process working on them;
    the copies are deleted when the session closes.

    Args:
        server: a command, URL, or config dict (see :func:`mcp_tools.load_tools`).
        name: the server's name when *server* names a single server.
        config: client options; keyword *options* override its fields
            (``call_timeout_s``, ``connect_timeout_s``, ``tool_name_prefix``).
        tracer_provider: where ``tools/call`` spans go (default: the global provider).

    Raises:
        ConfigError: *server* or an option is invalid (at construction).
        ToolServerError: a server could not be started or reached (at :meth:`open`).
    """

    def __init__(
        self,
        server: Any,
        *,
        name: str | None = None,
        config: McpClientConfig | None = None,
        tracer_provider: TracerProvider | None = None,
        **options: Any,
    ) -> None:
        self.servers: dict[str, StdioServer | HttpServer] = parse_servers(server, name=name)
        self.config: McpClientConfig = client_config(config, options)
        self.tracer_provider = tracer_provider
        self._connections: dict[str, ServerConnection] = {}
        self._listing: dict[str, list[dict[str, Any]]] | None = None
        self._state: SessionState | None = None

    async def open(self) -> McpSession:
        """Start or reach every server (concurrently) and do the handshakes; returns ``self``.

        Servers with per-rollout state first get fresh copies of it (see :attr:`state_folders`).
        """
        if self._connections:
            return self
        state = await asyncio.to_thread(SessionState.prepare, self.servers, self.config.state_dir)
        names = list(self.servers)
        tasks = [
            asyncio.ensure_future(ServerConnection.open(n, state.servers[n], self.config)) for n in names
        ]
        try:
            results = await asyncio.gather(*tasks, return_exceptions=True)
        except asyncio.CancelledError:
            # Cancelled while opening: the servers still starting stop themselves; close those already up.
            await asyncio.shield(self._close_opened(tasks))
            state.remove()
            raise
        opened = {n: r for n, r in zip(names, results, strict=True) if isinstance(r, ServerConnection)}
        failures = [r for r in results if isinstance(r, BaseException)]
        if failures:
            await asyncio.gather(*(c.aclose() for c in opened.values()))
            state.remove()
            raise failures[0]
        self._connections = opened
        self._state = state
        return self

    @staticmethod
    async def _close_opened(tasks: list[asyncio.Future[ServerConnection]]) -> None:
        results = await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.gather(*(r.aclose() for r in results if isinstance(r, ServerConnection)))

    async def aclose(self) -> None:
        """Close every session (stdio servers are stopped). Idempotent."""
        connections, self._connections = list(self._connections.values()), {}
        await asyncio.gather(*(c.aclose() for c in connections))
        state, self._state = self._state, None
        if state is not None:  # after the servers stopped: nothing writes into the copies any more
            await asyncio.to_thread(state.remove)

    async def __aenter__(self) -> Self:
        return await self.open()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    @property
    def is_open(self) -> bool:
        """Whether :meth:`open` succeeded and :meth:`aclose` has not run."""
        return bool(self._connections)

    @property
    def broken(self) -> bool:
        """Whether a server's session has ended under it (the server crashed or the connection died)."""
        return any(c.closed for c in self._connections.values())

    @property
    def state_folders(self) -> dict[str, Path]:
        """Each isolated server's folder of fresh state copies for this session (empty when none)."""
        return dict(self._state.folders) if self._state is not None else {}

    @property
    def session_ids(self) -> dict[str, str | None]:
        """The MCP session id of each server (a local id for stdio servers, which have none)."""
        return {name: c.session_id for name, c in self._connections.items()}

    def connection(self, server: str) -> ServerConnection:
        """The live connection to *server*.

        Raises:
            ConfigError: the session is not open, or has no server of that name.
        """
        if not self._connections:
            raise ConfigError("the McpSession is not open; use `async with McpSession(...)` or await open()")
        if server not in self._connections:
            raise ConfigError(f"no MCP server named {server!r}; this session has {sorted(self._connections)}")
        return self._connections[server]

    async def list_tools(self) -> dict[str, list[dict[str, Any]]]:
        """Each server's tools as MCP wire dicts (``name``, ``description``, ``inputSchema``...)."""
        if self._listing is None:
            names = list(self.servers)
            pages = await asyncio.gather(*(self.connection(n).list_tools() for n in names))
            self._listing = dict(zip(names, pages, strict=True))
        return self._listing

    async def read_resources(self, *, max_chars: int = 4000) -> list[dict[str, Any]]:
        """Every server's resources, each with its ``text`` read (cut to *max_chars*) and its ``server``.

        Servers without resources contribute nothing; a resource that cannot be read keeps
        no ``text`` (logged), so one bad resource does not hide the others.
        """
        from art_adapters import ToolServerError

        out: list[dict[str, Any]] = []
        for name in self.servers:
            connection = self.connection(name)
            for resource in await connection.list_resources():
                entry = {**resource, "server": name}
                try:
                    entry["text"] = (await connection.read_resource(str(resource["uri"])))[:max_chars]
                except ToolServerError as exc:
                    logger.warning("could not read MCP resource %s: %s", resource.get("uri"), exc)
                out.append(entry)
        return out

    async def call_tool(
        self, tool: str, arguments: dict[str, Any] | None = None, *, server: str | None = None
    ) -> dict[str, Any]:
        """Call an MCP tool directly (no LangChain, no capture); returns the result's wire form.

        Args:
            tool: the MCP tool name.
            arguments: its arguments.
            server: which server; optional when only one server is connected.
        """
        if server is None:
            if len(self.servers) != 1:
                raise ConfigError(f"several servers are connected ({sorted(self.servers)}); pass server=")
            server = next(iter(self.servers))
        return await self.connection(server).call_tool(tool, arguments or {})

    async def load_tools(self, *, cassette: Cassette | None = None) -> list[BaseTool]:
        """LangChain tools bound to this session: every call of every rollout uses it.

        The tools record each call in the trajectory and as an OTel span, like those of
        :func:`mcp_tools.load_tools`.

        Args:
            cassette: record every call there, or replay calls from it (see
                :class:`mcp_tools.Cassette`; a :func:`mcp_tools.rollout` with its own cassette
                overrides it inside). A recording cassette also records this session's tool list,
                so the cassette can later be replayed by :func:`mcp_tools.load_tools` offline.
        """
        from mcp_tools._tools import build_tools

        async def resolve() -> McpSession:
            return self

        listing = await self.list_tools()
        if cassette is not None and cassette.recording:
            for server_name, tools in listing.items():
                await cassette.record_tools(server_name, tools)
        warn_unisolated(self.servers, listing)
        return build_tools(
            listing,
            resolve=resolve,
            config=self.config,
            tracer_provider=self.tracer_provider,
            cassette=cassette,
        )
