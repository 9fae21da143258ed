"""The art-adapters API: health, model registry, exact-token records, engine stats."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from ..errors import NotFoundError
from ..state import ServerState

__all__ = ["RegisterRequest", "health_router", "router"]

logger = logging.getLogger(__name__)

router = APIRouter(prefix="/art", tags=["art"])
health_router = APIRouter(tags=["health"])


def _state(request: Request) -> ServerState:
    return request.app.state.server


class RegisterRequest(BaseModel):
    """Body of ``POST /art/models``."""

    name: str = Field(description="Served as `name` (latest step) and `name@step`.")
    project: str = Field(default="default", description="The project the model belongs to.")
    base_model: str = Field(description="Must be the base model this server serves.")


@health_router.get("/health", summary="Liveness: answers once the model is loaded (no API key needed)")
async def health() -> dict[str, str]:
    """``{"status": "ok"}``."""
    return {"status": "ok"}


@router.post("/models", summary="Register a trainable model (idempotent); step 0 is the base weights")
async def register_model(body: RegisterRequest, request: Request) -> JSONResponse:
    """201 with the new record, 200 with the existing one, 409 if the name has another base model."""
    record, created = _state(request).registry.register(body.name, body.project, body.base_model)
    return JSONResponse(record.public(), status_code=201 if created else 200)


@router.get("/models", summary="Every registered model")
async def list_models(request: Request) -> dict[str, Any]:
    """``{"data": [record, ...]}``."""
    return {"data": [record.public() for record in _state(request).registry.list()]}


@router.get("/models/{name}", summary="One registered model")
async def get_model(name: str, request: Request) -> dict[str, Any]:
    """The record of ``name``; 404 if it is not registered."""
    return _state(request).registry.require(name).public()


@router.get("/completions/{completion_id}", summary="The exact-token record of a completion")
async def get_completion(completion_id: str, request: Request) -> dict[str, Any]:
    """Prompt and completion token ids, logprobs and sampling settings of ``completion_id``."""
    record = _state(request).records.get(completion_id)
    if record is None:
        raise NotFoundError(
            f"no token record for completion id {completion_id!r}: this backend did not serve it "
            "(ids look like 'chatcmpl-...' or 'resp_...'; records live in the server's run directory)",
            param="completion_id",
            code="record_not_found",
        )
    return record.model_dump(mode="json")


@router.get("/stats", summary="Engine counters (batching) and store sizes")
async def stats(request: Request) -> dict[str, Any]:
    """Requests, tokens and the largest batch decoded so far."""
    return _state(request).stats()
