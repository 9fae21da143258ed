"""The OpenAI-compatible routes: ``GET /v1/models`` and ``POST /v1/chat/completions``."""

from __future__ import annotations

import logging
from functools import partial
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse

from .chat import choice_record, make_record, prepare_chat, response_body
from .engine.base import ContextLengthError
from .errors import BadRequestError
from .openai_types import ChatCompletionRequest
from .state import ServerState
from .streaming import open_stream

__all__ = ["router"]

logger = logging.getLogger(__name__)

router = APIRouter(prefix="/v1", tags=["openai"])


def _state(request: Request) -> ServerState:
    return request.app.state.server


@router.get("/models", summary="The served models: the base model, every registered name and name@step")
async def list_models(request: Request) -> dict[str, Any]:
    """OpenAI's model list; like vLLM's, each entry carries ``max_model_len`` (the context length in tokens)."""
    state = _state(request)
    created = int(state.started)
    data = []
    for name in state.registry.served_names():
        record = state.registry.get(name.partition("@")[0])
        data.append({
            "id": name,
            "object": "model",
            "created": record.created if record is not None else created,
            "owned_by": "art-adapters",
            "max_model_len": state.context_length,
        })  # fmt: skip
    return {"object": "list", "data": data}


@router.get("/models/{model_id}", summary="One served model")
async def get_model(model_id: str, request: Request) -> dict[str, Any]:
    """OpenAI's model object for ``model_id`` (a base model, ``name`` or ``name@step``); 404 if not served."""
    state = _state(request)
    served = state.registry.resolve(model_id)
    record = state.registry.get(served.trained_model) if served.trained_model else None
    created = record.created if record is not None else int(state.started)
    return {"id": model_id, "object": "model", "created": created, "owned_by": "art-adapters",
            "max_model_len": state.context_length}  # fmt: skip


#: Response header carrying the completion id, so clients that drop streamed chunk ids (LangChain's
#: ``ChatOpenAI`` with ``include_response_headers=True``) still link a turn to its token record.
COMPLETION_ID_HEADER = "X-Completion-Id"


@router.post("/chat/completions", summary="Create a chat completion (OpenAI-compatible)", response_model=None)
async def create_chat_completion(
    body: ChatCompletionRequest, request: Request
) -> JSONResponse | StreamingResponse:
    """Answer a chat request; the response ``id`` keys its exact-token record (``GET /art/completions/{id}``)."""
    state = _state(request)
    prepared = await prepare_chat(body, state)
    adapter = prepared.generation.adapter
    try:
        if body.wants_stream:
            events = await open_stream(prepared, state, on_close=partial(state.adapters.release, adapter))
            adapter = None  # the stream gives the lease back when it ends
            return StreamingResponse(
                events,
                media_type="text/event-stream",
                headers={
                    "Cache-Control": "no-cache",
                    "X-Accel-Buffering": "no",
                    COMPLETION_ID_HEADER: prepared.completion_id,
                },
            )
        sequences = await state.engine.generate(prepared.generation)
    except ContextLengthError as exc:
        raise BadRequestError(str(exc), param="messages", code="context_length_exceeded") from exc
    finally:
        state.adapters.release(adapter)
    content, finish_reasons = response_body(prepared, sequences, state)
    call_ids = [[c["id"] for c in choice["message"].get("tool_calls") or []] for choice in content["choices"]]
    records = [choice_record(seq, reason, ids) for seq, reason, ids in zip(
        sorted(sequences, key=lambda s: s.index), finish_reasons, call_ids, strict=True)]  # fmt: skip
    await state.records.put(make_record(prepared, records, state, stream=False))
    return JSONResponse(content, headers={COMPLETION_ID_HEADER: prepared.completion_id})
