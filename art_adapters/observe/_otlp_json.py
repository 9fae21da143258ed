"""OTLP JSON: spans to ``ExportTraceServiceRequest`` JSON (a file exporter), and back to SDK spans.

Traces can be saved to a file without a collector and read back from any backend's export. The JSON
follows the OTLP/HTTP JSON encoding (camelCase fields, hex ids, integer enums, 64-bit ints as strings).
"""

from __future__ import annotations

import base64
import json
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from art_adapters._errors import ConfigError
from art_adapters.observe._json_values import json_values

__all__ = ["OtlpJsonFileExporter", "otlp_json_request", "read_otlp_json", "spans_from_otlp_json"]

_ID_FIELDS = ("traceId", "spanId", "parentSpanId")


def otlp_json_request(spans: Sequence[ReadableSpan]) -> dict[str, Any]:
    """The OTLP JSON ``ExportTraceServiceRequest`` of finished SDK spans.

    Raises:
        ConfigError: ``opentelemetry-exporter-otlp-proto-http`` (protobuf encoding) is missing.
    """
    try:
        from google.protobuf.json_format import MessageToDict
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    except ImportError as exc:
        raise ConfigError(
            "OTLP JSON needs opentelemetry-exporter-otlp-proto-http: pip install 'art-adapters[observe]'"
        ) from exc
    request = MessageToDict(encode_spans(spans), use_integers_for_enums=True)
    for resource_spans in request.get("resourceSpans", []):
        for scope_spans in resource_spans.get("scopeSpans", []):
            for span in scope_spans.get("spans", []):
                for key in _ID_FIELDS:  # protobuf's JSON mapping writes bytes as base64; OTLP wants hex
                    if key in span:
                        span[key] = base64.b64decode(span[key]).hex()
                for link in span.get("links", []):
                    for key in ("traceId", "spanId"):
                        if key in link:
                            link[key] = base64.b64decode(link[key]).hex()
    return request


class OtlpJsonFileExporter(SpanExporter):
    """A span exporter that appends one OTLP JSON request per export to a file (JSON Lines)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Append the batch as one line."""
        line = json.dumps(otlp_json_request(spans), ensure_ascii=False) + "\n"
        with self._lock, self.path.open("a", encoding="utf-8") as handle:
            handle.write(line)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        """Nothing to release."""

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Writes are synchronous."""
        return True


def read_otlp_json(
    source: str | os.PathLike[str] | Mapping[str, Any] | Sequence[Any],
) -> list[dict[str, Any]]:
    """The OTLP JSON requests in a path (one object, a list, or JSON Lines) or an already-parsed value.

    Files written by :class:`OtlpJsonFileExporter` hold one request per line; the
    ``{"resourceSpans": ...}`` shape other backends and collectors (``file`` exporter) write is
    accepted too.

    Raises:
        ConfigError: the file is missing or holds no OTLP trace request.
    """
    if isinstance(source, Mapping):
        values: list[Any] = [source]
    elif isinstance(source, Sequence) and not isinstance(source, str | bytes):
        values = list(source)
    else:
        values = json_values(source, "OTLP JSON")
    requests = [v for v in values if isinstance(v, Mapping) and "resourceSpans" in v]
    if values and not requests:
        raise ConfigError("no OTLP trace request found (expected objects with 'resourceSpans')")
    return [dict(r) for r in requests]


def _id(value: Any, size: int) -> int:
    if not value:
        return 0
    text = str(value)
    if len(text) == size * 2:
        try:
            return int(text, 16)
        except ValueError:
            pass
    return int.from_bytes(base64.b64decode(text), "big")


def _any_value(value: Mapping[str, Any]) -> Any:
    if "stringValue" in value:
        return value["stringValue"]
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "intValue" in value:
        return int(value["intValue"])
    if "doubleValue" in value:
        return float(value["doubleValue"])
    if "arrayValue" in value:
        return tuple(_any_value(v) for v in value["arrayValue"].get("values", []))
    if "kvlistValue" in value:
        return json.dumps(_attributes(value["kvlistValue"].get("values", [])))
    if "bytesValue" in value:
        return base64.b64decode(value["bytesValue"])
    return None


def _attributes(items: Sequence[Mapping[str, Any]] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items or ():
        key = item.get("key")
        if isinstance(key, str):
            value = _any_value(item.get("value") or {})
            if value is not None:
                out[key] = value
    return out


def _iter_spans(request: Mapping[str, Any]) -> Iterator[tuple[Mapping[str, Any], Mapping[str, Any]]]:
    for resource_spans in request.get("resourceSpans", []) or []:
        for scope_spans in resource_spans.get(
            "scopeSpans", resource_spans.get("instrumentationLibrarySpans", [])
        ):
            scope = scope_spans.get("scope", scope_spans.get("instrumentationLibrary", {})) or {}
            for span in scope_spans.get("spans", []) or []:
                yield scope, span


def spans_from_otlp_json(
    source: str | os.PathLike[str] | Mapping[str, Any] | Sequence[Any],
) -> list[ReadableSpan]:
    """OpenTelemetry SDK ``ReadableSpan`` objects rebuilt from OTLP JSON (what a span processor sees)."""
    spans: list[ReadableSpan] = []
    for request in read_otlp_json(source):
        for scope, raw in _iter_spans(request):
            trace_id = _id(raw.get("traceId"), 16)
            span_id = _id(raw.get("spanId"), 8)
            if not trace_id or not span_id:
                continue
            parent_id = _id(raw.get("parentSpanId"), 8)
            flags = TraceFlags(TraceFlags.SAMPLED)
            status = raw.get("status") or {}
            code = status.get("code", 0)
            code = (
                {"STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2}.get(code, code)
                if isinstance(code, str)
                else code
            )
            events = [
                Event(
                    str(e.get("name", "")),
                    _attributes(e.get("attributes")),
                    timestamp=int(e.get("timeUnixNano", 0) or 0),
                )
                for e in raw.get("events", []) or []
            ]
            kind = raw.get("kind", 1)
            spans.append(
                ReadableSpan(
                    name=str(raw.get("name", "")),
                    context=SpanContext(trace_id, span_id, False, flags),
                    parent=SpanContext(trace_id, parent_id, False, flags) if parent_id else None,
                    attributes=_attributes(raw.get("attributes")),
                    events=events,
                    kind=SpanKind(max(0, int(kind) - 1))
                    if isinstance(kind, int) and kind
                    else SpanKind.INTERNAL,
                    status=Status(StatusCode.ERROR, status.get("message"))
                    if code == 2
                    else Status(StatusCode.OK if code == 1 else StatusCode.UNSET),
                    start_time=int(raw.get("startTimeUnixNano", 0) or 0),
                    end_time=int(raw.get("endTimeUnixNano", 0) or 0),
                    instrumentation_scope=InstrumentationScope(
                        str(scope.get("name", "")), scope.get("version")
                    ),
                )
            )
    return spans
