"""An exporter that never takes the batch thread down: a failed export is counted, warned about and
dropped, and a destination that failed is skipped for a while."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

__all__ = ["DOWN_COOLDOWN_S", "GuardedExporter"]

#: After a failed export, a destination is skipped (its batches dropped at once) for this long.
DOWN_COOLDOWN_S = 30.0


class GuardedExporter(SpanExporter):
    """Wraps ``inner``: a failed or raising export calls ``on_dropped(count, destination, reason)``;
    a successful one ``on_exported(count)``.

    A destination whose export failed is skipped for :data:`DOWN_COOLDOWN_S` (its batches are
    dropped without trying), so an endpoint that is down costs one timeout, not one per batch,
    and shutting down does not wait on it.
    """

    def __init__(
        self,
        inner: SpanExporter,
        destination: str,
        on_dropped: Callable[[int, str, str], None],
        on_exported: Callable[[int], None],
    ) -> None:
        self._inner, self._destination = inner, destination
        self._on_dropped, self._on_exported = on_dropped, on_exported
        self.down_until = 0.0
        self.stopped = False

    def export(self, spans: Sequence[Any]) -> SpanExportResult:
        """Export through the inner exporter unless the destination is down; never raises."""
        if self.stopped or time.monotonic() < self.down_until:
            self._on_dropped(len(spans), self._destination, "it failed recently; skipped")
            return SpanExportResult.FAILURE
        try:
            result = self._inner.export(spans)
        except Exception as exc:  # noqa: BLE001 - an exporter must never take the batch thread down
            result = SpanExportResult.FAILURE
            reason = f"{type(exc).__name__}: {exc}"
        else:
            reason = "the exporter reported a failure"
        if result is not SpanExportResult.SUCCESS:
            self.down_until = time.monotonic() + DOWN_COOLDOWN_S
            self._on_dropped(len(spans), self._destination, reason)
        else:
            self.down_until = 0.0
            self._on_exported(len(spans))
        return result

    @property
    def down(self) -> bool:
        """Whether the destination failed within the last :data:`DOWN_COOLDOWN_S`."""
        return time.monotonic() < self.down_until

    def shutdown(self) -> None:
        """Shut the inner exporter down once (it also interrupts an export waiting to retry)."""
        if not self.stopped:
            self.stopped = True
            self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Flush the inner exporter."""
        return self._inner.force_flush(timeout_millis)
