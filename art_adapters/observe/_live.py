"""Live rollout traces: one span per rollout, open while the agent runs, so every span it makes joins it.

:func:`~art_adapters.run_groups` starts a :class:`RolloutSpan` per rollout (when an observer is
enabled) and makes it the current OpenTelemetry span while the rollout runs: whatever
instrumentation the user already has (OpenInference, OpenLLMetry, Langfuse's ``CallbackHandler``)
parents its spans on it, in the same trace. When the rollout returns, our capture's generation
and tool spans are added under it; when it is scored, the reward and the judge's explanation are
set on it and it ends (with the rollout's own end time).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from art_adapters._trajectory import RolloutFailure, Trajectory
from art_adapters.observe._live_attributes import rollout_attributes, score_attributes
from art_adapters.observe._spans import RolloutContext, trajectory_spans

if TYPE_CHECKING:
    from art_adapters.observe._observer import Observer

__all__ = ["RolloutSpan"]

logger = logging.getLogger(__name__)


class RolloutSpan:
    """The live span of one rollout (made by :meth:`~art_adapters.observe.Observer.start_rollout`).

    Use :meth:`active` around the rollout, then exactly one of :meth:`finished` or
    :meth:`failed`; :meth:`end` (after scoring) when it was kept open.
    """

    def __init__(self, observer: Observer, tracer: Any, context: RolloutContext, rollout_index: int) -> None:
        from opentelemetry import context as otel_context

        self._observer = observer
        self._context = context
        self._ended = False
        self._end_ns: int | None = None
        name = f"rollout {context.scenario_id}" if context.scenario_id is not None else "rollout"
        # A new root: one trace per rollout, even when run_groups runs inside a span of the caller's.
        self._span = tracer.start_span(
            name, context=otel_context.Context(), attributes=rollout_attributes(context, rollout_index)
        )
        span_context = self._span.get_span_context()
        self.trace_id: int = span_context.trace_id
        self.span_id: int = span_context.span_id

    @property
    def ids(self) -> dict[str, str]:
        """``{"trace_id": 32 hex, "rollout_span_id": 16 hex}``, as kept in the trajectory's metadata."""
        return {"trace_id": f"{self.trace_id:032x}", "rollout_span_id": f"{self.span_id:016x}"}

    @contextmanager
    def active(self) -> Iterator[None]:
        """Make this the current span (of this task) while the rollout runs."""
        from opentelemetry import context as otel_context
        from opentelemetry import trace

        token = otel_context.attach(trace.set_span_in_context(self._span))
        try:
            yield
        finally:
            otel_context.detach(token)

    def retried(self, failure: str) -> None:
        """Note a failed attempt that will be retried (an event on the span)."""
        self._span.add_event("rollout.retry", {"exception.message": failure})

    def finished(self, trajectory: Trajectory, *, keep_open: bool) -> None:
        """Add the captured generations and tool calls under the span; end it unless ``keep_open``.

        Records the span's ids in ``trajectory.metadata`` (``trace_id``, ``rollout_span_id``).
        """
        trajectory.metadata = {**trajectory.metadata, **self.ids}
        self._end_ns = time.time_ns()
        specs = trajectory_spans(trajectory, self._context, include_scores=False)
        self._span.set_attributes(specs[0].attributes)
        if trajectory.error:
            self._set_error(trajectory.error)
        self._observer.emit_spans(specs[1:])
        if keep_open:
            self._observer._hold(trajectory.id, self)
        else:
            self.end(trajectory)

    def failed(self, failure: RolloutFailure) -> None:
        """End the span with the failure as its error, the partial capture (if any) under it."""
        message = f"{failure.type}: {failure.message}" if failure.message else failure.type
        if failure.trajectory is not None:
            partial = failure.trajectory.model_copy()
            partial.metadata = {**partial.metadata, **self.ids}
            failed_context = replace(self._context, extra_tags=(*self._context.extra_tags, "failed"))
            self._observer.emit_spans(trajectory_spans(partial, failed_context, include_scores=False)[1:])
        self._span.set_attribute("langfuse.trace.tags", [*rollout_tags(self._span), "failed"])
        self._span.add_event(
            "exception",
            {"exception.type": failure.type, "exception.message": failure.message,
             "exception.stacktrace": failure.traceback},
        )  # fmt: skip
        self._set_error(message)
        self.end()

    def cancelled(self) -> None:
        """End the span of a rollout cancelled with its run."""
        if not self._ended:
            self._set_error("cancelled")
            self.end()

    def end(self, trajectory: Trajectory | None = None, attributes: Mapping[str, Any] | None = None) -> None:
        """Set the scores ``trajectory`` carries (reward, RULER score, explanation) and any other
        ``attributes`` (a Langfuse experiment run's), then end the span."""
        if self._ended:
            return
        self._ended = True
        if trajectory is not None:
            self._span.set_attributes(score_attributes(trajectory))
        if attributes:
            self._span.set_attributes(dict(attributes))
        self._span.end(end_time=self._end_ns)

    def _set_error(self, message: str) -> None:
        from opentelemetry.trace import Status, StatusCode

        self._span.set_status(Status(StatusCode.ERROR, message))


def rollout_tags(span: Any) -> list[str]:
    """The Langfuse trace tags a span was started with."""
    tags = getattr(span, "attributes", {}).get("langfuse.trace.tags") or ()
    return [str(tag) for tag in tags]
