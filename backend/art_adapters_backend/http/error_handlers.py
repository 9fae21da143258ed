"""The HTTP side of the backend's errors: each :class:`~art_adapters_backend.errors.APIError` as a response.

Installed on the app by :func:`install_error_handlers`; FastAPI's validation errors and Starlette's
404/405 get the same OpenAI-style body, and an unexpected exception a logged 500 without its trace.
"""

from __future__ import annotations

import logging
from typing import TypeVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import APIError, error_body, validation_message

__all__ = ["UnexpectedErrorMiddleware", "error_response", "install_error_handlers", "raised_before_start"]

logger = logging.getLogger(__name__)

_E = TypeVar("_E", bound=BaseException)


async def raised_before_start(
    app: ASGIApp, scope: Scope, receive: Receive, send: Send, catch: type[_E]
) -> _E | None:
    """Run ``app``; return the ``catch`` exception it raised before its response started, for the
    caller to answer. One raised after the start (a stream cut short) cannot be answered: re-raised."""
    started = False

    async def tracking_send(message: Message) -> None:
        nonlocal started
        started = started or message["type"] == "http.response.start"
        await send(message)

    try:
        await app(scope, receive, tracking_send)
    except catch as exc:
        if started:
            raise
        return exc
    return None


def error_response(error: APIError) -> JSONResponse:
    """``error`` as a response: its class's status, its OpenAI-style body and its own headers."""
    headers = error.response_headers() or None
    return JSONResponse(error.body(), status_code=error.status_code, headers=headers)


async def _api_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, APIError)
    return error_response(exc)


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = list(exc.errors())
    message, param = validation_message(errors)
    code = "invalid_json" if message.startswith("invalid JSON") else "invalid_value"
    if code == "invalid_value" and any(error.get("type") == "extra_forbidden" for error in errors):
        code = "unsupported_parameter"
    return JSONResponse(error_body(message, "invalid_request_error", param, code), status_code=400)


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 404:
        message = f"no route {request.method} {request.url.path}; see /docs for the API"
    elif exc.status_code == 405:
        message = f"method {request.method} is not allowed on {request.url.path}"
    else:
        message = str(exc.detail)
    error_type = "invalid_request_error" if exc.status_code < 500 else "server_error"
    return JSONResponse(
        error_body(message, error_type), status_code=exc.status_code, headers=getattr(exc, "headers", None)
    )


class UnexpectedErrorMiddleware:
    """Answer an exception no handler took with a JSON 500, and log it once, with its traceback.

    Starlette's catch-all ``Exception`` handler re-raises after answering, so the ASGI server
    logs the same traceback a second time; this middleware keeps the exception from ever
    reaching the server. An exception raised after the response has started (a stream cut
    short) cannot be answered any more and is left to the server, which logs it.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the wrapped app, turning an exception before the response starts into a 500."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        exc = await raised_before_start(self.app, scope, receive, send, Exception)
        if exc is None:
            return
        logger.error("unexpected error serving %s %s", scope.get("method"), scope.get("path"), exc_info=exc)
        message = (
            f"internal server error ({type(exc).__name__}); the server logged the details and keeps serving"
        )
        await JSONResponse(error_body(message, "server_error"), status_code=500)(scope, receive, send)


def install_error_handlers(app: FastAPI) -> None:
    """Answer every error of ``app`` with an OpenAI-style JSON body (never a stack trace).

    One handler answers every :class:`APIError` (each class carries its status, type and default
    code); FastAPI's validation errors get one readable message instead of pydantic's list; any
    unexpected exception is logged with its traceback and answered as a 500 without it.
    """
    app.add_exception_handler(APIError, _api_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_middleware(UnexpectedErrorMiddleware)
