"""Trajectories from live trace servers: Arize Phoenix's REST API and the Langfuse public API.

Production traffic becomes training data without an export step: the spans (Phoenix) or
observations (Langfuse) of the traces a query selects go through the same assembly as the file
importers in :mod:`._importer`, so GenAI, OpenInference, MCP and our own spans all work.
Endpoints: read-only GETs (see each function).
"""

from __future__ import annotations

import json
import logging
import os
import warnings
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import httpx
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, Status, StatusCode, TraceFlags

from art_adapters._errors import ConfigError
from art_adapters._trajectory import Trajectory
from art_adapters.observe._importer import trajectories_from_langfuse, trajectories_from_spans
from art_adapters.observe._times import TimeBound, iso_ns, parse_time

__all__ = ["trajectories_from_langfuse_api", "trajectories_from_phoenix"]

logger = logging.getLogger(__name__)

#: Spans (Phoenix) or observations (Langfuse) asked for per page; both servers allow up to 1000.
PAGE_SIZE = 1000
#: Trace ids per Phoenix span query or Langfuse score query (they go in the URL).
_IDS_PER_QUERY = 50


def _iso(value: datetime) -> str:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _window(start: TimeBound, end: TimeBound) -> tuple[datetime | None, datetime | None]:
    since, until = parse_time(start, "start"), parse_time(end, "end")
    if since is not None and until is not None and since >= until:
        raise ConfigError(f"the time window is empty: start {_iso(since)} is not before end {_iso(until)}")
    return since, until


def _check_limit(limit: int | None) -> None:
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ConfigError(f"limit must be a positive number of traces, got {limit!r}")


def _check_page_size(page_size: int) -> None:
    if isinstance(page_size, bool) or not isinstance(page_size, int) or not 1 <= page_size <= PAGE_SIZE:
        raise ConfigError(f"page_size must be in 1..{PAGE_SIZE}, got {page_size!r}")


def _get(client: httpx.Client, url: str, params: Any, *, server: str) -> httpx.Response:
    """GET, turning transport failures and authentication refusals into ConfigError naming the URL."""
    try:
        response = client.get(url, params=params)
    except httpx.HTTPError as exc:
        raise ConfigError(f"cannot reach {server} at {url}: {exc or type(exc).__name__}") from exc
    if response.status_code in (401, 403):
        hint = "PHOENIX_API_KEY" if server == "Phoenix" else "LANGFUSE_PUBLIC_KEY / LANGFUSE_SECRET_KEY"
        raise ConfigError(f"{server} at {url} refused the credentials ({response.status_code}): check {hint}")
    return response


def _fail(response: httpx.Response, server: str) -> ConfigError:
    body = response.text.strip().replace("\n", " ")[:300]
    return ConfigError(f"{server} answered {response.status_code} for {response.request.url}: {body}")


def _json(response: httpx.Response, server: str) -> Any:
    try:
        return response.json()
    except ValueError:
        raise ConfigError(
            f"{server} at {response.request.url} did not answer JSON (is that the right URL?)"
        ) from None


def _data_page(response: httpx.Response, server: str, url: str) -> Mapping[str, Any]:
    """A page of a paged list API: a 200 whose JSON object has a ``data`` list; a clear error otherwise."""
    if response.status_code != 200:
        raise _fail(response, server)
    body = _json(response, server)
    if not isinstance(body, Mapping) or not isinstance(body.get("data"), list):
        raise ConfigError(f"{server} at {url} answered no data list (is that the right URL?)")
    return body


def _batches(items: Sequence[str], size: int) -> Iterator[Sequence[str]]:
    for at in range(0, len(items), size):
        yield items[at : at + size]


# -- Phoenix -----------------------------------------------------------------------------------


