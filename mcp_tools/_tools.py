"""MCP tools as LangChain tools whose every ``tools/call`` is captured.

Each call records itself (an OTel span and a LangChain custom event the trajectory handler reads), so a
rollout's MCP calls land in its trajectory with server, session and ``isError``.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Any

from langchain_core.callbacks import adispatch_custom_event
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import StructuredTool, ToolException

from art_adapters import TOOL_RECORD_EVENT, ConfigError, ToolCallRecord, ToolServerError, mcp_tool_record
from mcp_tools._cassette import Cassette, CassetteCall, replay_result
from mcp_tools._rollout import current_scope
from mcp_tools._telemetry import record_outcome, tool_call_attributes, tool_call_span

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

    from mcp_tools._cassette import CallSlot
    from mcp_tools._config import McpClientConfig
    from mcp_tools._rollout import RolloutScope
    from mcp_tools._session import McpSession

logger = logging.getLogger(__name__)

__all__ = ["TOOL_RECORD_EVENT", "McpTool", "build_tools", "is_error_result", "result_text"]


_CALL_ID_KWARG = "__mcp_tool_call_id"

SessionResolver = Callable[[], Awaitable["McpSession"]]


def result_text(result: dict[str, Any]) -> str:
    """An MCP ``CallToolResult`` (wire form) as the text a model reads."""
    parts: list[str] = []
    for block in result.get("content") or []:
        kind = block.get("type")
        if kind == "text":
            parts.append(str(block.get("text", "")))
        elif kind == "resource":
            resource = block.get("resource") or {}
            parts.append(str(resource.get("text") or f"[resource {resource.get('uri', '')}]"))
        elif kind in {"image", "audio"}:
            parts.append(f"[{kind} {block.get('mimeType', '')}]")
        else:
            parts.append(json.dumps(block, ensure_ascii=False))
    if not parts and result.get("structuredContent") is not None:
        parts.append(json.dumps(result["structuredContent"], ensure_ascii=False))
    return "\n".join(parts)


#: A result text that reports an error without ``isError`` (as mcp-server-sqlite answers): its first
#: line starts with "Error", "Exception" or "Traceback", with a word ending in "Error:" ("ValueError:"),
#: or with up to two words and then "error:" ("Database error: no such table").
_ERROR_TEXT = re.compile(
    r"\A\s*(?:(?:error|exception)\b|[\w.]*(?:error|exception)\s*:|traceback \(most recent call last\)"
    r"|(?:[\w.-]+\s+){1,2}(?:error|exception)\s*:)",
    re.IGNORECASE,
)


def is_error_result(result: dict[str, Any]) -> bool:
    """Whether an MCP ``CallToolResult`` (wire form) is an error: ``isError``, or a text that says so.

    Some servers return a failure as a plain text result without ``isError`` (mcp-server-sqlite:
    "Database error: ..."); such a text counts too when its first line starts with "Error",
    "Exception" or "Traceback (most recent call last)", with a word ending in "Error:" or
    "Exception:" ("ValueError: ..."), or with at most two words followed by "error:" or
    "exception:". A result that merely mentions an error later is not one.
    """
    return bool(result.get("isError")) or _ERROR_TEXT.match(result_text(result)) is not None


class McpTool(StructuredTool):
    """A LangChain tool that calls one tool of one MCP server.

    Each call:

    1. finds its session (the bound :class:`McpSession`, or the current rollout's);
    2. sends ``tools/call`` inside an OTel span ``tools/call <tool>``;
    3. dispatches a LangChain custom event (:data:`TOOL_RECORD_EVENT`) whose data is a
       :class:`art_adapters.ToolCallRecord` as JSON (read from the span's attributes by
       :func:`art_adapters.mcp_tool_record`, as the span processor reads the span), so the trajectory
       callback handler records server, tool, arguments, result, ``isError``, duration
       and session id; the event goes out for failures too, before the error is raised;
    4. returns the result text; an error result (MCP ``isError``, or a plain-text error as
       :func:`is_error_result` detects it; the record says ``is_error``) becomes a :class:`ToolException`
       handled by the tool (the model sees the error text, the tool message has
       ``status="error"``); a crashed or hung server raises
       :class:`art_adapters.ToolServerError`, which ends the rollout.

    With a :class:`mcp_tools.Cassette` (the rollout's, else the one given to ``load_tools``), step 2
    first looks the call up there: a recorded call is answered from the cassette without touching
    the server, and its record says ``replayed=True`` (the span: ``mcp_tools.replayed``).

    ``args_schema`` is the MCP tool's JSON schema. ``metadata`` holds ``mcp_server`` and
    ``mcp_tool`` (the name on the server, which differs from ``name`` when prefixed).
    Async only: MCP I/O is async, so ``invoke`` raises a :class:`ConfigError`.
    """

    def _to_args_and_kwargs(
        self, tool_input: str | dict[str, Any], tool_call_id: str | None
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        # The model's tool_call_id is not passed to tools with a JSON-schema args_schema; keep it for the span.
        args, kwargs = super()._to_args_and_kwargs(tool_input, tool_call_id)
        kwargs[_CALL_ID_KWARG] = tool_call_id
        return args, kwargs


def _sync_unsupported(*_args: Any, **_kwargs: Any) -> Any:
    raise ConfigError("MCP tools are async only: call them with ainvoke / astream (e.g. graph.ainvoke)")


async def _dispatch_record(record: ToolCallRecord, config: RunnableConfig | None, callbacks: Any) -> None:
    # `callbacks` is the tool run's child manager: dispatched through it, the event names the tool run as
    # its parent, so the handler puts the record in place of that run's own (the config's managers are the
    # tool node's, shared by parallel calls).
    if callbacks is not None:
        config = {**(config or {}), "callbacks": callbacks}
    try:
        await adispatch_custom_event(TOOL_RECORD_EVENT, record.model_dump(mode="json"), config=config)
    except RuntimeError:  # called outside any LangChain run: nobody to tell
        logger.debug("no LangChain run to attach the MCP tool record to")


@dataclass
class _CallState:
    """One call under way: the attributes its span and record carry, and where its answer comes from."""

    attributes: dict[str, Any]
    scope: RolloutScope | None
    cassette: Cassette | None
    started_at: datetime
    start: float
    replayed: bool = False

    def record(self, error: str | None = None) -> ToolCallRecord:
        """The call's record, read from its span's attributes (as the span processor reads the span).

        A call through a cassette says whether its result came from the cassette (``replayed``) or not.
        """
        duration_s = time.perf_counter() - self.start
        record = mcp_tool_record(
            self.attributes, error=error, duration_s=duration_s, started_at=self.started_at
        )
        if self.cassette is None:
            return record
        return record.model_copy(update={"replayed": self.replayed})

    def cassette_entry(self, slot: CallSlot, start: float, **outcome: Any) -> CassetteCall:
        """The cassette line for this call's live answer (``result=``) or failure (``error=``)."""
        return CassetteCall(
            server=slot.server,
            tool=slot.tool,
            arguments=json.loads(slot.arguments),
            occurrence=slot.occurrence,
            duration_s=time.perf_counter() - start,
            started_at=self.started_at,
            rollout_id=self.scope.id if self.scope is not None else None,
            **outcome,
        )


@dataclass(frozen=True)
class _McpCall:
    """How one :class:`McpTool` calls its MCP tool: live, live and recorded in a cassette, or replayed.

    :meth:`run` is the tool's coroutine; each path is one method (:meth:`live`, :meth:`record`,
    :meth:`replay`) and every path answers inside :meth:`traced`'s span.

    Attributes:
        server: the MCP server's name (in records, spans and cassette lines).
        tool: the tool's name on the server (without any ``<server>_`` prefix).
        resolve: finds the session to call through (the bound one, or the current rollout's).
        config: the client options (``call_timeout_s``).
        tracer_provider: where the ``tools/call`` spans go (``None``: the global provider).
        cassette: the cassette given to ``load_tools``; a rollout's own cassette overrides it.
        server_tools: the server's tool list, recorded in a recording cassette that lacks it.
    """

    server: str
    tool: str
    resolve: SessionResolver
    config: McpClientConfig
    tracer_provider: TracerProvider | None
    cassette: Cassette | None
    server_tools: list[dict[str, Any]] | None

    async def run(self, config_: RunnableConfig, callbacks: Any = None, **kwargs: Any) -> str:
        """Call the tool with *kwargs* and dispatch its record (for failures too, before raising).

        Raises:
            ToolException: the result is an error (the model reads its text).
            ToolServerError: the server crashed, hung or refused the call (live or as recorded).
        """
        state = self._begin(kwargs.pop(_CALL_ID_KWARG, None), kwargs)
        try:
            result = await self._answer(state, kwargs)
            text, is_error = result_text(result), is_error_result(result)
        except ToolServerError as exc:
            await _dispatch_record(state.record(error=f"{type(exc).__name__}: {exc}"), config_, callbacks)
            raise
        await _dispatch_record(state.record(), config_, callbacks)
        if is_error:
            raise ToolException(text)
        return text

    def _begin(self, call_id: str | None, arguments: dict[str, Any]) -> _CallState:
        started_at = datetime.now(UTC)
        start = time.perf_counter()
        attributes = tool_call_attributes(
            self.tool, server=self.server, session_id=None, call_id=call_id, arguments=arguments
        )
        scope = current_scope()
        cassette = scope.cassette if scope is not None and scope.cassette is not None else self.cassette
        return _CallState(attributes, scope, cassette, started_at, start)

    async def _answer(self, state: _CallState, arguments: dict[str, Any]) -> dict[str, Any]:
        """The result from the server, or from the cassette when it holds this call."""
        cassette = state.cassette
        if cassette is None:
            return await self.live(arguments, state.attributes)
        slot = cassette.slot(state.scope, self.server, self.tool, arguments)
        recorded = await cassette.claim(slot)
        state.replayed = recorded is not None
        state.attributes["mcp_tools.replayed"] = state.replayed
        if recorded is not None:
            return await self.replay(recorded, cassette, state.attributes)
        return await self.record(cassette, slot, state, arguments)

    async def live(self, arguments: dict[str, Any], attributes: dict[str, Any]) -> dict[str, Any]:
        """Send ``tools/call`` to the server through the resolved session."""
        session = await self.resolve()
        connection = session.connection(self.server)
        if connection.session_id:
            attributes["mcp.session.id"] = connection.session_id
        timeout_s = self.config.call_timeout_s
        return await self.traced(attributes, partial(connection.call_tool, self.tool, arguments, timeout_s))

    async def record(
        self, cassette: Cassette, slot: CallSlot, state: _CallState, arguments: dict[str, Any]
    ) -> dict[str, Any]:
        """Call the server for a claimed *slot* and store the answer, or the failure, in *cassette*."""
        # This call owns the slot: its live answer, or its failure during the call (a crash, a timeout,
        # a refusal), is stored for every identical call. A server that cannot be started answered
        # nothing: the slot is released, and a waiting identical call tries the server itself.
        start = time.perf_counter()
        stored = False
        try:
            await self.resolve()
            try:
                result = await self.live(arguments, state.attributes)
            except ToolServerError as exc:
                entry = state.cassette_entry(slot, start, error=str(exc))
                stored = True
                await cassette.store(slot, entry)
                raise
            if self.server_tools is not None and cassette.tools(self.server) is None:
                await cassette.record_tools(self.server, self.server_tools)
            stored = True
            await cassette.store(slot, state.cassette_entry(slot, start, result=result))
            return result
        finally:
            if not stored:  # cancelled or failed otherwise: a waiting identical call takes the slot over
                cassette.release(slot)

    async def replay(
        self, recorded: CassetteCall, cassette: Cassette, attributes: dict[str, Any]
    ) -> dict[str, Any]:
        """The recorded answer, in a span like a live call's (a recorded failure raised again)."""
        return await self.traced(attributes, partial(_replayed, recorded, cassette))

    async def traced(
        self, attributes: dict[str, Any], answer: Callable[[], Awaitable[dict[str, Any]]]
    ) -> dict[str, Any]:
        """Await *answer* inside the ``tools/call`` span, and put its result or failure on the span and
        in *attributes*."""
        with tool_call_span(self.tool, attributes, tracer_provider=self.tracer_provider) as span:
            try:
                result = await answer()
            except ToolServerError as exc:
                error_type = type(exc).__name__
                attributes.update(record_outcome(span, result=None, is_error=True, error_type=error_type))
                raise
            attributes.update(
                record_outcome(span, result=result_text(result), is_error=is_error_result(result))
            )
        return result


async def _replayed(recorded: CassetteCall, cassette: Cassette) -> dict[str, Any]:
    return replay_result(recorded, cassette)


def _tool_names(listing: dict[str, list[dict[str, Any]]], prefix: bool | None) -> dict[tuple[str, str], str]:
    owners: dict[str, list[str]] = {}
    for server, tools in listing.items():
        for tool in tools:
            owners.setdefault(tool["name"], []).append(server)
    shared = {name: servers for name, servers in owners.items() if len(servers) > 1}
    if shared and prefix is False:
        raise ConfigError(
            f"tool names offered by several servers: {shared}; pass tool_name_prefix=True or None to prefix them"
        )
    names: dict[tuple[str, str], str] = {}
    for server, tools in listing.items():
        for tool in tools:
            wanted = prefix is True or (prefix is None and tool["name"] in shared)
            names[(server, tool["name"])] = f"{server}_{tool['name']}" if wanted else tool["name"]
    return names


def build_tools(
    listing: dict[str, list[dict[str, Any]]],
    *,
    resolve: SessionResolver,
    config: McpClientConfig,
    tracer_provider: TracerProvider | None = None,
    cassette: Cassette | None = None,
) -> list[McpTool]:
    """Make one :class:`McpTool` per MCP tool of every server in *listing* (``{server: [tool wire dicts]}``).

    With a *cassette*, each call is looked up there first (see :class:`mcp_tools.Cassette`); a
    :func:`mcp_tools.rollout` with its own cassette overrides it for the calls made inside it.
    """
    names = _tool_names(listing, config.tool_name_prefix)
    tools: list[McpTool] = []
    for server, server_tools in listing.items():
        for tool in server_tools:
            schema = dict(tool.get("inputSchema") or {"type": "object", "properties": {}})
            schema.setdefault("properties", {})
            tools.append(
                McpTool(
                    name=names[(server, tool["name"])],
                    description=tool.get("description") or tool.get("title") or tool["name"],
                    args_schema=schema,
                    coroutine=_McpCall(
                        server=server,
                        tool=tool["name"],
                        resolve=resolve,
                        config=config,
                        tracer_provider=tracer_provider,
                        cassette=cassette,
                        server_tools=server_tools,
                    ).run,
                    func=_sync_unsupported,
                    handle_tool_error=True,
                    metadata={"mcp_server": server, "mcp_tool": tool["name"]},
                )
            )
    return tools
