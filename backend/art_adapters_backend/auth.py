"""API-key check on every request (``Authorization: Bearer <key>``), ``/health`` excepted."""

from __future__ import annotations

import hmac
import logging

from starlette.types import ASGIApp, Receive, Scope, Send

from .errors import AuthenticationError

__all__ = ["OPEN_PATHS", "ApiKeyMiddleware"]

logger = logging.getLogger(__name__)

#: Paths answered without a key (liveness probes).
OPEN_PATHS = frozenset({"/health"})


class ApiKeyMiddleware:
    """Pure ASGI middleware: rejects HTTP requests without the right bearer key with a 401.

    Args:
        app: the wrapped application.
        api_key: the key every request must send.
    """

    def __init__(self, app: ASGIApp, api_key: str) -> None:
        self.app = app
        self._expected = api_key.encode()

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
        logger.info("rejected %s %s: %s", scope.get("method"), scope.get("path"), message.split(":")[0])
        response = AuthenticationError(message, code="invalid_api_key").response()
        await response(scope, receive, send)