def _flat(value: Any, prefix: str, out: dict[str, Any]) -> None:
    """OTel attribute values from JSON: nested objects flattened with dots, lists as tuples."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            _flat(item, f"{prefix}.{key}" if prefix else str(key), out)
    elif isinstance(value, list):
        if all(isinstance(v, str | bool | int | float) for v in value):
            out[prefix] = tuple(value)
        else:
            out[prefix] = json.dumps(value)
    elif value is not None:
        out[prefix] = value


def _genai(attributes: Mapping[str, Any]) -> bool:
    return "mcp.method.name" in attributes or any(k.startswith("gen_ai.") for k in attributes)


def _phoenix_span(raw: Mapping[str, Any]) -> ReadableSpan | None:
    """A Phoenix REST span (``/v1/projects/{p}/spans``) as the SDK span it was exported from.

    Phoenix moves ``openinference.span.kind`` out of the attributes into ``span_kind``, and
    also derives OpenInference attributes (and a kind) from OTel GenAI ones; the kind is put
    back only on spans that carry no GenAI/MCP attributes, so each span is parsed by the
    convention it was written in.
    """
    context = raw.get("context") or {}
    try:
        trace_id, span_id = int(context["trace_id"], 16), int(context["span_id"], 16)
        parent_id = int(raw["parent_id"], 16) if raw.get("parent_id") else 0
    except (KeyError, TypeError, ValueError):
        return None
    attributes: dict[str, Any] = {}
    _flat(raw.get("attributes") or {}, "", attributes)
    kind = raw.get("span_kind")
    if isinstance(kind, str) and kind != "UNKNOWN" and not _genai(attributes):
        attributes.setdefault("openinference.span.kind", kind)
    events = []
    for event in raw.get("events") or ():
        event_attributes: dict[str, Any] = {}
        _flat(event.get("attributes") or {}, "", event_attributes)
        events.append(
            Event(str(event.get("name", "")), event_attributes, timestamp=iso_ns(event.get("timestamp")))
        )
    flags = TraceFlags(TraceFlags.SAMPLED)
    code = raw.get("status_code")
    status = (
        Status(StatusCode.ERROR, raw.get("status_message") or None)
        if code == "ERROR"
        else Status(StatusCode.OK if code == "OK" else StatusCode.UNSET)
    )
    return ReadableSpan(
        name=str(raw.get("name", "")),
        context=SpanContext(trace_id, span_id, False, flags),
        parent=SpanContext(trace_id, parent_id, False, flags) if parent_id else None,
        attributes=attributes,
        events=events,
        status=status,
        start_time=iso_ns(raw.get("start_time")),
        end_time=iso_ns(raw.get("end_time")),
        instrumentation_scope=InstrumentationScope("phoenix-import"),
    )


def _phoenix_pages(
    client: httpx.Client, url: str, params: list[tuple[str, str]], project: str
) -> Iterator[list[Mapping[str, Any]]]:
    cursor: str | None = None
    while True:
        page = [*params, ("cursor", cursor)] if cursor else params
        response = _get(client, url, page, server="Phoenix")
        if response.status_code == 404:
            raise ConfigError(
                f"Phoenix at {url} has no project {project!r} (or no span REST API: upgrade to 12+)"
            )
        body = _data_page(response, "Phoenix", url)
        yield body["data"]
        cursor = body.get("next_cursor")
        if not cursor:
            return


def trajectories_from_phoenix(
    url: str,
    *,
    project: str = "default",
    start: TimeBound = None,
    end: TimeBound = None,
    limit: int | None = None,
    headers: Mapping[str, str] | None = None,
    timeout: float = 30.0,
    page_size: int = PAGE_SIZE,
) -> list[Trajectory]:
    """Trajectories of the traces in a live Arize Phoenix project, read through its REST API.

    Endpoints (``arize-phoenix`` 12 and later; read-only GETs): ``/v1/projects/{project}/spans`` with
    ``parent_id=null`` and the time window to find the traces (by their root span), then the
    same route with ``trace_id=...`` for every span of those traces; cursor pagination
    (``next_cursor``). ``PHOENIX_API_KEY``, when set, is sent as ``Authorization: Bearer``.

    The traces are those whose root span started in ``[start, end)`` (the newest ``limit`` of
    them when given); every span of each is fetched and assembled like
    :func:`trajectories_from_otlp_json` does, so OpenInference, OTel GenAI and our own
    exporter's spans give the same trajectories as their OTLP export. Each trajectory's
    ``metadata`` gets ``trace_id`` and ``phoenix_project``; returned in trace start order.

    Args:
        url: Phoenix's HTTP root (``http://localhost:6006``; a trailing ``/v1/traces`` is ignored).
        project: the project name (or id).
        start: inclusive lower bound on the root span's start (datetime or ISO 8601; naive = UTC).
        end: exclusive upper bound.
        limit: at most this many traces, the most recent first.
        headers: extra HTTP headers; ``PHOENIX_API_KEY``, when set and no ``Authorization``
            header is given, is sent as ``Authorization: Bearer <key>``.
        timeout: seconds per HTTP request.
        page_size: spans per request (Phoenix allows 1..1000).

    Raises:
        ConfigError: the server cannot be reached, refuses the API key (401/403), has no such
            project, or answers something that is not Phoenix's span API; a bad argument.
    """
    _check_limit(limit)
    _check_page_size(page_size)
    since, until = _window(start, end)
    base = url.rstrip("/").removesuffix("/v1/traces")
    if not base.startswith(("http://", "https://")):
        raise ConfigError(f"the Phoenix URL must start with http:// or https://, got {url!r}")
    sent = dict(headers or {})
    key = os.environ.get("PHOENIX_API_KEY")
    if key and not any(h.lower() == "authorization" for h in sent):
        sent["Authorization"] = f"Bearer {key}"
    endpoint = f"{base}/v1/projects/{quote(project, safe='')}/spans"
    window = [("start_time", _iso(since))] if since else []
    window += [("end_time", _iso(until))] if until else []
    with httpx.Client(headers=sent, timeout=timeout) as client:
        trace_ids: list[str] = []
        roots = [("parent_id", "null"), *window, ("sort", "start_time"), ("order", "desc")]
        size = min(page_size, limit) if limit else page_size
        for page in _phoenix_pages(client, endpoint, [*roots, ("limit", str(size))], project):
            for raw in page:
                trace_id = (raw.get("context") or {}).get("trace_id")
                if isinstance(trace_id, str) and trace_id not in trace_ids:
                    trace_ids.append(trace_id)
            if limit and len(trace_ids) >= limit:
                del trace_ids[limit:]
                break
        spans: list[ReadableSpan] = []
        for batch in _batches(trace_ids, _IDS_PER_QUERY):
            # in the order Phoenix stored them (the order they were exported in): ties in start or
            # end time (Phoenix keeps microseconds) then fall as they did for the live processor
            params = [("trace_id", t) for t in batch] + [
                ("sort", "id"),
                ("order", "asc"),
                ("limit", str(page_size)),
            ]
            for page in _phoenix_pages(client, endpoint, params, project):
                spans += [s for s in map(_phoenix_span, page) if s is not None]
    logger.info("read %d spans of %d traces from Phoenix project %r", len(spans), len(trace_ids), project)
    trajectories = trajectories_from_spans(spans)
    for trajectory in trajectories:
        trajectory.metadata["phoenix_project"] = project
    return trajectories


# -- Langfuse ----------------------------------------------------------------------------------


def _langfuse_io(value: Any) -> Any:
    """The v2 observations API returns input/output as raw strings: JSON ones parsed back."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def _root_filter(
    tags: Sequence[str], session_id: str | None, since: datetime | None, until: datetime | None
) -> list[dict[str, Any]]:
    """The v2 observations ``filter``: root observations of matching traces started in the window."""
    conditions: list[dict[str, Any]] = [
        {"type": "boolean", "column": "isRootObservation", "operator": "=", "value": True}
    ]
    if tags:
        conditions.append(
            {"type": "arrayOptions", "column": "traceTags", "operator": "all of", "value": list(tags)}
        )
    if session_id:
        conditions.append({"type": "string", "column": "sessionId", "operator": "=", "value": session_id})
    if since:
        conditions.append({"type": "datetime", "column": "startTime", "operator": ">=", "value": _iso(since)})
    if until:
        conditions.append({"type": "datetime", "column": "startTime", "operator": "<", "value": _iso(until)})
    return conditions


