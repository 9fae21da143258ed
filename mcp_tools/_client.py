"""``load_tools``: MCP servers as LangChain tools whose session follows the rollout.

The tools are listed once and bound to no session: each call finds the session of the rollout it runs
in, so one tool list serves every rollout. For an explicit lifetime, use :class:`mcp_tools.McpSession`.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from typing import TYPE_CHECKING, Any

from mcp_tools._config import McpClientConfig, client_config, parse_servers
from mcp_tools._capabilities import warn_capabilities
from mcp_tools._isolation import warn_unisolated
from mcp_tools._rollout import current_scope
from mcp_tools._session import McpSession
from mcp_tools._tools import build_tools

if TYPE_CHECKING:
    from langchain_core.tools import BaseTool
    from opentelemetry.trace import TracerProvider

    from mcp_tools._cassette import Cassette
    from mcp_tools._config import HttpServer, StdioServer

logger = logging.getLogger(__name__)

__all__ = ["load_tools"]


class _Toolset:
    """The servers behind one ``load_tools`` result, and the sessions opened for them."""

    def __init__(
        self,
        servers: dict[str, StdioServer | HttpServer],
        config: McpClientConfig,
        tracer_provider: TracerProvider | None,
    ) -> None:
        self.servers = servers
        self.config = config
        self.tracer_provider = tracer_provider
        self._defaults: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, McpSession] = (
            weakref.WeakKeyDictionary()
        )
        self._default_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )
        self._warned = False

    async def new_session(self) -> McpSession:
        session = McpSession(self.servers, config=self.config, tracer_provider=self.tracer_provider)
        return await session.open()

    async def list_tools(self, cassette: Cassette | None) -> dict[str, list[dict[str, Any]]]:
        """Every server's tool list: from a replaying cassette (*cassette*, else the rollout's) that
        holds them all, else from the servers (recorded in that cassette, if any)."""
        scope = current_scope()
        recording = cassette if cassette is not None else (scope.cassette if scope is not None else None)
        listing = _recorded_listing(recording, list(self.servers))
        if listing is not None:
            return listing
        if scope is not None:  # list with the rollout's own session: no extra server start
            listing = await (await scope.session_for(self, self.new_session)).list_tools()
        else:
            async with McpSession(self.servers, config=self.config) as probe:
                listing = await probe.list_tools()
        if recording is not None:
            for server_name, tools in listing.items():
                await recording.record_tools(server_name, tools)
        return listing

    def tools(self, listing: dict[str, list[dict[str, Any]]], cassette: Cassette | None) -> list[BaseTool]:
        """One tool per tool in *listing*, each calling through :meth:`session`."""
        return list(
            build_tools(
                listing,
                resolve=self.session,
                config=self.config,
                tracer_provider=self.tracer_provider,
                cassette=cassette,
            )
        )

    async def session(self) -> McpSession:
        scope = current_scope()
        if scope is not None:
            return await scope.session_for(self, self.new_session)
        loop = asyncio.get_running_loop()
        session = self._defaults.get(loop)
        if session is not None and session.is_open and not session.broken:
            return session
        lock = self._default_locks.setdefault(loop, asyncio.Lock())
        async with lock:
            session = self._defaults.get(loop)
            if session is None or not session.is_open or session.broken:
                if session is not None and session.broken:
                    # A server crashed: a later call gets a fresh session (the loop, e.g. a notebook's, lives on).
                    logger.warning("MCP session of %s ended; opening a new one", sorted(self.servers))
                    await session.aclose()
                if not self._warned:
                    self._warned = True
                    logger.warning(
                        "MCP tools of %s called outside `mcp_tools.rollout()`: all such calls share one "
                        "session, so rollouts can see each other's server state. Wrap each rollout in "
                        "`async with mcp_tools.rollout():` to give it its own session.",
                        sorted(self.servers),
                    )
                session = await self.new_session()
                self._defaults[loop] = session
        return session


async def load_tools(
    server: Any,
    *,
    name: str | None = None,
    config: McpClientConfig | None = None,
    tracer_provider: TracerProvider | None = None,
    cassette: Cassette | None = None,
    **options: Any,
) -> list[BaseTool]:
    """Load an MCP server's tools as LangChain tools; every call is captured.

    Args:
        server: a stdio command (list, or shell-like string), a streamable-HTTP URL,
            one server's config dict (``{"command": ..., "args": [...]}`` /
            ``{"url": ...}``), or ``{"name": config, ...}`` for several servers.
        name: the server's name in records and spans, for a single server
            (default: derived from the module, script or host).
        config: client options; keyword *options* override its fields
            (``call_timeout_s``, ``connect_timeout_s``, ``tool_name_prefix``).
        tracer_provider: where ``tools/call`` spans go (default: the global provider).
        cassette: record every call there, or replay calls from it (see
            :class:`mcp_tools.Cassette`); a :func:`mcp_tools.rollout` with its own cassette
            overrides it inside. The tool list is recorded there too: a replaying cassette that
            holds every server's tool list gives the tools without starting or reaching any
            server (else the servers are listed live if ``on_missing="live"``).

    Returns:
        One :class:`~mcp_tools.McpTool` (a ``StructuredTool``) per server tool. Each
        call is recorded in the current trajectory and traced, and finds its session:

        * inside ``async with mcp_tools.rollout():``: the rollout's own session, opened on
          the first call and closed when the block ends (one session per rollout);
        * outside any rollout: one shared session per tool set and event loop, opened on
          the first call and kept until the loop ends (replaced on the next call if its
          server crashed). Fine for a single interactive run; a warning is logged once
          because concurrent or repeated rollouts would then share server state.

        For an explicit lifetime, use :class:`mcp_tools.McpSession` and its ``load_tools()``.

    A warning is logged for tools that write data on a server without per-rollout state, tools
    that can only be called as MCP tasks (``execution.taskSupport: "required"``; this client
    supports none, so their calls fail) and tools annotated as open-world (``openWorldHint``).

    Raises:
        ConfigError: *server* or an option is invalid.
        CassetteMissError: a replaying cassette with ``on_missing="fail"`` lacks a server's tool list.
        ToolServerError: a server could not be started or reached to list its tools.
    """
    toolset = _Toolset(parse_servers(server, name=name), client_config(config, options), tracer_provider)
    listing = await toolset.list_tools(cassette)
    warn_unisolated(toolset.servers, listing)
    warn_capabilities(listing)
    return toolset.tools(listing, cassette)


def _recorded_listing(
    cassette: Cassette | None, servers: list[str]
) -> dict[str, list[dict[str, Any]]] | None:
    """Every server's tool list from a replaying *cassette*, or ``None`` to list the servers live."""
    if cassette is None or cassette.recording:
        return None
    listing = {name: cassette.tools(name) for name in servers}
    missing = [name for name, tools in listing.items() if tools is None]
    if not missing:
        return {name: tools for name, tools in listing.items() if tools is not None}
    if cassette.on_missing == "live":
        return None
    from mcp_tools._cassette import CassetteMissError

    raise CassetteMissError(
        f"cassette {cassette.path} holds no tool list of server(s) {missing} (it has "
        f"{sorted(n for n in servers if n not in missing) or 'none'} of these); record it with "
        "Cassette(..., mode='record_new') against the live server, pass on_missing='live', or check "
        "the server's name (name=) matches the one recorded"
    )
