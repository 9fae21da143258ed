"""``TrajectoryRecorder``: run events keyed by ``run_id`` / ``parent_run_id`` in, trajectories out.

It knows nothing about LangChain (its inputs are run ids, OpenAI-format messages and plain values), so
the LangChain callback handler (:mod:`.langchain`) stays a thin translation and the bookkeeping is
tested on its own.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar, Union

from art_adapters._capture.assembly import ModelCall, assemble, model_name
from art_adapters._errors import ConfigError
from art_adapters._trajectory import Message, ToolCallRecord, ToolSchema, Trajectory

__all__ = ["TrajectoryRecorder"]

logger = logging.getLogger(__name__)

RunId = Hashable
T = TypeVar("T")
#: A value, or a zero-argument callable that produces it when the trajectory is assembled.
Deferred = Union[T, Callable[[], T]]  # noqa: UP007 - a generic alias needs Union


def _value(value: Any) -> Any:
    return value() if callable(value) else value


@dataclass
class _PendingCall:
    messages: Deferred[Sequence[Message]]
    tools: Deferred[list[ToolSchema] | None]
    output: Deferred[Message | None] = None
    usage: Deferred[dict[str, int] | None] = None
    requested_model: Deferred[str | None] = None
    response_model: Deferred[str | None] = None
    error: str | None = None
    ended: bool = False

    def resolve(self) -> ModelCall:
        return ModelCall(
            messages=list(_value(self.messages)),
            tools=_value(self.tools),
            output=_value(self.output),
            usage=dict(_value(self.usage) or {}),
            error=self.error,
            model=model_name(_value(self.response_model), _value(self.requested_model)),
        )


@dataclass
class _ToolRun:
    record: ToolCallRecord
    started: float


@dataclass
class _Root:
    run_id: RunId
    name: str | None
    started_at: datetime
    metadata: dict[str, Any]
    runs: set[RunId] = field(default_factory=set)
    model_calls: dict[RunId, _PendingCall] = field(default_factory=dict)  # insertion order = start order
    tool_records: list[ToolCallRecord] = field(default_factory=list)
    tool_runs: dict[RunId, _ToolRun] = field(default_factory=dict)
    mcp_replaced: set[RunId] = field(default_factory=set)
    error: str | None = None
    finished_at: datetime | None = None


class TrajectoryRecorder:
    """Collects run events into one :class:`~art_adapters._trajectory.Trajectory` per root run.

    Its inputs are run ids (any hashable), OpenAI-format
    :class:`~art_adapters._trajectory.Message`\\ s and plain values. Its rules:

    * A run with no parent (or whose parent was never seen) is a *root*: each root run
      becomes one trajectory, assembled by :func:`.assembly.assemble` when the root ends
      (normally or with an error, which is kept in ``Trajectory.error``).
    * Every other run belongs to its parent's root, so concurrent roots sharing one
      recorder never mix, and nested runs (subgraphs, nodes, tools) land in their root.
    * Model calls and tool executions are kept in the order they started.
    * An MCP record (from ``mcp_tools``) reported inside a tool run (or from elsewhere in
      the root, carrying that run's ``tool_call_id``) replaces the tool run's own record,
      keeping its ``tool_call_id``: it knows the server, the session and ``isError``.
      Otherwise it is appended.

    All methods are thread-safe (LangGraph runs sync tool calls on a thread pool) and never
    raise on unknown or repeated run ids: capture must never break the captured run.

    Cheap on the run's hot path: a model call's ``messages``, ``tools``, ``output``,
    ``usage`` and ``model`` may each be given as a zero-argument callable producing the value; it is
    called when the trajectory is assembled, and assembly itself happens when a trajectory
    is first read (or at once when ``on_trajectory`` is set). So a run pays for a few dict
    operations per event, and converting and assembling happen off its critical path.

    Args:
        on_trajectory: called with each finished trajectory (on the thread that ended
            the root run); an exception it raises is logged and otherwise ignored.
        max_finished: keep at most this many finished trajectories (oldest dropped
            first); ``None`` keeps all. Use :meth:`pop_trajectories` to drain.

    Raises:
        ConfigError: ``on_trajectory`` is not callable, or ``max_finished`` is not positive.
    """

    def __init__(
        self,
        *,
        on_trajectory: Callable[[Trajectory], object] | None = None,
        max_finished: int | None = None,
    ) -> None:
        if on_trajectory is not None and not callable(on_trajectory):
            raise ConfigError(f"on_trajectory must be callable, got {type(on_trajectory).__name__}")
        if max_finished is not None and (
            isinstance(max_finished, bool) or not isinstance(max_finished, int) or max_finished <= 0
        ):
            raise ConfigError(f"max_finished must be a positive int or None, got {max_finished!r}")
        self._on_trajectory = on_trajectory
        self._max_finished = max_finished
        self._lock = threading.RLock()
        self._root_of: dict[RunId, RunId] = {}
        self._roots: dict[RunId, _Root] = {}
        self._finished: list[Trajectory | _Root] = []  # a _Root is assembled when first read

    # -- results --

    @property
    def trajectories(self) -> list[Trajectory]:
        """Finished trajectories, in the order their root runs ended."""
        with self._lock:
            return [self._built(i) for i in range(len(self._finished))]

    @property
    def trajectory(self) -> Trajectory | None:
        """The trajectory of the root run that ended last, or ``None``."""
        with self._lock:
            return self._built(len(self._finished) - 1) if self._finished else None

    @property
    def active_runs(self) -> int:
        """Root runs started and not yet ended."""
        with self._lock:
            return len(self._roots)

    def pop_trajectories(self) -> list[Trajectory]:
        """Return the finished trajectories and forget them."""
        with self._lock:
            taken = [self._built(i) for i in range(len(self._finished))]
            self._finished = []
        return taken

    # -- events --

    def start_run(
        self,
        run_id: RunId,
        parent_run_id: RunId | None,
        *,
        name: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        """A run (chain, graph, node, retriever...) started."""
        with self._lock:
            self._attach(run_id, parent_run_id, name=name, metadata=metadata)

    def end_run(self, run_id: RunId, *, error: str | None = None) -> None:
        """A run ended; when it is a root, its trajectory is complete (``error``: how it failed)."""
        with self._lock:
            root = self._roots.pop(run_id, None)
            if root is None:
                return
            for child in root.runs:
                self._root_of.pop(child, None)
            root.error = error
            root.finished_at = datetime.now(UTC)
            self._finished.append(root)
            if self._max_finished is not None and len(self._finished) > self._max_finished:
                del self._finished[0]
            trajectory = self._built(len(self._finished) - 1) if self._on_trajectory is not None else None
        if trajectory is not None and self._on_trajectory is not None:
            try:
                self._on_trajectory(trajectory)
            except Exception:
                logger.exception("TrajectoryRecorder: on_trajectory callback raised; ignored")

    def start_model_call(
        self,
        run_id: RunId,
        parent_run_id: RunId | None,
        messages: Deferred[Sequence[Message]],
        *,
        tools: Deferred[list[ToolSchema] | None] = None,
        name: str | None = None,
        model: Deferred[str | None] = None,
    ) -> None:
        """A chat-model call started with these input messages and tools (each may be deferred).

        ``model`` is the model name the call asked for (used when its response names none).
        """
        with self._lock:
            root = self._attach(run_id, parent_run_id, name=name)
            root.model_calls[run_id] = _PendingCall(messages=messages, tools=tools, requested_model=model)

    def end_model_call(
        self,
        run_id: RunId,
        output: Deferred[Message | None],
        *,
        usage: Deferred[dict[str, int] | None] = None,
        model: Deferred[str | None] = None,
        error: str | None = None,
    ) -> None:
        """A chat-model call ended with ``output`` (or failed with ``error``).

        ``model`` is the model name the response reported. Output, usage and model may be deferred.
        """
        with self._lock:
            root = self._root(run_id)
            call = root.model_calls.get(run_id) if root is not None else None
            if call is not None:
                call.output = output
                call.usage = usage
                call.response_model = model
                call.error = error
                call.ended = True
        self._end_if_root(run_id, error)

    def start_tool(
        self,
        run_id: RunId,
        parent_run_id: RunId | None,
        *,
        name: str,
        arguments: dict[str, Any] | str | None,
        call_id: str | None = None,
        server: str | None = None,
    ) -> None:
        """A tool execution started (``server``: the MCP server, when the tool says which)."""
        with self._lock:
            root = self._attach(run_id, parent_run_id, name=name)
            record = ToolCallRecord(
                name=name,
                call_id=call_id,
                arguments=arguments,
                server=server,
                source="langchain",
                started_at=datetime.now(UTC),
            )
            root.tool_runs[run_id] = _ToolRun(record=record, started=time.perf_counter())
            root.tool_records.append(record)

    def end_tool(
        self,
        run_id: RunId,
        *,
        result: str | None = None,
        is_error: bool = False,
        error: str | None = None,
        call_id: str | None = None,
    ) -> None:
        """A tool execution ended with ``result`` (``is_error``: a handled tool error) or raised ``error``."""
        with self._lock:
            root = self._root(run_id)
            tool_run = root.tool_runs.get(run_id) if root is not None else None
            if root is not None and tool_run is not None and run_id not in root.mcp_replaced:
                record = tool_run.record
                record.result = result
                record.is_error = is_error or error is not None
                record.error = error
                record.duration_s = time.perf_counter() - tool_run.started
                if call_id and not record.call_id:
                    record.call_id = call_id
        self._end_if_root(run_id, error)

    def add_tool_record(self, run_id: RunId | None, record: ToolCallRecord) -> None:
        """A tool record reported by the tool itself (an MCP ``tools/call``) from inside run ``run_id``."""
        with self._lock:
            root = self._root(run_id) if run_id is not None else None
            if root is None:
                logger.debug("tool record %r outside any known run; dropped", record.name)
                return
            replaced_id: RunId | None = run_id
            tool_run = root.tool_runs.get(run_id)
            if tool_run is None and record.call_id:  # reported from the tool's parent: match by tool_call_id
                replaced_id, tool_run = next(
                    (
                        (rid, t)
                        for rid, t in root.tool_runs.items()
                        if t.record.call_id == record.call_id and rid not in root.mcp_replaced
                    ),
                    (None, None),
                )
            if tool_run is None or replaced_id in root.mcp_replaced:
                root.tool_records.append(record)
                return
            if record.call_id is None:
                record = record.model_copy(update={"call_id": tool_run.record.call_id})
            index = next(i for i, r in enumerate(root.tool_records) if r is tool_run.record)
            root.tool_records[index] = record
            root.mcp_replaced.add(replaced_id)

    # -- internals (called with the lock held) --

    def _root(self, run_id: RunId) -> _Root | None:
        root_id = self._root_of.get(run_id)
        return self._roots.get(root_id) if root_id is not None else None

    def _attach(
        self,
        run_id: RunId,
        parent_run_id: RunId | None,
        *,
        name: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> _Root:
        known = self._root(run_id)
        if known is not None:
            return known
        parent_root = self._root(parent_run_id) if parent_run_id is not None else None
        if parent_root is None:
            if parent_run_id is not None:
                logger.debug(
                    "run %s has an unknown parent %s; recording it as a root run", run_id, parent_run_id
                )
            parent_root = _Root(
                run_id=run_id, name=name, started_at=datetime.now(UTC), metadata=dict(metadata or {})
            )
            self._roots[run_id] = parent_root
        parent_root.runs.add(run_id)
        self._root_of[run_id] = parent_root.run_id
        return parent_root

    def _end_if_root(self, run_id: RunId, error: str | None) -> None:
        if run_id in self._roots:
            self.end_run(run_id, error=error)

    def _built(self, index: int) -> Trajectory:
        item = self._finished[index]
        if isinstance(item, _Root):
            item = self._finished[index] = self._build(item)
        return item

    def _build(self, root: _Root) -> Trajectory:
        metadata: dict[str, Any] = {"capture": "langchain", "run_id": str(root.run_id)}
        if root.name:
            metadata["root_run"] = root.name
        # the root's config metadata (scenario ids and the like); only JSON scalars are kept
        metadata.update({k: v for k, v in root.metadata.items() if isinstance(v, str | int | float | bool)})
        pending = list(root.model_calls.values())
        calls = []
        for call in pending:
            try:
                calls.append(call.resolve())
            except Exception as exc:  # a converter failed on odd input: keep the rest of the run
                logger.warning("TrajectoryRecorder: could not convert a model call; skipped", exc_info=True)
                calls.append(ModelCall(messages=[], error=f"capture could not convert this call: {exc!r}"))
        trajectory = assemble(
            calls,
            root.tool_records,
            metadata=metadata,
            started_at=root.started_at,
            finished_at=root.finished_at,
            error=root.error,
        )
        running = sum(1 for call in pending if not call.ended)
        if running:
            trajectory.logs.append(f"{running} model call(s) had not finished when the run ended")
        return trajectory