class _NoV2Api(Exception):
    """The server has no v2 observations API (404): an older self-hosted Langfuse."""


def _cursor_pages(
    client: httpx.Client, url: str, params: dict[str, Any], *, probe: bool = False
) -> Iterator[list[Mapping[str, Any]]]:
    cursor: str | None = None
    while True:
        response = _get(client, url, {**params, "cursor": cursor} if cursor else params, server="Langfuse")
        if probe and cursor is None and response.status_code == 404:
            raise _NoV2Api
        body = _data_page(response, "Langfuse", url)
        yield body["data"]
        cursor = (body.get("meta") or {}).get("cursor")
        if not cursor:
            return


def _traces_v2(
    client: httpx.Client,
    base: str,
    conditions: list[dict[str, Any]],
    limit: int | None,
    page_size: int,
) -> list[dict[str, Any]] | None:
    """Traces with observations and scores via the v2/v3 APIs; ``None`` when the server lacks them."""
    url = f"{base}/api/public/v2/observations"
    size = min(page_size, limit) if limit else page_size
    roots: dict[str, Mapping[str, Any]] = {}
    params = {"fields": "core,basic,metadata,trace_context", "filter": json.dumps(conditions), "limit": size}
    try:
        for page in _cursor_pages(client, url, params, probe=True):
            for observation in page:
                trace_id = observation.get("traceId")
                if isinstance(trace_id, str) and trace_id not in roots:
                    roots[trace_id] = observation
            if limit and len(roots) >= limit:
                break
    except _NoV2Api:
        return None
    trace_ids = list(roots)[:limit] if limit else list(roots)
    traces: dict[str, dict[str, Any]] = {}
    fields = "core,basic,time,io,metadata,model,usage,trace_context"
    for trace_id in trace_ids:
        root = roots[trace_id]
        observations = [
            {**o, "input": _langfuse_io(o.get("input")), "output": _langfuse_io(o.get("output"))}
            for page in _cursor_pages(
                client, url, {"traceId": trace_id, "fields": fields, "limit": page_size}
            )
            for o in page
        ]
        traces[trace_id] = {
            "id": trace_id,
            "name": root.get("traceName"),
            "sessionId": root.get("sessionId"),
            "tags": root.get("tags"),
            "metadata": root.get("metadata"),
            "observations": observations,
            "scores": [],
        }
    scores_url = f"{base}/api/public/v3/scores"
    for batch in _batches(trace_ids, _IDS_PER_QUERY):
        params = {"traceId": ",".join(batch), "fields": "details,subject", "limit": min(page_size, 100)}
        for page in _cursor_pages(client, scores_url, params):
            for score in page:
                subject = score.get("subject") or {}
                owner = subject.get("id") if subject.get("kind") == "trace" else subject.get("traceId")
                if owner in traces:
                    traces[owner]["scores"].append(score)
    return [traces[t] for t in trace_ids]


