"""``mcp_tools.rollout()``: the scope that gives each rollout its own MCP sessions.

Tools from :func:`mcp_tools.load_tools` are not tied to a session; inside ``async with
mcp_tools.rollout():`` they share one session per server, so a stateful server sees one session per
rollout and concurrent rollouts never share state.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mcp_tools._cassette import Cassette
    from mcp_tools._session import McpSession

logger = logging.getLogger(__name__)

__all__ = ["RolloutScope", "current_scope", "rollout"]

_CURRENT: contextvars.ContextVar[RolloutScope | None] = contextvars.ContextVar("mcp_tools_rollout", default=None)


class RolloutScope:
    """One rollout's MCP sessions, opened lazily per tool set and closed together.

    Attributes:
        id: the rollout's identifier (given, or a fresh ``rollout-<hex>``).
        cassette: where this rollout's MCP calls are recorded or replayed from (see
            :class:`mcp_tools.Cassette`); ``None``: the tools' own cassette, if any.
    """

    def __init__(self, rollout_id: str | None = None, *, cassette: Cassette | None = None) -> None:
        self.id = rollout_id or f"rollout-{uuid.uuid4().hex[:12]}"
        self.cassette = cassette
        self._sessions: dict[Any, McpSession] = {}
        self._locks: dict[Any, asyncio.Lock] = {}
        self._closed = False

    @property
    def sessions(self) -> list[McpSession]:
        """The sessions opened in this rollout so far."""
        return list(self._sessions.values())

    async def session_for(self, key: Any, factory: Callable[[], Awaitable[McpSession]]) -> McpSession:
        """The session for *key* in this rollout, opened by *factory* on first use."""
        if self._closed:
            from art_adapters import ToolServerError

            raise ToolServerError(f"rollout {self.id} has ended; its MCP sessions are closed")
        session = self._sessions.get(key)
        if session is not None:
            return session
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:  # parallel tool calls in one turn must not open two sessions
            session = self._sessions.get(key)
            if session is None:
                session = await factory()
                self._sessions[key] = session
                logger.debug("rollout %s opened MCP session(s) %s", self.id, session.session_ids)
        return session

    async def aclose(self) -> None:
        """Close every session this rollout opened. Idempotent."""
        self._closed = True
        sessions, self._sessions = list(self._sessions.values()), {}
        await asyncio.gather(*(s.aclose() for s in sessions))


def current_scope() -> RolloutScope | None:
    """The innermost active :func:`rollout` scope, if any."""
    return _CURRENT.get()


@asynccontextmanager
async def rollout(
    rollout_id: str | None = None, *, cassette: Cassette | None = None
) -> AsyncIterator[RolloutScope]:
    """Scope one rollout: MCP tools called inside share one session per server, closed at the end.

    On their first call inside the block, the tools open one :class:`McpSession` for this
    rollout, every later call in the rollout reuses it, and it is closed when the block ends.
    A stdio server started per session (like the bundled notes server) gives each rollout a
    fresh copy of its data; a server that keeps its data in a file or folder needs
    per-rollout *state* in its config (:class:`mcp_tools.StateCopy`, ``{state:PATH}``): each
    rollout's session then starts its own server process on fresh copies, deleted when the
    rollout ends.

    Why a context variable and not LangChain's run ids: a tool's callback config does not
    carry the root run id (only its own and its parent's), so the root run cannot be found
    from inside a tool without hooking every run. A context variable set around
    ``graph.ainvoke`` reaches every tool task the graph starts, costs nothing, and states the
    rollout's extent where the reader can see it.

    With a *cassette* (:class:`mcp_tools.Cassette`), every MCP call in the block is recorded
    there or replayed from it, in place of the tools' own cassette: give each group of rollouts
    (one scenario's) one cassette so identical calls in the group get identical answers. A
    replayed call does not open the session, so a fully replayed rollout starts no server.

    Example::

        tools = await mcp_tools.load_tools("python -m mcp_tools.servers.notes")
        graph = create_react_agent(model, tools)
        async with mcp_tools.rollout():
            await graph.ainvoke({"messages": [...]}, config={"callbacks": [handler]})
    """
    scope = RolloutScope(rollout_id, cassette=cassette)
    token = _CURRENT.set(scope)
    try:
        yield scope
    finally:
        _CURRENT.reset(token)
        await asyncio.shield(scope.aclose())
