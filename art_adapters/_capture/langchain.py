"""``TrajectoryCallbackHandler``: a LangChain callback handler that records each root run as a trajectory.

Passed in the config of any LangGraph graph or LangChain runnable, it captures the run without changing
the graph; it only translates LangChain's callbacks into :class:`.recorder.TrajectoryRecorder` calls.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler

from art_adapters._capture.events import TOOL_RECORD_EVENT
from art_adapters._capture.langchain_convert import (
    ToolsCache,
    convert_messages,
    error_text,
    output_message,
    output_model,
    output_usage,
    requested_model,
    tool_output,
)
from art_adapters._capture.recorder import TrajectoryRecorder
from art_adapters._errors import ConfigError
from art_adapters._trajectory import Message, ToolCallRecord

if TYPE_CHECKING:
    from langchain_core.messages import BaseMessage
    from langchain_core.outputs import LLMResult

    from art_adapters._trajectory import Trajectory

__all__ = ["TOOL_RECORD_EVENT", "TrajectoryCallbackHandler", "mcp_server_name"]

logger = logging.getLogger(__name__)


def mcp_server_name(metadata: Any) -> str | None:
    """The MCP server a LangChain tool's run metadata names: ``{"mcp": {"server": {"name": ...}}}``,
    as ``langchain.mcp`` tools carry it (the server's ``serverInfo``); ``None`` for other tools."""
    mcp = metadata.get("mcp") if isinstance(metadata, Mapping) else None
    server = mcp.get("server") if isinstance(mcp, Mapping) else None
    name = server.get("name") if isinstance(server, Mapping) else None
    return name if isinstance(name, str) and name else None


def _name(serialized: Mapping[str, Any] | None, kwargs: Mapping[str, Any]) -> str | None:
    name = kwargs.get("name")
    if isinstance(name, str) and name:
        return name
    if isinstance(serialized, Mapping):
        if isinstance(serialized.get("name"), str):
            return serialized["name"]
        ids = serialized.get("id")
        if isinstance(ids, list) and ids:
            return str(ids[-1])
    return None


class TrajectoryCallbackHandler(BaseCallbackHandler):
    """Records every root run it sees as one :class:`~art_adapters._trajectory.Trajectory`.

    Pass it in the config of any LangGraph graph or LangChain runnable; nothing in the
    graph changes::

        handler = aa.TrajectoryCallbackHandler()
        await graph.ainvoke(inputs, config={"callbacks": [handler]})   # or invoke / astream / astream_events
        trajectory = handler.trajectory                                  # the run that ended last
        everything = handler.trajectories                                # one per root run

    Sync and async: the handler is a plain ``BaseCallbackHandler`` with ``run_inline =
    True``, which LangChain calls directly on both paths (``invoke`` on the caller's or a
    worker thread, ``ainvoke`` inline on the event loop: no executor hop, so events keep
    their order). It only translates events into calls on a
    :class:`~art_adapters._capture.recorder.TrajectoryRecorder`, keyed by ``run_id`` /
    ``parent_run_id``; the recorder does the bookkeeping (thread-safe) and the assembly.
    Message conversion and assembly are deferred until a trajectory is read, so the
    captured run only pays for bookkeeping (see ``bench/capture.py``).

    What is recorded: every chat-model call's input messages (OpenAI format) and the tools
    bound to it, its output (content, tool calls, the provider's completion id, token
    usage, the model's name: the response's, else the requested one), every tool's result
    or error, and the MCP ``tools/call`` records that :mod:`mcp_tools` reports as the custom
    event :data:`TOOL_RECORD_EVENT`. Callback errors are logged by LangChain and never break
    the run (``raise_error = False``).

    Args:
        on_trajectory: called with each finished trajectory, on the thread that ended
            the root run; an exception it raises is logged and ignored.
        max_finished: keep at most this many finished trajectories (``None``: all).
        recorder: record into this :class:`TrajectoryRecorder` instead of a new one.

    Raises:
        ConfigError: an argument is invalid.
    """

    run_inline = True
    raise_error = False

    def __init__(
        self,
        *,
        on_trajectory: Callable[[Trajectory], object] | None = None,
        max_finished: int | None = None,
        recorder: TrajectoryRecorder | None = None,
    ) -> None:
        super().__init__()
        if recorder is not None and (on_trajectory is not None or max_finished is not None):
            raise ConfigError("pass on_trajectory / max_finished to the recorder, not beside recorder=")
        self.recorder = recorder or TrajectoryRecorder(on_trajectory=on_trajectory, max_finished=max_finished)
        self._tools = ToolsCache()  # called at assembly time, under the recorder's lock

    # -- results --

    @property
    def trajectories(self) -> list[Trajectory]:
        """One trajectory per finished root run, in the order the runs ended."""
        return self.recorder.trajectories

    @property
    def trajectory(self) -> Trajectory | None:
        """The trajectory of the root run that ended last (``None`` before any)."""
        return self.recorder.trajectory

    def pop_trajectories(self) -> list[Trajectory]:
        """Return the finished trajectories and forget them (for long-running collection)."""
        return self.recorder.pop_trajectories()

    # -- chains, graphs, nodes, retrievers: only their place in the run tree matters --

    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """A chain, graph or node started."""
        self.recorder.start_run(
            run_id,
            parent_run_id,
            name=_name(serialized, kwargs),
            metadata=metadata if parent_run_id is None else None,
        )

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        """A chain ended; a root run's trajectory is assembled."""
        self.recorder.end_run(run_id)

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        """A chain raised; a root run's trajectory is kept, with the error."""
        self.recorder.end_run(run_id, error=error_text(error))

    def on_retriever_start(
        self,
        serialized: dict[str, Any],
        query: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """A retriever started (tracked for the run tree only)."""
        self.recorder.start_run(run_id, parent_run_id, name=_name(serialized, kwargs))

    def on_retriever_end(self, documents: Any, *, run_id: UUID, **kwargs: Any) -> None:
        """A retriever ended."""
        self.recorder.end_run(run_id)

    def on_retriever_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        """A retriever raised."""
        self.recorder.end_run(run_id, error=error_text(error))

    # -- model calls --

    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[BaseMessage]],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """A chat model was called: record its input messages and bound tools."""
        # Converted when the trajectory is assembled, off the run's hot path (the list is copied now).
        prompt = list(messages[0]) if messages else []
        self.recorder.start_model_call(
            run_id,
            parent_run_id,
            partial(convert_messages, prompt),
            tools=partial(self._tools, kwargs.get("invocation_params")),
            name=_name(serialized, kwargs),
            model=partial(requested_model, kwargs.get("invocation_params"), kwargs.get("metadata")),
        )

    def on_llm_start(
        self,
        serialized: dict[str, Any],
        prompts: list[str],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """A completion (non-chat) model was called: its prompt is recorded as one user message."""
        messages = [Message(role="user", content=prompts[0])] if prompts else []
        self.recorder.start_model_call(
            run_id,
            parent_run_id,
            messages,
            tools=partial(self._tools, kwargs.get("invocation_params")),
            model=partial(requested_model, kwargs.get("invocation_params"), kwargs.get("metadata")),
        )

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        """A model call returned (streamed calls too: LangChain hands over the merged message)."""
        self.recorder.end_model_call(
            run_id,
            partial(output_message, response),
            usage=partial(output_usage, response),
            model=partial(output_model, response),
        )

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        """A model call raised."""
        self.recorder.end_model_call(run_id, None, error=error_text(error))

    # -- tools --

    def on_tool_start(
        self,
        serialized: dict[str, Any],
        input_str: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        inputs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """A tool started: its name, arguments and the model's ``tool_call_id``; for a tool of
        ``langchain.mcp`` (whose metadata names its server under ``mcp.server``), the MCP server."""
        call_id = kwargs.get("tool_call_id")
        self.recorder.start_tool(
            run_id,
            parent_run_id,
            name=_name(serialized, kwargs) or "tool",
            arguments=dict(inputs) if isinstance(inputs, Mapping) else input_str,
            call_id=str(call_id) if call_id else None,
            server=mcp_server_name(kwargs.get("metadata")),
        )

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        """A tool returned (a ``ToolMessage`` with ``status="error"`` is a handled tool error)."""
        text, is_error, call_id = tool_output(output)
        self.recorder.end_tool(run_id, result=text, is_error=is_error, call_id=call_id)

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        """A tool raised."""
        call_id = kwargs.get("tool_call_id")
        self.recorder.end_tool(run_id, error=error_text(error), call_id=str(call_id) if call_id else None)

    # -- MCP records --

    def on_custom_event(self, name: str, data: Any, *, run_id: UUID, **kwargs: Any) -> None:
        """An MCP ``tools/call`` record from :mod:`mcp_tools`; other custom events are ignored."""
        if name != TOOL_RECORD_EVENT:
            return
        try:
            record = data if isinstance(data, ToolCallRecord) else ToolCallRecord.model_validate(data)
        except ValueError:
            logger.warning("malformed %s event ignored: %r", TOOL_RECORD_EVENT, data)
            return
        self.recorder.add_tool_record(run_id, record)
