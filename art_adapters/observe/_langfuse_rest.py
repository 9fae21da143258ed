"""Langfuse scores over the public REST API (``POST /api/public/scores``), without the SDK's client.

The Langfuse SDK keeps one client per public key for the whole process: a second ``Langfuse(...)``
with the same key gets the first one back, with the first one's host, and once that one is shut
down every later score is dropped (langfuse-python#1799). An :class:`~art_adapters.observe.Observer`
that finds such a client (another host, or shut down) sends its scores with this instead, so a
notebook or a test suite that builds two observers with one key loses nothing.

Same call shape as the SDK's ``create_score`` (the keywords the observer uses); scores are queued
and sent on :meth:`LangfuseScoreClient.flush`, each failure logged and counted, never raised.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import httpx

logger = logging.getLogger("art_adapters.observe")

_SEND_AT = 200  # queued scores that trigger a send without waiting for flush()


class LangfuseScoreClient:
    """Queue scores and send them to ``{base_url}/api/public/scores`` (HTTP basic auth)."""

    def __init__(self, public_key: str, secret_key: str, base_url: str, *, timeout_s: float = 10.0) -> None:
        self.url = f"{base_url.rstrip('/')}/api/public/scores"
        self.sent = 0
        self.dropped = 0
        self._queue: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._http = httpx.Client(auth=(public_key, secret_key), timeout=timeout_s)

    def create_score(
        self,
        *,
        name: str,
        value: float,
        trace_id: str,
        observation_id: str | None = None,
        comment: str | None = None,
        data_type: str = "NUMERIC",
        metadata: dict[str, Any] | None = None,
    ) -> None:
        """Queue one score on a trace (and observation); sent by the next :meth:`flush`."""
        body: dict[str, Any] = {"traceId": trace_id, "name": name, "value": value, "dataType": data_type}
        if observation_id is not None:
            body["observationId"] = observation_id
        if comment is not None:
            body["comment"] = comment
        if metadata:
            body["metadata"] = metadata
        with self._lock:
            self._queue.append(body)
            full = len(self._queue) >= _SEND_AT
        if full:
            self.flush()

    def flush(self) -> None:
        """Send every queued score now (one request each); failures are logged and dropped."""
        with self._lock:
            batch, self._queue = self._queue, []
        for body in batch:
            try:
                response = self._http.post(self.url, json=body)
                response.raise_for_status()
                self.sent += 1
            except httpx.HTTPError as exc:
                self.dropped += 1
                logger.warning("observe: Langfuse score %r not sent to %s (%s)", body["name"], self.url, exc)

    def shutdown(self) -> None:
        """Send what is queued and close the connection pool."""
        self.flush()
        self._http.close()
