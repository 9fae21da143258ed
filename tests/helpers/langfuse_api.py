"""A stand-in for a Langfuse server's public read API: a real HTTP server on 127.0.0.1.

A real Langfuse server needs Docker (Postgres, ClickHouse, Redis, MinIO), which these machines
cannot run, so the tests talk to this one instead. It serves the endpoints the importer reads,
with the field names of the Langfuse SDK's generated models (``langfuse.api``:
``ObservationsV2Response`` / ``ObservationV2``, ``GetScoresV3Response`` / ``ScoreV3``, the
pagination ``MetaResponse``), and its answers are checked by parsing them with the SDK's own
client (``LangfuseAPI``) in the tests:

* ``GET /api/public/v2/observations``: the ``filter`` JSON (``isRootObservation``,
  ``traceTags``/``tags`` ``all of``/``any of``, ``sessionId``, ``startTime``), or ``traceId``;
  ``fields`` groups; ``limit`` (<= 1000) and an opaque ``cursor`` in ``meta``. Input and
  output are raw strings, as the v2 API documents.
* ``GET /api/public/v3/scores``: ``traceId`` (comma-separated), ``fields``, ``limit`` (<= 100,
  else 400), ``cursor``.
* with ``legacy=True`` (a server before the v2 API: the two above answer 404):
  ``GET /api/public/traces`` (``tags`` repeated, ``sessionId``, ``fromTimestamp``,
  ``toTimestamp``, ``page``, ``limit``; ``meta.totalPages``) and ``GET /api/public/traces/{id}``.

It also takes what the Langfuse SDK writes, so a test can check what a run sent:
``POST /api/public/scores`` (a batch of scores, kept in ``created_scores``; answered 202
``{"message": "Accepted"}`` as the SDK's ``CreateScoreBatchResponse`` documents) and
``POST /api/public/otel/v1/traces`` (OTLP protobuf, counted in ``otlp_posts``, each post's
``x-langfuse-ingestion-version`` header kept in ``otlp_ingestion_versions``, its spans decoded
into ``otlp_spans``), ``POST /api/public/v2/datasets`` (upsert on the name) and ``POST
/api/public/dataset-items`` (upsert on the id), answered as the SDK's ``Dataset`` / ``DatasetItem``
and kept in ``datasets`` / ``dataset_items``; :meth:`experiment_runs` groups the decoded spans
into experiment runs the way Langfuse v4 does from their ``langfuse.experiment.*`` attributes.

Every request is recorded (path and query, as lists per name). Basic auth must match the keys
(401 otherwise, like Langfuse).
"""

from __future__ import annotations

import base64
import gzip
import json
from datetime import datetime
from typing import Any, Self
from urllib.parse import parse_qs, urlsplit

from tests.helpers.json_server import QuietHandler, ServedInThread

PROJECT = "proj-stand-in"
_FIELD_GROUPS = {
    "basic": (
        "name",
        "level",
        "statusMessage",
        "version",
        "environment",
        "bookmarked",
        "public",
        "userId",
        "sessionId",
        "isRootObservation",
    ),
    "time": ("completionStartTime", "createdAt", "updatedAt"),
    "io": ("input", "output"),
    "metadata": ("metadata",),
    "model": ("model", "internalModelId", "modelParameters"),
    "usage": ("usageDetails", "costDetails", "totalCost", "usagePricingTierName"),
    "prompt": ("promptId", "promptName", "promptVersion"),
    "metrics": ("latency", "timeToFirstToken"),
    "trace_context": ("tags", "release", "traceName"),
}
_CORE = ("id", "traceId", "startTime", "endTime", "projectId", "parentObservationId", "type")


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text)


