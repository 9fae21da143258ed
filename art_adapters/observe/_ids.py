"""An OpenTelemetry id generator that hands out caller-chosen ids (stable, re-addressable traces)."""

from __future__ import annotations

import threading

from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator

__all__ = ["ChosenIds"]


class ChosenIds(IdGenerator):
    """Returns the trace and span id set by :meth:`choose` once, then random ids (per thread)."""

    def __init__(self) -> None:
        self._local = threading.local()
        self._random = RandomIdGenerator()

    def choose(self, trace_id: int | None, span_id: int) -> None:
        """Use these ids for the next span started on this thread.

        Pass ``trace_id=None`` for a span with a parent: the SDK takes a child's trace id from
        its parent and never asks, so a chosen one would be left over for the next root span.
        """
        self._local.trace_id = trace_id
        self._local.span_id = span_id

    def generate_span_id(self) -> int:
        """The chosen span id, or a random one."""
        value = getattr(self._local, "span_id", None)
        self._local.span_id = None
        return value if value else self._random.generate_span_id()

    def generate_trace_id(self) -> int:
        """The chosen trace id, or a random one."""
        value = getattr(self._local, "trace_id", None)
        self._local.trace_id = None
        return value if value else self._random.generate_trace_id()