def _traces_v1(
    client: httpx.Client,
    base: str,
    tags: Sequence[str],
    session_id: str | None,
    since: datetime | None,
    until: datetime | None,
    limit: int | None,
    page_size: int,
) -> list[dict[str, Any]]:
    """Traces via the deprecated ``/api/public/traces`` list (page numbers) and ``/traces/{id}``."""
    url = f"{base}/api/public/traces"
    query: list[tuple[str, Any]] = [("tags", t) for t in tags]
    query += [("sessionId", session_id)] if session_id else []
    query += [("fromTimestamp", _iso(since))] if since else []
    query += [("toTimestamp", _iso(until))] if until else []
    size = min(page_size, 100, limit or 100)
    trace_ids: list[str] = []
    page = 1
    while True:
        response = _get(client, url, [*query, ("page", page), ("limit", size)], server="Langfuse")
        if response.status_code != 200:
            raise _fail(response, "Langfuse")
        body = _json(response, "Langfuse")
        if not isinstance(body, Mapping) or not isinstance(body.get("data"), list):
            raise ConfigError(f"Langfuse at {url} answered no trace list (is that the right URL?)")
        trace_ids += [
            t["id"] for t in body["data"] if isinstance(t, Mapping) and isinstance(t.get("id"), str)
        ]
        pages = (body.get("meta") or {}).get("totalPages") or 0
        if (limit and len(trace_ids) >= limit) or page >= pages or not body["data"]:
            break
        page += 1
    traces = []
    for trace_id in trace_ids[:limit] if limit else trace_ids:
        response = _get(client, f"{url}/{trace_id}", None, server="Langfuse")
        if response.status_code != 200:
            raise _fail(response, "Langfuse")
        traces.append(_json(response, "Langfuse"))
    return traces


