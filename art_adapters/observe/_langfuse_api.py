"""Langfuse scores through the SDK's own API client (``langfuse.api.LangfuseAPI``, ``scores.create``).

Used by an :class:`~art_adapters.observe.Observer` whose SDK client cannot be trusted with its
scores (langfuse-python#1799); see :class:`LangfuseScoreClient`.
"""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime
from typing import Any

logger = logging.getLogger("art_adapters.observe")

_SEND_AT = 100  # queued scores that trigger a send without waiting for flush()


class LangfuseScoreClient:
    """Queue scores and send them with ``LangfuseAPI.scores.create`` (batches; 202 or 207 answers).

    The Langfuse SDK keeps one ``Langfuse`` client per public key for the whole process: a second one
    with the same key gets the first back, with the first one's host, and once that one is shut down
    every later score is dropped (langfuse-python#1799). An :class:`~art_adapters.observe.Observer`
    that finds such a client (another host, or shut down) sends its scores with this instead: the
    SDK's generated API client and models, one per observer, so nothing is lost and no request is
    written by hand. Same call shape as ``Langfuse.create_score`` (the keywords the observer uses);
    scores are queued and sent in batches on :meth:`flush`, failures logged.
    """

    def __init__(self, public_key: str, secret_key: str, base_url: str, *, timeout_s: float = 10.0) -> None:
        from langfuse.api import LangfuseAPI

        self.base_url = base_url.rstrip("/")
        self.sent = 0
        self.dropped = 0
        self._queue: list[Any] = []
        self._lock = threading.Lock()
        self._api = LangfuseAPI(
            base_url=self.base_url,
            username=public_key,
            password=secret_key,
            x_langfuse_public_key=public_key,
            x_langfuse_sdk_name="art-adapters",
            timeout=timeout_s,
        )

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
        from langfuse.api.scores import CreateScoreRequest

        request = CreateScoreRequest(
            name=name,
            value=value,
            trace_id=trace_id,
            observation_id=observation_id,
            comment=comment,
            data_type=data_type,
            metadata=metadata or None,
            timestamp=datetime.now(UTC),
        )
        with self._lock:
            self._queue.append(request)
            full = len(self._queue) >= _SEND_AT
        if full:
            self.flush()

    def flush(self) -> None:
        """Send every queued score now (one batch); a failed or partly rejected batch is logged."""
        with self._lock:
            batch, self._queue = self._queue, []
        if not batch:
            return
        try:
            answer = self._api.scores.create(request=batch)
        except Exception as exc:  # the SDK's ApiError, httpx errors: a score is never worth a crash
            self.dropped += len(batch)
            logger.warning(
                "observe: %d Langfuse score(s) not sent to %s (%s: %s)", len(batch), self.base_url,
                type(exc).__name__, exc,
            )  # fmt: skip
            return
        rejected = int(getattr(answer, "rejected", 0) or 0)  # a 207: some were refused
        self.sent += len(batch) - rejected
        self.dropped += rejected
        if rejected:
            errors = "; ".join(str(getattr(e, "message", e)) for e in getattr(answer, "errors", [])[:3])
            logger.warning("observe: Langfuse rejected %d of %d score(s): %s", rejected, len(batch), errors)

    def shutdown(self) -> None:
        """Send what is queued."""
        self.flush()
