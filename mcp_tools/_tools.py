"""MCP tools as LangChain tools whose every ``tools/call`` is captured.

Each call records itself (an OTel span and a LangChain custom event the trajectory handler reads), so a
rollout's MCP calls land in its trajectory with server, session and ``isError``.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from langchain_core.callbacks import adispatch_custom_event
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import StructuredTool, ToolException

from art_adapters import TOOL_RECORD_EVENT, ConfigError, ToolCallRecord, ToolServerError, mcp_tool_record
from mcp_tools._telemetry import record_outcome, tool_call_attributes, tool_call_span

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

    from mcp_tools._config import McpClientConfig
    from mcp_tools._session import McpSession

logger = logging.getLogger(__name__)

__all__ = ["TOOL_RECORD_EVENT", "McpTool", "build_tools", "result_text"]


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
    4. returns the result text; an MCP ``isError`` result becomes a :class:`ToolException`
       handled by the tool (the model sees the error text, the tool message has
       ``status="error"``); a crashed or hung server raises
       :class:`art_adapters.ToolServerError`, which ends the rollout.

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


def _make_call(
    server: str,
    mcp_name: str,
    resolve: SessionResolver,
    config: McpClientConfig,
    tracer_provider: TracerProvider | None,
) -> Callable[..., Awaitable[str]]:
    async def call(config_: RunnableConfig, callbacks: Any = None, **kwargs: Any) -> str:
        call_id = kwargs.pop(_CALL_ID_KWARG, None)
        started_at = datetime.now(UTC)
        start = time.perf_counter()
        # What the span carries; the record is read from it (as the span processor reads the span).
        attributes = tool_call_attributes(
            mcp_name, server=server, session_id=None, call_id=call_id, arguments=kwargs
        )
        text, is_error = "", False
        try:
            session = await resolve()
            connection = session.connection(server)
            if connection.session_id:
                attributes["mcp.session.id"] = connection.session_id
            with tool_call_span(mcp_name, attributes, tracer_provider=tracer_provider) as span:
                try:
                    result = await connection.call_tool(mcp_name, kwargs, config.call_timeout_s)
                except ToolServerError as exc:
                    error_type = type(exc).__name__
                    attributes.update(record_outcome(span, result=None, is_error=True, error_type=error_type))
                    raise
                text, is_error = result_text(result), bool(result.get("isError"))
                attributes.update(record_outcome(span, result=text, is_error=is_error))
        except ToolServerError as exc:
            record = mcp_tool_record(
                attributes,
                error=f"{type(exc).__name__}: {exc}",
                duration_s=time.perf_counter() - start,
                started_at=started_at,
            )
            await _dispatch_record(record, config_, callbacks)
            raise
        record = mcp_tool_record(attributes, duration_s=time.perf_counter() - start, started_at=started_at)
        await _dispatch_record(record, config_, callbacks)
        if is_error:
            raise ToolException(text)
        return text

    return call


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
) -> list[McpTool]:
    """Make one :class:`McpTool` per MCP tool of every server in *listing* (``{server: [tool wire dicts]}``)."""
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
                    coroutine=_make_call(server, tool["name"], resolve, config, tracer_provider),
                    func=_sync_unsupported,
                    handle_tool_error=True,
                    metadata={"mcp_server": server, "mcp_tool": tool["name"]},
                )
            )
    return tools