# shape: a public function: one keyword per Observations API filter, all defaulted
def trajectories_from_langfuse_api(
    *,
    tags: Sequence[str] | None = None,
    session_id: str | None = None,
    start: TimeBound = None,
    end: TimeBound = None,
    limit: int | None = None,
    base_url: str | None = None,
    public_key: str | None = None,
    secret_key: str | None = None,
    timeout: float = 30.0,
    page_size: int = PAGE_SIZE,
    legacy_traces_api: bool = False,
) -> list[Trajectory]:
    """Trajectories of the traces a Langfuse project holds, read through its public API.

    Endpoints (read-only GETs; HTTP basic auth, public key : secret key): ``/api/public/v2/observations``
    (its real-time read path) with a ``filter`` on root observations, trace tags, session and
    start time, then ``traceId=...`` for each trace's observations, and
    ``/api/public/v3/scores`` for their scores; cursor pagination (``meta.cursor``). Only with
    ``legacy_traces_api=True`` (an older self-hosted Langfuse without the v2 API), and with a
    warning, the deprecated ``/api/public/traces`` list and ``/api/public/traces/{id}``.

    The traces are those with all of ``tags``, in ``session_id``, whose root observation
    started in ``[start, end)`` (the first ``limit`` the server lists, newest first); their
    observations and scores become trajectories exactly as :func:`trajectories_from_langfuse`
    makes them from an export (generations are model calls, tool observations and
    ``tools/call`` spans tool calls, a ``reward`` score the reward). Each trajectory's
    ``metadata`` has ``langfuse_trace_id`` (and ``langfuse_sessionId``/``langfuse_tags``);
    returned in trace start order.

    Uses ``GET /api/public/v2/observations`` and ``/api/public/v3/scores`` (Langfuse's
    real-time read path; other endpoints lag about 10 minutes).

    Args:
        tags: only traces carrying all of these tags.
        session_id: only traces of this session.
        start: inclusive lower bound on the trace's start (datetime or ISO 8601; naive = UTC).
        end: exclusive upper bound.
        limit: at most this many traces.
        base_url: the Langfuse host; default ``LANGFUSE_BASE_URL``, ``LANGFUSE_HOST``, else
            ``https://cloud.langfuse.com``.
        public_key: default ``LANGFUSE_PUBLIC_KEY``.
        secret_key: default ``LANGFUSE_SECRET_KEY``.
        timeout: seconds per HTTP request.
        page_size: observations per request (scores and v1 traces: at most 100).
        legacy_traces_api: read the deprecated ``/api/public/traces`` instead (for a self-hosted
            Langfuse without the v2 observations API; retired on Langfuse Cloud), with a warning.

    Raises:
        ConfigError: a key is missing, the server cannot be reached or refuses the keys
            (401/403), has no v2 observations API (404; the message names ``legacy_traces_api``),
            or answers something that is not Langfuse's API; a bad argument.
    """
    _check_limit(limit)
    _check_page_size(page_size)
    since, until = _window(start, end)
    public_key = public_key or os.environ.get("LANGFUSE_PUBLIC_KEY")
    secret_key = secret_key or os.environ.get("LANGFUSE_SECRET_KEY")
    if not public_key or not secret_key:
        raise ConfigError(
            "reading Langfuse needs both keys: set LANGFUSE_PUBLIC_KEY and LANGFUSE_SECRET_KEY "
            "(or pass public_key= and secret_key=)"
        )
    base = (
        base_url
        or os.environ.get("LANGFUSE_BASE_URL")
        or os.environ.get("LANGFUSE_HOST")
        or "https://cloud.langfuse.com"
    ).rstrip("/")
    if not base.startswith(("http://", "https://")):
        raise ConfigError(f"the Langfuse URL must start with http:// or https://, got {base!r}")
    tag_list = [tags] if isinstance(tags, str) else list(tags or ())
    with httpx.Client(auth=(public_key, secret_key), timeout=timeout) as client:
        if legacy_traces_api:
            message = (
                f"reading Langfuse at {base} through the deprecated /api/public/traces "
                "(legacy_traces_api=True): it lags about 10 minutes and is retired on Langfuse Cloud; "
                "upgrade the server to read Observations API v2"
            )
            warnings.warn(message, DeprecationWarning, stacklevel=2)
            logger.warning("%s", message)
            traces = _traces_v1(client, base, tag_list, session_id, since, until, limit, page_size)
        else:
            conditions = _root_filter(tag_list, session_id, since, until)
            traces = _traces_v2(client, base, conditions, limit, page_size)
        if traces is None:
            raise ConfigError(
                f"Langfuse at {base} has no Observations API v2 (GET /api/public/v2/observations answered "
                "404): upgrade the server, or read its deprecated traces endpoint with "
                "legacy_traces_api=True (art-adapters import: --langfuse-legacy-traces-api)"
            )
    logger.info("read %d traces from Langfuse at %s", len(traces), base)
    trajectories = trajectories_from_langfuse(traces) if traces else []
    return sorted(trajectories, key=lambda t: t.started_at.timestamp() if t.started_at else 0.0)