def v2_observation(trace: dict[str, Any], observation: dict[str, Any]) -> dict[str, Any]:
    """A v1 export's observation (inside its trace) in the v2 API's full shape (every field group)."""
    usage = observation.get("usageDetails") or observation.get("usage")
    return {
        "id": observation["id"],
        "traceId": trace["id"],
        "startTime": observation["startTime"],
        "endTime": observation.get("endTime"),
        "projectId": PROJECT,
        "parentObservationId": observation.get("parentObservationId"),
        "type": observation.get("type", "SPAN"),
        "name": observation.get("name"),
        "level": observation.get("level", "DEFAULT"),
        "statusMessage": observation.get("statusMessage"),
        "version": None,
        "environment": "default",
        "bookmarked": False,
        "public": False,
        "userId": trace.get("userId"),
        "sessionId": trace.get("sessionId"),
        "isRootObservation": not observation.get("parentObservationId"),
        "completionStartTime": None,
        "createdAt": observation["startTime"],
        "updatedAt": observation.get("endTime") or observation["startTime"],
        # "Input/output fields are always returned as raw strings" (v2 API reference)
        "input": None if observation.get("input") is None else json.dumps(observation["input"]),
        "output": None if observation.get("output") is None else json.dumps(observation["output"]),
        "metadata": observation.get("metadata")
        or (trace.get("metadata") if not observation.get("parentObservationId") else {}),
        "model": observation.get("model"),
        "internalModelId": None,
        "modelParameters": None,
        "usageDetails": {k: v for k, v in (usage or {}).items() if isinstance(v, int)} or None,
        "costDetails": None,
        "totalCost": None,
        "usagePricingTierName": None,
        "promptId": None,
        "promptName": None,
        "promptVersion": None,
        "latency": None,
        "timeToFirstToken": None,
        "tags": list(trace.get("tags") or []),
        "release": None,
        "traceName": trace.get("name"),
    }


def v3_score(trace: dict[str, Any], number: int, score: dict[str, Any]) -> dict[str, Any]:
    """A v1 export's trace score in the v3 API's shape (``details`` and ``subject`` groups included)."""
    return {
        "id": f"score-{trace['id'][:8]}-{number}",
        "projectId": PROJECT,
        "name": score["name"],
        "value": score["value"],
        "dataType": score.get("dataType", "NUMERIC"),
        "source": "API",
        "timestamp": trace["timestamp"],
        "environment": "default",
        "createdAt": trace["timestamp"],
        "updatedAt": trace["timestamp"],
        "comment": score.get("comment"),
        "configId": None,
        "metadata": None,
        "subject": {"kind": "trace", "id": trace["id"]},
    }


