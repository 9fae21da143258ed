"""One live MCP session with one server, owned by a dedicated asyncio task.

The SDK's transports must be entered and exited by the same task, but a rollout's tool calls come from
whatever task LangGraph runs them in; a dedicated task per connection makes that safe.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import tempfile
import uuid
from typing import Any

from art_adapters import ToolServerError
from mcp_tools import _compat
from mcp_tools._config import HttpServer, McpClientConfig, StdioServer

logger = logging.getLogger(__name__)

__all__ = ["ServerConnection"]

_STDERR_TAIL_CHARS = 1500

#: Servers (command line or URL) that refused the ``initialize`` handshake as 2026-07-28-only: their later
#: sessions go straight to ``server/discover``. The handshake comes first for every other server because
#: it gives a session, which per-rollout state isolation keys on; the stateless protocol has none.
_MODERN_ONLY: set[str] = set()


def root_cause(exc: BaseException) -> BaseException:
    """The first leaf of nested exception groups (anyio's task groups wrap a transport's failure twice)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _explain(failure: BaseException) -> str:
    closed = _compat.error_code(failure) == _compat.CONNECTION_CLOSED
    if isinstance(failure, _compat.McpProtocolError) and closed:
        return (
            "the server closed the connection during the MCP handshake (it exited or crashed at start; "
            "check the command and its stderr)"
        )
    if isinstance(failure, FileNotFoundError):
        return f"the command was not found ({failure}); check it is installed and on PATH"
    return f"{type(failure).__name__}: {failure}"


