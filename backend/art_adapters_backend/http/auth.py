"""API-key check on every request (``Authorization: Bearer <key>``), ``/health`` excepted."""

from __future__ import annotations

import hmac
import logging
import time

from starlette.types import ASGIApp, Receive, Scope, Send

from ..errors import AuthenticationError
from .error_handlers import error_response

__all__ = ["MIN_API_KEY_CHARS", "OPEN_PATHS", "REJECTION_LOG_INTERVAL_S", "ApiKeyMiddleware"]

logger = logging.getLogger(__name__)

#: Paths answered without a key (liveness probes).
OPEN_PATHS = frozenset({"/health"})

#: A shorter API key is accepted with a warning at start-up: it can be guessed.
MIN_API_KEY_CHARS = 16

#: Rejected requests are logged at most once per this many seconds (with a count of the others):
#: a client guessing keys must not fill the log.
REJECTION_LOG_INTERVAL_S = 10.0


class ApiKeyMiddleware:
    """Pure ASGI middleware: rejects HTTP requests without the right bearer key with a 401.

    Args:
        app: the wrapped application.
        api_key: the key every request must send.
    """

    def __init__(self, app: ASGIApp, api_key: str) -> None:
        self.app = app
        self._expected = api_key.encode()
        self._logged_at = -REJECTION_LOG_INTERVAL_S
        self._unlogged = 0
        if len(api_key) < MIN_API_KEY_CHARS:
            logger.warning(
                "the API key is %d characters long; use at least %d random ones (e.g. `openssl rand -hex 16`): "
                "a short key can be guessed", len(api_key), MIN_API_KEY_CHARS,
            )  # fmt: skip

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        header = b""
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                header = value
                break
        # The auth scheme is case-insensitive (RFC 9110 section 11.1): "bearer" and "BEARER" are "Bearer".
        scheme, _, token = header.strip().partition(b" ")
        if scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), self._expected):
            await self.app(scope, receive, send)
            return
        if not header:
            message = (
                "missing API key: send 'Authorization: Bearer <key>' (the key the server was started with)"
            )
        else:
            message = "invalid API key: the bearer token does not match the server's key"
        self._log_rejection(scope, message.split(":")[0])
        response = error_response(AuthenticationError(message, code="invalid_api_key"))
        await response(scope, receive, send)

    def _log_rejection(self, scope: Scope, reason: str) -> None:
        """Log a rejection, at most once per :data:`REJECTION_LOG_INTERVAL_S` (the rest are counted)."""
        now = time.monotonic()
        if now - self._logged_at < REJECTION_LOG_INTERVAL_S:
            self._unlogged += 1
            return
        others = f" ({self._unlogged} more rejected since the last line)" if self._unlogged else ""
        logger.warning("rejected %s %s: %s%s", scope.get("method"), scope.get("path"), reason, others)
        self._logged_at, self._unlogged = now, 0