class LangfuseApiStandIn(ServedInThread):
    """The stand-in server over a list of Langfuse trace exports (with observations and scores)."""

    def __init__(
        self,
        traces: list[dict[str, Any]],
        *,
        public_key: str = "pk-lf-test",
        secret_key: str = "sk-lf-test",
        legacy: bool = False,
    ) -> None:
        self.traces = traces
        self.auth = "Basic " + base64.b64encode(f"{public_key}:{secret_key}".encode()).decode()
        self.legacy = legacy
        self.requests: list[tuple[str, dict[str, list[str]]]] = []
        self.created_scores: list[dict[str, Any]] = []
        #: score names answered as rejected (a 207 batch result), to test partial failures
        self.refuse_score_names: set[str] = set()
        self.otlp_posts = 0
        #: the ``x-langfuse-ingestion-version`` header of each OTLP post (``None`` when absent)
        self.otlp_ingestion_versions: list[str | None] = []
        #: every exported span: ``name``, ``trace_id`` / ``span_id`` (hex) and ``attributes``
        self.otlp_spans: list[dict[str, Any]] = []
        self.datasets: dict[str, dict[str, Any]] = {}  # by name
        self.dataset_items: dict[str, dict[str, Any]] = {}  # by id
        #: requests per write path (``POST`` counts, including upserts of what exists)
        self.posts: dict[str, int] = {}
        #: answer the dataset endpoints with this status (500: a Langfuse that fails), ``None``: normally
        self.fail_datasets: int | None = None
        self.url = ""

    # -- the endpoints ---------------------------------------------------------------------

    def _observations(self, query: dict[str, list[str]]) -> tuple[int, Any]:
        limit = int(query.get("limit", ["50"])[0])
        if limit > 1000:
            return 400, {"message": "limit must be <= 1000"}
        groups = {"core", *(query.get("fields", ["core,basic"])[0].split(","))}
        rows = [(t, o) for t in self.traces for o in t["observations"]]
        if "filter" in query:
            for condition in json.loads(query["filter"][0]):
                rows = [r for r in rows if self._matches(r, condition)]
        elif "traceId" in query:
            rows = [r for r in rows if r[0]["id"] == query["traceId"][0]]
        rows.sort(key=lambda r: _time(r[1]["startTime"]), reverse=True)  # newest first
        start = int(base64.b64decode(query["cursor"][0])) if "cursor" in query else 0
        page = rows[start : start + limit]
        more = start + limit < len(rows)
        data = []
        for trace, observation in page:
            full = v2_observation(trace, observation)
            keep = set(_CORE).union(*(_FIELD_GROUPS.get(g, ()) for g in groups))
            data.append({k: v for k, v in full.items() if k in keep})
        cursor = base64.b64encode(str(start + limit).encode()).decode() if more else None
        return 200, {"data": data, "meta": {"cursor": cursor}}

    @staticmethod
    def _matches(row: tuple[dict[str, Any], dict[str, Any]], condition: dict[str, Any]) -> bool:
        trace, observation = row
        column, operator, value = condition["column"], condition["operator"], condition.get("value")
        if column == "isRootObservation":
            return (not observation.get("parentObservationId")) == value
        if column in ("traceTags", "tags"):
            tags = set(trace.get("tags") or [])
            return set(value) <= tags if operator == "all of" else bool(set(value) & tags)
        if column == "sessionId":
            return trace.get("sessionId") == value
        if column == "startTime":
            when, bound = _time(observation["startTime"]), _time(value)
            return {">=": when >= bound, ">": when > bound, "<": when < bound, "<=": when <= bound}[operator]
        raise AssertionError(f"the stand-in does not know filter column {column!r}")

    def _scores(self, query: dict[str, list[str]]) -> tuple[int, Any]:
        limit = int(query.get("limit", ["50"])[0])
        if limit > 100:
            return 400, {"message": "Requests with a limit greater than 100 return HTTP 400"}
        wanted = set(query["traceId"][0].split(",")) if "traceId" in query else None
        scores = [
            v3_score(t, n, s)
            for t in self.traces
            if wanted is None or t["id"] in wanted
            for n, s in enumerate(t.get("scores") or [])
        ]
        start = int(base64.b64decode(query["cursor"][0])) if "cursor" in query else 0
        more = start + limit < len(scores)
        cursor = base64.b64encode(str(start + limit).encode()).decode() if more else None
        return 200, {"data": scores[start : start + limit], "meta": {"limit": limit, "cursor": cursor}}

    def _trace_list(self, query: dict[str, list[str]]) -> tuple[int, Any]:
        rows = [t for t in self.traces if set(query.get("tags", [])) <= set(t.get("tags") or [])]
        if "sessionId" in query:
            rows = [t for t in rows if t.get("sessionId") == query["sessionId"][0]]
        if "fromTimestamp" in query:
            rows = [t for t in rows if _time(t["timestamp"]) >= _time(query["fromTimestamp"][0])]
        if "toTimestamp" in query:
            rows = [t for t in rows if _time(t["timestamp"]) < _time(query["toTimestamp"][0])]
        rows.sort(key=lambda t: _time(t["timestamp"]), reverse=True)
        page, limit = int(query.get("page", ["1"])[0]), int(query.get("limit", ["50"])[0])
        summaries = [
            {k: v for k, v in t.items() if k not in ("observations", "scores")}
            for t in rows[(page - 1) * limit : page * limit]
        ]
        pages = -(-len(rows) // limit)
        return 200, {
            "data": summaries,
            "meta": {"page": page, "limit": limit, "totalItems": len(rows), "totalPages": pages},
        }

    def answer(self, path: str, query: dict[str, list[str]], auth: str | None) -> tuple[int, Any]:
        """Status and JSON body for one GET."""
        self.requests.append((path, query))
        if auth != self.auth:
            return 401, {"message": "Invalid credentials. Confirm that you've configured the correct host."}
        if path == "/api/public/v2/observations" and not self.legacy:
            return self._observations(query)
        if path == "/api/public/v3/scores" and not self.legacy:
            return self._scores(query)
        if path == "/api/public/traces" and self.legacy:
            return self._trace_list(query)
        if path.startswith("/api/public/traces/") and self.legacy:
            trace_id = path.rsplit("/", 1)[1]
            for trace in self.traces:
                if trace["id"] == trace_id:
                    return 200, trace
        return 404, {"message": "Not Found"}

    def _dataset(self, body: dict[str, Any]) -> tuple[int, Any]:
        now = datetime.now().astimezone().isoformat()
        dataset = self.datasets.setdefault(body["name"], {
            "id": f"ds-{len(self.datasets) + 1}", "name": body["name"], "projectId": PROJECT,
            "createdAt": now,
        })  # fmt: skip
        dataset.update(
            description=body.get("description"), metadata=body.get("metadata"), updatedAt=now,
            inputSchema=body.get("inputSchema"), expectedOutputSchema=body.get("expectedOutputSchema"),
        )  # fmt: skip
        return 200, dataset

    def _dataset_item(self, body: dict[str, Any]) -> tuple[int, Any]:
        dataset = self.datasets.get(body["datasetName"])
        if dataset is None:
            return 404, {"message": f"Dataset {body['datasetName']} not found"}
        now = datetime.now().astimezone().isoformat()
        item_id = body.get("id") or f"item-{len(self.dataset_items) + 1}"
        item = self.dataset_items.setdefault(item_id, {"id": item_id, "createdAt": now})
        if item.get("datasetId", dataset["id"]) != dataset["id"]:
            return 400, {"message": "Dataset item ids cannot be reused across datasets"}
        item.update(
            status=body.get("status") or "ACTIVE", input=body.get("input"),
            expectedOutput=body.get("expectedOutput"),
            metadata=body.get("metadata"), sourceTraceId=body.get("sourceTraceId"),
            sourceObservationId=body.get("sourceObservationId"), datasetId=dataset["id"],
            datasetName=dataset["name"], updatedAt=now, mediaReferences=[],
        )  # fmt: skip
        return 200, item

    def _spans(self, body: bytes) -> None:
        from google.protobuf.json_format import MessageToDict
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    attributes = {
                        a.key: next(iter(MessageToDict(a.value).values()), None) for a in span.attributes
                    }
                    self.otlp_spans.append({
                        "name": span.name, "trace_id": span.trace_id.hex(), "span_id": span.span_id.hex(),
                        "attributes": attributes,
                    })  # fmt: skip

    def experiment_runs(self) -> dict[str, list[dict[str, str]]]:
        """Experiment run name -> its items (``experiment_id``, ``dataset_id``, ``item_id``,
        ``trace_id``, ``root_observation_id``), from the spans carrying ``langfuse.experiment.*``."""
        runs: dict[str, list[dict[str, str]]] = {}
        for span in self.otlp_spans:
            a = span["attributes"]
            if "langfuse.experiment.name" in a:
                runs.setdefault(a["langfuse.experiment.name"], []).append({
                    "experiment_id": a["langfuse.experiment.id"],
                    "dataset_id": a["langfuse.experiment.dataset.id"],
                    "item_id": a["langfuse.experiment.item.id"],
                    "root_observation_id": a["langfuse.experiment.item.root_observation_id"],
                    "trace_id": span["trace_id"],
                    "span_id": span["span_id"],
                })  # fmt: skip
        return runs

    def accept(
        self, path: str, body: bytes, auth: str | None, ingestion_version: str | None = None
    ) -> tuple[int, Any]:
        """Status and JSON body for one POST (scores, OTLP spans, datasets and items from the SDK)."""
        self.requests.append((path, {}))
        if auth != self.auth:
            return 401, {"message": "Invalid credentials. Confirm that you've configured the correct host."}
        self.posts[path] = self.posts.get(path, 0) + 1
        if path in ("/api/public/v2/datasets", "/api/public/dataset-items"):
            if self.fail_datasets is not None:
                return self.fail_datasets, {"message": "Internal Server Error"}
            answer = self._dataset if path.endswith("datasets") else self._dataset_item
            return answer(json.loads(body))
        if path == "/api/public/scores":
            batch = json.loads(body)
            batch = batch if isinstance(batch, list) else [batch]
            refused = [s for s in batch if s.get("name") in self.refuse_score_names]
            self.created_scores.extend(s for s in batch if s not in refused)
            if refused:  # some rejected: 207 with counts and errors (CreateScoreBatchResults)
                errors = [{"message": f"score name {s['name']!r} is not allowed"} for s in refused]
                return 207, {"accepted": len(batch) - len(refused), "rejected": len(refused), "errors": errors}
            return 202, {"message": "Accepted"}
        if path == "/api/public/otel/v1/traces":
            self.otlp_posts += 1
            self.otlp_ingestion_versions.append(ingestion_version)
            self._spans(body)
            return 200, {}
        return 404, {"message": "Not Found"}

    def calls(self, path: str) -> list[dict[str, list[str]]]:
        """The query strings of the requests made to ``path``, in order."""
        return [q for p, q in self.requests if p == path]

    # -- the server ------------------------------------------------------------------------

    def start(self) -> Self:
        """Serve on a free 127.0.0.1 port in a daemon thread."""
        stand_in = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                status, body = stand_in.answer(
                    parts.path,
                    parse_qs(parts.query, keep_blank_values=True),
                    self.headers.get("Authorization"),
                )
                self.send_json(status, body)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                status, answer = stand_in.accept(
                    urlsplit(self.path).path, body, self.headers.get("Authorization"),
                    self.headers.get("x-langfuse-ingestion-version"),
                )
                self.send_json(status, answer)

        self.url = self._serve(Handler, "langfuse-api")
        return self