class ServerConnection:
    """A started MCP session with one server. Create with :meth:`open`, end with :meth:`aclose`.

    The SDK's transports and ``ClientSession`` are anyio context managers that must be
    entered and exited by the same task. A rollout's tool calls come from whatever task
    LangGraph runs the tool node in, and the rollout ends in yet another, so each
    connection runs in its own *runner* task: it opens the transport, does the
    handshake, then waits to be told to close. Calls from any task go through the
    session's streams, bounded by a per-call timeout, and a transport that dies makes
    pending and later calls fail at once with :class:`ToolServerError` instead of hanging.
    """

    def __init__(self, name: str, spec: StdioServer | HttpServer, config: McpClientConfig) -> None:
        self.name = name
        self.spec = spec
        self.config = config
        self.session_id: str | None = None
        self._session: Any = None
        self._ready = asyncio.Event()
        self._stop = asyncio.Event()
        self._done = asyncio.Event()
        self._failure: BaseException | None = None
        self._broken: str | None = None
        self._stderr = tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace")  # noqa: SIM115
        self._runner: asyncio.Task[None] | None = None
        self._get_session_id: Any = None

    @classmethod
    async def open(
        cls, name: str, spec: StdioServer | HttpServer, config: McpClientConfig
    ) -> ServerConnection:
        """Start the server (or connect to it) and finish the MCP handshake.

        Raises:
            ToolServerError: the server could not be started or reached within
                ``config.connect_timeout_s``.
        """
        connection = cls(name, spec, config)
        connection._runner = asyncio.get_running_loop().create_task(
            connection._run(), name=f"mcp-session-{name}"
        )
        try:
            await asyncio.wait_for(connection._ready.wait(), config.connect_timeout_s)
        except asyncio.CancelledError:
            # The caller gave up (a rollout's timeout, Ctrl-C): stop the half-started server too.
            await asyncio.shield(connection._abort())
            raise
        except TimeoutError:
            tail = connection.stderr_tail()  # read before closing: closing drops the file
            await connection._abort()  # still in the handshake: nothing would answer a polite close
            raise ToolServerError(
                f"MCP server {name!r} ({connection.describe()}) did not finish the handshake within "
                f"{config.connect_timeout_s:g}s; check that it starts, or raise connect_timeout_s.{tail}"
            ) from None
        if connection._failure is not None:
            failure = root_cause(connection._failure)
            tail = connection.stderr_tail()
            await connection.aclose()
            raise ToolServerError(
                f"could not {'start' if isinstance(connection.spec, StdioServer) else 'reach'} MCP server "
                f"{name!r} ({connection.describe()}): {_explain(failure)}{tail}"
            ) from failure
        return connection

    def describe(self) -> str:
        """The command line or URL, for messages."""
        if isinstance(self.spec, StdioServer):
            return " ".join([self.spec.command, *self.spec.args])
        return self.spec.url

    def stderr_tail(self) -> str:
        """The end of a stdio server's stderr, formatted for an error message ('' if empty)."""
        try:
            self._stderr.flush()
            self._stderr.seek(0)
            text = self._stderr.read()[-_STDERR_TAIL_CHARS:].strip()
        except (OSError, ValueError):
            return ""
        return f"\n--- server stderr (last lines) ---\n{text}" if text else ""

    async def _run(self) -> None:
        try:
            modern = self.describe() in _MODERN_ONLY
            while True:
                async with contextlib.AsyncExitStack() as stack:
                    session = await self._connect(stack)
                    try:
                        await _compat.negotiate(session, modern=modern)
                    except _compat.McpProtocolError as exc:
                        if modern or not self._refused_handshake(exc, session):
                            raise
                        # a 2026-07-28-only server: again on a fresh connection (the refused one may stay
                        # in the handshake era), and straight to server/discover for this server from now on
                        logger.info("MCP server %r refused the handshake (%s): 2026-07-28", self.name, exc)
                        _MODERN_ONLY.add(self.describe())
                        modern = True
                        continue
                    await self._serve(session)
                    return
        except Exception as exc:  # noqa: BLE001 - the transport or handshake failed: report to whoever waits
            self._failure = exc
            if self._ready.is_set():
                cause = root_cause(exc)
                logger.warning("MCP session with %r ended: %s: %s", self.name, type(cause).__name__, cause)
        finally:
            self._session = None
            self._done.set()
            self._ready.set()

    @staticmethod
    def _refused_handshake(exc: BaseException, session: Any) -> bool:
        unsupported = _compat.error_code(exc) == _compat.UNSUPPORTED_PROTOCOL_VERSION
        return unsupported and _compat.speaks_discover(session)

    async def _connect(self, stack: contextlib.AsyncExitStack) -> Any:
        """Open the transport and a ``ClientSession`` on it (not yet negotiated), closed with ``stack``."""
        if isinstance(self.spec, StdioServer):
            read, write = await stack.enter_async_context(
                _compat.open_stdio(
                    self.spec.command, self.spec.args,
                    env=self.spec.env, cwd=self.spec.cwd, errlog=self._stderr,
                )
            )
            self._get_session_id = None
        else:
            read, write, self._get_session_id = await stack.enter_async_context(
                _compat.open_streamable_http(
                    self.spec.url, headers=self.spec.headers, timeout_s=self.config.connect_timeout_s
                )
            )
        return await stack.enter_async_context(_compat.ClientSession(read, write))

    async def _serve(self, session: Any) -> None:
        """Hand the negotiated session out, then hold it open until :meth:`aclose`."""
        self._session = session
        # stdio has no protocol session id (nor has 2026-07-28); a local one still tells sessions apart
        protocol_id = self._get_session_id() if self._get_session_id else None
        self.session_id = protocol_id or f"local-{uuid.uuid4().hex}"
        self._ready.set()
        await self._stop.wait()

    async def _abort(self) -> None:
        """Cancel a runner still in its handshake (``_stop`` is not awaited there) and wait for it."""
        self._stop.set()
        if self._runner is not None and not self._runner.done():
            self._runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._runner
        self._stderr.close()

    async def aclose(self) -> None:
        """End the session (and stop a stdio server). Idempotent."""
        self._stop.set()
        if self._runner is not None and not self._runner.done():
            try:
                await asyncio.wait_for(asyncio.shield(self._runner), 10.0)
            except TimeoutError:
                logger.warning("MCP session with %r did not close within 10s; cancelling it", self.name)
                self._runner.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._runner
        self._stderr.close()

    @property
    def closed(self) -> bool:
        """Whether the session has ended (closed by us, or the transport died)."""
        return self._done.is_set() or self._broken is not None

    def _error(self, tool: str, what: str) -> ToolServerError:
        return ToolServerError(
            f"MCP server {self.name!r} ({self.describe()}), tool {tool!r}: {what}{self.stderr_tail()}"
        )

    async def _request(self, tool: str, make_call: Any, timeout_s: float) -> Any:
        if self._broken is not None:
            raise self._error(tool, f"the session is no longer usable ({self._broken}); start a new rollout")
        session = self._session
        if session is None:
            raise self._error(tool, "the session is closed; start a new rollout (or reopen the McpSession)")
        call = asyncio.ensure_future(make_call(session))
        ended = asyncio.ensure_future(self._done.wait())
        try:
            finished, _ = await asyncio.wait(
                {call, ended}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED
            )
        except asyncio.CancelledError:
            call.cancel()  # the caller gave up (a rollout's timeout): do not leave its request running
            raise
        finally:
            ended.cancel()
        if call in finished:
            try:
                return call.result()
            except _compat.McpProtocolError as exc:
                if _compat.error_code(exc) == _compat.CONNECTION_CLOSED:
                    self._broken = "the server closed the connection"
                    raise self._error(
                        tool, "the server closed the connection mid-call (it crashed or exited)"
                    ) from exc
                raise self._error(tool, f"the server refused the call: {exc}") from exc
            except (OSError, EOFError) as exc:
                self._broken = f"{type(exc).__name__}: {exc}"
                raise self._error(
                    tool, f"the connection failed mid-call: {type(exc).__name__}: {exc}"
                ) from exc
        call.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await call
        if ended in finished:
            self._broken = "the server connection ended"
            raise self._error(tool, "the server connection ended mid-call (it crashed or exited)")
        raise self._error(
            tool,
            f"no answer within {timeout_s:g}s (the server hung or the tool is slow); "
            "raise call_timeout_s if the tool is slow on purpose",
        )

    async def call_tool(
        self, tool: str, arguments: dict[str, Any], timeout_s: float | None = None
    ) -> dict[str, Any]:
        """Send ``tools/call``; returns the result's wire form (``content``, ``isError``, ...).

        Raises:
            ToolServerError: the server crashed, hung past the timeout, or rejected the request.
        """
        timeout = self.config.call_timeout_s if timeout_s is None else timeout_s

        async def call(session: Any) -> dict[str, Any]:
            return _compat.to_wire(await session.call_tool(tool, arguments))

        return await self._request(tool, call, timeout)

    async def list_tools(self) -> list[dict[str, Any]]:
        """All tools the server offers (every page), as wire-form dicts."""

        async def call(session: Any) -> list[dict[str, Any]]:
            tools: list[dict[str, Any]] = []
            cursor: str | None = None
            while True:
                params = _compat.list_params(cursor)
                page = await (
                    session.list_tools(params=params) if params is not None else session.list_tools()
                )
                wire = _compat.to_wire(page)
                tools.extend(wire.get("tools", []))
                cursor = wire.get("nextCursor")
                if not cursor:
                    return tools

        return await self._request("tools/list", call, self.config.connect_timeout_s)

    async def list_resources(self) -> list[dict[str, Any]]:
        """The server's resources (every page) as wire-form dicts; ``[]`` when it offers none."""

        async def call(session: Any) -> list[dict[str, Any]]:
            resources: list[dict[str, Any]] = []
            cursor: str | None = None
            while True:
                params = _compat.list_params(cursor)
                try:
                    page = await (
                        session.list_resources(params=params)
                        if params is not None
                        else session.list_resources()
                    )
                except _compat.McpProtocolError:  # no resources capability: method not found
                    return resources
                wire = _compat.to_wire(page)
                resources.extend(wire.get("resources", []))
                cursor = wire.get("nextCursor")
                if not cursor:
                    return resources

        return await self._request("resources/list", call, self.config.connect_timeout_s)

    async def read_resource(self, uri: str) -> str:
        """The text of a resource (text blocks joined; binary blocks as ``[blob mime]``)."""

        async def call(session: Any) -> str:
            wire = _compat.to_wire(await session.read_resource(uri))
            parts = []
            for block in wire.get("contents", []):
                parts.append(str(block["text"]) if "text" in block else f"[blob {block.get('mimeType', '')}]")
            return "\n".join(parts)

        return await self._request(f"resources/read {uri}", call, self.config.call_timeout_s)
