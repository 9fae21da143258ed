"""``TrajectorySpanProcessor``: an OpenTelemetry span processor that turns traces into trajectories.

Added to any ``TracerProvider`` beside the exporters, it builds one trajectory per trace on a worker
thread, so the traced code never waits on it.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from opentelemetry.sdk.trace import SpanProcessor

from art_adapters._capture.otel_trace import TraceState
from art_adapters._errors import ConfigError

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import ReadableSpan, Span

    from art_adapters._trajectory import Trajectory

__all__ = ["TrajectorySpanProcessor"]

logger = logging.getLogger(__name__)

#: Attribute keys whose presence marks a span as a model, tool or MCP call.
_MARKERS = frozenset(
    {
        "gen_ai.operation.name",
        "openinference.span.kind",
        "mcp.method.name",
        "gen_ai.input.messages",
        "gen_ai.system",
        "gen_ai.prompt.0.role",
        "langfuse.observation.type",
    }
)


class _Flush:
    """A marker put on the queue; the worker sets ``done`` when it reaches it."""

    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done = threading.Event()


_STOP = object()


class _Held:
    """An MCP-only trace held back, and the traces (open when it ended) that may hold its tool call."""

    __slots__ = ("open_traces", "root", "state")

    def __init__(self, state: TraceState, root: Any, open_traces: set[int]) -> None:
        self.state = state
        self.root = root
        self.open_traces = open_traces


class TrajectorySpanProcessor(SpanProcessor):
    """Assembles one :class:`~art_adapters._trajectory.Trajectory` per trace from GenAI spans.

    Add it to any ``TracerProvider`` beside your exporters::

        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))  # e.g. to Langfuse
        capture = aa.TrajectorySpanProcessor()
        provider.add_span_processor(capture)
        LangChainInstrumentor().instrument(tracer_provider=provider)  # or any GenAI instrumentation
        graph.invoke(...)
        trajectory = capture.trajectory

    Spans in the OTel GenAI conventions, the OpenInference conventions and MCP ``tools/call``
    spans are understood (see :mod:`.otel_genai`, :mod:`.otel_openinference`). One trajectory
    is assembled per trace, when the trace's local root span ends: a span with no parent, a
    remote parent, or a parent this provider never started (another provider's span). Runs
    that share a trace (concurrent local roots under one remote or foreign parent) get one
    trajectory each, holding the calls made under their own root.

    :meth:`on_end` runs on the thread that ended the span, so it only checks a few attribute
    keys and puts the span (or, for spans of no interest, a three-int parent link) on a capped
    queue; it never blocks, never raises, and never touches the span's data beyond that. A
    daemon worker thread parses spans and assembles trajectories.

    MCP ``tools/call`` spans made under a tool span that was never made current
    (OpenInference's) are kept with the graph's trace all the same, so that the MCP record
    (with server and session) replaces the tool span's record of the same call id
    (``gen_ai.tool.call.id``; for MCP spans without one, FastMCP's and the MCP SDK's: of the
    same tool, running when the MCP call started) instead of adding a second record or a
    one-call trajectory; an MCP span under another (the SDK's request span under FastMCP's or
    ``mcp_tools``') is the same call:

    - an MCP span whose parent is another provider's span, in a trace with spans of this
      provider still open, does not end that trace; it is merged there by call id;
    - an MCP span that starts a trace of its own while spans of other traces are open is
      held back by the worker (``on_end`` notes which traces: the tool span around the call
      is in one, and ends after it). The first of them to end with a tool call of the same
      id takes it in; once they have all ended without one (or at shutdown, or when more
      than ``max_pending_traces`` are held) it is emitted on its own.

    Reading :attr:`trajectories` first waits (bounded) for the worker to drain what was
    queued before the call, so a trajectory is there as soon as the run that produced it
    has returned.

    Args:
        on_trajectory: called with each finished trajectory, on the processor's worker
            thread; an exception it raises is logged and otherwise ignored.
        max_queue_size: spans waiting for the worker beyond this are dropped (counted in
            :attr:`dropped_spans`, warned once) rather than blocking the traced code.
        max_pending_traces: traces whose root has not ended yet; beyond this the oldest
            is assembled as it is (with a note in its ``logs``) to bound memory.
        keep_empty: also keep trajectories of traces that had no model or tool call
            (off by default, so unrelated traces on the same provider are ignored).
        read_timeout_s: how long reading :attr:`trajectories` waits for the worker.
        shutdown_timeout_s: how long :meth:`shutdown` waits for the worker to finish.

    Raises:
        ConfigError: a size or timeout is not positive.
    """

    def __init__(
        self,
        *,
        on_trajectory: Callable[[Trajectory], object] | None = None,
        max_queue_size: int = 100_000,
        max_pending_traces: int = 1_000,
        keep_empty: bool = False,
        read_timeout_s: float = 10.0,
        shutdown_timeout_s: float = 5.0,
    ) -> None:
        for name, value in (
            ("max_queue_size", max_queue_size),
            ("max_pending_traces", max_pending_traces),
            ("read_timeout_s", read_timeout_s),
            ("shutdown_timeout_s", shutdown_timeout_s),
        ):
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise ConfigError(f"TrajectorySpanProcessor: {name} must be a positive number, got {value!r}")
        if on_trajectory is not None and not callable(on_trajectory):
            raise ConfigError(
                f"TrajectorySpanProcessor: on_trajectory must be callable, got {type(on_trajectory).__name__}"
            )
        self._on_trajectory = on_trajectory
        self._max_queue_size = int(max_queue_size)
        self._max_pending = int(max_pending_traces)
        self._keep_empty = keep_empty
        self._read_timeout_s = float(read_timeout_s)
        self._shutdown_timeout_s = float(shutdown_timeout_s)
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._pending: dict[int, TraceState] = {}
        self._finished: list[Trajectory] = []
        self._by_trace: dict[int, Trajectory] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._dropped = 0
        self._open: dict[int, int] = {}  # span id -> trace id of spans started and not yet ended
        self._held: dict[int, _Held] = {}  # MCP-only traces waiting for the trace of their tool call
        self._worker = threading.Thread(target=self._run, name="art-adapters-span-capture", daemon=True)
        self._worker.start()

    # -- SpanProcessor interface (called by the SDK on the traced code's threads) --

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        """Remember that the span is open, so its children know their parent is local."""
        try:
            if self._closed:
                return
            context = span.context
            self._open[context.span_id] = context.trace_id
        except Exception:
            logger.debug("TrajectorySpanProcessor.on_start failed", exc_info=True)

    def on_end(self, span: ReadableSpan) -> None:
        """Queue the finished span for the worker; cheap, never blocks, never raises."""
        try:
            if self._closed:
                self._open.pop(span.context.span_id, None)
                return
            if self._queue.qsize() >= self._max_queue_size:
                self._open.pop(span.context.span_id, None)  # dropped, but no longer open either
                self._dropped += 1
                if self._dropped == 1:
                    logger.warning(
                        "TrajectorySpanProcessor: queue full (%d spans); dropping spans", self._max_queue_size
                    )
                return
            context = span.context
            self._open.pop(context.span_id, None)
            parent = span.parent
            # A local root: no parent, a parent from another process, or one this provider never started.
            is_root = parent is None or parent.is_remote or parent.span_id not in self._open
            attributes = span.attributes or ()
            if is_root or not _MARKERS.isdisjoint(attributes):
                open_traces = None
                if is_root and "mcp.method.name" in attributes:
                    open_traces = self._open_traces()
                    if open_traces is not None and context.trace_id in open_traces:
                        is_root, open_traces = False, None  # under another provider's span; its trace goes on
                self._queue.put((span, is_root, open_traces))
            else:
                self._queue.put((context.trace_id, context.span_id, parent.span_id))
        except Exception:  # a processor must never break the traced code or other processors
            logger.debug("TrajectorySpanProcessor.on_end failed", exc_info=True)

    def _open_traces(self) -> set[int] | None:
        """The traces with a span open now (an MCP span's tool span is in one), or ``None`` if unknown."""
        try:
            return set(self._open.values())  # copied in C: no other thread changes the dict meanwhile
        except RuntimeError:  # changed during the copy (free-threaded Python): treat the MCP span as it is
            return None

    def shutdown(self) -> None:
        """Stop the worker after it has handled what is queued; idempotent, waits at most ``shutdown_timeout_s``."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(_STOP)
        if threading.current_thread() is not self._worker:
            self._worker.join(self._shutdown_timeout_s)
            if self._worker.is_alive():
                logger.warning(
                    "TrajectorySpanProcessor: worker still busy after %.1fs at shutdown",
                    self._shutdown_timeout_s,
                )

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Wait until every span queued before this call is handled; ``False`` on timeout."""
        if threading.current_thread() is self._worker:
            return True  # called from on_trajectory: the worker cannot wait for itself
        if not self._worker.is_alive():
            return self._queue.empty()
        marker = _Flush()
        self._queue.put(marker)
        return marker.done.wait(max(0, timeout_millis) / 1000)

    # -- public API --

    @property
    def trajectories(self) -> list[Trajectory]:
        """Finished trajectories, in the order their traces ended (waits for queued spans first)."""
        self._sync()
        with self._lock:
            return list(self._finished)

    @property
    def trajectory(self) -> Trajectory | None:
        """The most recently finished trajectory, or ``None``."""
        self._sync()
        with self._lock:
            return self._finished[-1] if self._finished else None

    @property
    def dropped_spans(self) -> int:
        """Spans dropped because the queue was full."""
        return self._dropped

    def trajectory_for_trace(self, trace_id: int | str) -> Trajectory | None:
        """The trajectory of one trace (id as an int or 32 hex digits), or ``None`` if not finished.

        Raises:
            ConfigError: ``trace_id`` is neither an int nor a hex string.
        """
        if isinstance(trace_id, str):
            try:
                trace_id = int(trace_id, 16)
            except ValueError:
                raise ConfigError(f"trace_id must be an int or a hex string, got {trace_id!r}") from None
        elif isinstance(trace_id, bool) or not isinstance(trace_id, int):
            raise ConfigError(f"trace_id must be an int or a hex string, got {type(trace_id).__name__}")
        self._sync()
        with self._lock:
            return self._by_trace.get(trace_id)

    def pop_trajectories(self) -> list[Trajectory]:
        """Return the finished trajectories and forget them (for long-running collection)."""
        self._sync()
        with self._lock:
            taken, self._finished = self._finished, []
            self._by_trace.clear()
        return taken

    # -- worker side --

    def _sync(self) -> None:
        if not self.force_flush(int(self._read_timeout_s * 1000)):
            logger.warning("TrajectorySpanProcessor: spans still queued after %.1fs", self._read_timeout_s)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                try:
                    self._release_held(None)
                except Exception:
                    logger.exception("TrajectorySpanProcessor: failed to emit held MCP traces at shutdown")
                self._drain_flushes()
                return
            if isinstance(item, _Flush):
                item.done.set()
                continue
            try:
                self._handle(item)
            except Exception:
                logger.exception("TrajectorySpanProcessor: failed to handle a span; continuing")

    def _drain_flushes(self) -> None:
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if isinstance(item, _Flush):
                item.done.set()

    def _handle(self, item: Any) -> None:
        if isinstance(item[0], int):
            trace_id, span_id, parent_id = item
            self._state(trace_id).add_link(span_id, parent_id)
            return
        span, is_root, open_traces = item
        state = self._state(span.context.trace_id)
        state.add_span(span)
        if not is_root:
            return
        del self._pending[state.trace_id]
        rest = state.split_off(span.context.span_id)  # other runs of this trace, still going
        if rest is not None:
            self._pending[state.trace_id] = rest
        if open_traces and state.mcp_only:
            self._hold(_Held(state, span, open_traces))
        else:
            self._finish(state, span)

    def _hold(self, held: _Held) -> None:
        """Keep an MCP-only trace until a trace it waits on takes it in or they have all ended."""
        self._held[held.state.trace_id] = held
        if len(self._held) > self._max_pending:
            oldest = next(iter(self._held.values()))
            del self._held[oldest.state.trace_id]
            self._emit(oldest.state, oldest.root, None)

    def _adopt_held(self, state: TraceState) -> None:
        """Move into ``state`` the held MCP-only traces whose calls belong to a tool call of it
        (:meth:`TraceState.claims`)."""
        for trace_id, held in list(self._held.items()):
            if state.trace_id in held.open_traces and state.claims(held.state):
                del self._held[trace_id]
                state.adopt(held.state)

    def _release_held(self, ended: int | None) -> None:
        """Trace ``ended`` has ended: emit alone the held traces left waiting on none (all when ``None``)."""
        for trace_id, held in list(self._held.items()):
            held.open_traces.discard(ended)
            if ended is None or not held.open_traces:
                del self._held[trace_id]
                self._emit(held.state, held.root, None)

    def _state(self, trace_id: int) -> TraceState:
        state = self._pending.get(trace_id)
        if state is None:
            if len(self._pending) >= self._max_pending:
                oldest = next(iter(self._pending.values()))
                del self._pending[oldest.trace_id]
                self._finish(oldest, None, note="root span never ended; assembled when evicted")
            state = TraceState(trace_id)
            self._pending[trace_id] = state
        return state

    def _finish(self, state: TraceState, root: Any | None, note: str | None = None) -> None:
        """The trace has ended (or was evicted): take in its held MCP calls, emit it, release the others."""
        self._adopt_held(state)
        self._emit(state, root, note)
        self._release_held(state.trace_id)

    def _emit(self, state: TraceState, root: Any | None, note: str | None) -> None:
        if state.empty and not self._keep_empty:
            return
        started = time.perf_counter()
        trajectory = state.build(root)
        if note:
            trajectory.logs.append(note)
        logger.debug(
            "trace %032x -> trajectory %s in %.2f ms",
            state.trace_id,
            trajectory.id,
            (time.perf_counter() - started) * 1000,
        )
        with self._lock:
            self._finished.append(trajectory)
            self._by_trace[state.trace_id] = trajectory
        if self._on_trajectory is not None:
            try:
                self._on_trajectory(trajectory)
            except Exception:
                logger.exception("TrajectorySpanProcessor: on_trajectory callback raised; ignored")
