"""``create_app(state)``: the FastAPI application (routes, OpenAI-style errors, API key)."""

from __future__ import annotations

import importlib.util
import logging

from fastapi import FastAPI

from ..state import ServerState
from .auth import ApiKeyMiddleware
from .body_limit import BodyLimitMiddleware
from .error_handlers import install_error_handlers
from .host_check import HostOriginMiddleware
from .quiet_memory import QuietMemoryMiddleware
from .routes_art import health_router
from .routes_art import router as art_router
from .routes_export import router as export_router
from .routes_openai import router as openai_router
from .routes_responses import router as responses_router

__all__ = ["create_app"]

logger = logging.getLogger(__name__)


def create_app(state: ServerState) -> FastAPI:
    """The backend's ASGI app serving ``state``.

    Routes: ``/health``, ``/v1/models``, ``/v1/chat/completions``, ``/v1/responses``, ``/art/...`` (see
    ``docs/backend-api.md``); every error is an OpenAI-style JSON body; with an API key
    configured every request but ``/health`` must carry it; without one only loopback ``Host``
    names and ``Origin`` s are answered (:mod:`.host_check`).
    """
    app = FastAPI(
        title="art-adapters backend",
        summary="OpenAI-compatible inference with exact-token records, a model registry and LoRA training.",
        version="0.1.0",
    )
    app.state.server = state
    install_error_handlers(app)
    limits = state.config.limits
    # 413 past --max-request-bytes (training: --max-train-request-bytes), before the body is parsed
    app.add_middleware(BodyLimitMiddleware, max_bytes=limits.max_request_bytes,
                       max_train_bytes=limits.max_train_request_bytes)  # fmt: skip
    # what a burst of requests freed goes back to the OS once the server is quiet
    app.add_middleware(QuietMemoryMiddleware, quiet_s=state.config.quiet_memory_return_s)
    app.include_router(health_router)
    app.include_router(openai_router)
    app.include_router(responses_router)
    app.include_router(art_router)
    app.include_router(export_router)
    if importlib.util.find_spec(f"{__package__}.routes_train") is not None:
        from .routes_train import router as train_router  # the training API, when installed

        app.include_router(train_router)
    api_key = state.config.api_key_value
    if api_key is not None:
        app.add_middleware(ApiKeyMiddleware, api_key=api_key)
    else:  # no key: only loopback Host names and Origins (DNS rebinding), see host_check
        app.add_middleware(HostOriginMiddleware, allowed_hosts=state.config.allowed_hosts)
    return app
