"""An ``Observer`` whose spans stay in memory, for tests that read the traces a run produced."""

from __future__ import annotations

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from art_adapters.observe import ObserveConfig, Observer

__all__ = ["in_memory_observer"]


def in_memory_observer(run: str) -> tuple[Observer, InMemorySpanExporter]:
    """An observer of ``run`` and its exporter: after ``observer.force_flush``, the spans are in
    ``exporter.get_finished_spans()``."""
    exporter = InMemorySpanExporter()
    return Observer(ObserveConfig(run=run), span_exporter=exporter), exporter
