"""``BodyLimitMiddleware``: refuse request bodies past the server's size limit with a 413.

An oversized request never gets parsed, rendered or tokenised; training requests carry whole
trajectory groups and have a limit of their own.
"""

from __future__ import annotations

import json
import logging

from fastapi import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import APIError
from .error_handlers import raised_before_start

__all__ = ["BodyLimitMiddleware", "BodyTooLargeError"]

logger = logging.getLogger(__name__)


class BodyTooLargeError(APIError, HTTPException, status=413, code="request_too_large"):
    """413: the request body is larger than the server accepts on this route.

    Also an ``HTTPException``: FastAPI lets only those through while it reads the body (any
    other error there becomes a 400), so the app's one :class:`APIError` handler answers it.
    """

    def __init__(self, limit: int, flag: str, size: int | None = None) -> None:
        what = f"is {size} bytes" if size is not None else "is larger than that"
        message = (
            f"the request body {what}; this server accepts at most {limit} bytes here "
            f"(serve {flag}): send less, e.g. fewer or shorter messages or groups"
        )
        super().__init__(message)
        self.detail = message  # HTTPException's fields
        self.headers = None


def _is_train_path(path: str) -> bool:
    return path.startswith("/art/models/") and path.endswith(("/train", "/train_sft"))


class BodyLimitMiddleware:
    """Pure ASGI middleware bounding request bodies.

    A body whose ``Content-Length`` is past the limit is refused before a byte of it is read; a
    body without one (chunked) is counted as it arrives and refused as soon as it passes the
    limit. Training requests (``POST /art/models/{name}/train`` and ``.../train_sft``) have
    ``max_train_bytes``.

    Args:
        app: the wrapped application.
        max_bytes: the limit on every route but training (``--max-request-bytes``).
        max_train_bytes: the limit on ``POST /art/models/{name}/train`` (``--max-train-request-bytes``).
    """

    def __init__(self, app: ASGIApp, max_bytes: int, max_train_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.max_train_bytes = max_train_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on with a counting ``receive``, or answer 413 at once."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if _is_train_path(scope.get("path", "")):
            limit, flag = self.max_train_bytes, "--max-train-request-bytes"
        else:
            limit, flag = self.max_bytes, "--max-request-bytes"
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            logger.info("refused %s %s: body of %d bytes (limit %d)", scope.get("method"), scope.get("path"),
                        declared, limit)  # fmt: skip
            await _respond_413(BodyTooLargeError(limit, flag, declared), send)
            return
        received = 0

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    logger.info("refused %s %s: body past %d bytes", scope.get("method"), scope.get("path"),
                                limit)  # fmt: skip
                    raise BodyTooLargeError(limit, flag)
            return message

        # a body read outside a route (a route's own handler answers one read inside it)
        exc = await raised_before_start(self.app, scope, counting_receive, send, BodyTooLargeError)
        if exc is not None:
            await _respond_413(exc, send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _respond_413(exc: BodyTooLargeError, send: Send) -> None:
    """Answer 413 with an OpenAI-style body and close the connection (the body stays unread)."""
    body = json.dumps(exc.body()).encode()
    await send({
        "type": "http.response.start",
        "status": 413,
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close")],
    })  # fmt: skip
    await send({"type": "http.response.body", "body": body})
