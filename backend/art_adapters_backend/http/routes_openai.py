"""The OpenAI-compatible routes: ``GET /v1/models`` and ``POST /v1/chat/completions``.

A chat completion is admitted within the server's limits, and stops decoding as soon as its client
goes away, so an abandoned request never holds batch slots.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from typing import Any, TypeVar

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel
from starlette.types import Receive, Scope, Send

from ..serving.chat import (
    PreparedChat,
    choice_record,
    make_record,
    prepare_chat,
    response_body,
    too_many_tools,
)
from ..serving.engine.base import ContextLengthError
from ..serving.openai_types import ChatCompletionRequest
from ..state import ServerState
from .json_body import body_schema, read_json_body
from .streaming import open_stream

__all__ = [
    "COMPLETION_ID_HEADER", "ClientGone", "ClosingStreamingResponse", "read_request", "router", "unless_disconnected",
]  # fmt: skip

logger = logging.getLogger(__name__)

router = APIRouter(prefix="/v1", tags=["openai"])

#: Seconds between checks that the client of a non-streaming completion is still connected.
DISCONNECT_POLL_S = 0.25

_T = TypeVar("_T")
_B = TypeVar("_B", bound=BaseModel)


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


async def read_request(request: Request, model: type[_B], turns: str) -> _B:
    """The body as ``model`` (a chat or Responses request), read in a worker thread a turn and a tool at
    a time (:mod:`.json_body`): a large body never holds the event loop, and a request offering more
    tools than ``--max-tools`` is refused once they are counted, before any is validated. ``turns``
    names the body's list of turns (``messages``, ``input``)."""
    raw = await request.body()
    max_tools = _state(request).config.limits.max_tools
    rules = {turns: None, "tools": (max_tools, partial(too_many_tools, limit=max_tools, read_no_further=True))}
    # the default pool, not the request-work one: a big body must not hold up prompt rendering
    return await asyncio.to_thread(read_json_body, raw, model, rules)


@router.post(
    "/chat/completions", summary="Create a chat completion (OpenAI-compatible)", response_model=None,
    openapi_extra=body_schema(ChatCompletionRequest),
)  # fmt: skip
async def create_chat_completion(request: Request) -> Response:
    """Answer a chat request; the response ``id`` keys its exact-token record (``GET /art/completions/{id}``).

    429 with ``Retry-After`` when the server is at ``--max-concurrent-requests`` or
    ``--max-queued-sequences``. The request holds a place in the server's
    :class:`~.admission.AdmissionGate` until its response ends, and stops decoding as soon as
    its client goes away: a stream when a chunk cannot be sent, a plain request when a poll of
    the connection (every :data:`DISCONNECT_POLL_S`) finds it closed. Either way the engine
    frees the choices' batch slots and no record is written (nothing was acknowledged).
    """
    body = await read_request(request, ChatCompletionRequest, "messages")
    state = _state(request)
    admission = state.admission.admit(body.n or 1)  # before any work: 429 when full
    handed_over = False
    try:
        await state.records.check_writable()  # 503 before decoding when no record could be kept
        prepared = await prepare_chat(body, state)
        if body.wants_stream:
            response = await _stream(prepared, state, partial(state.admission.release, admission))
            handed_over = True  # the stream gives the place back when it ends
            return response
        return await _complete(prepared, request, state)
    finally:
        if not handed_over:
            state.admission.release(admission)


async def _stream(
    prepared: PreparedChat, state: ServerState, release_admission: Callable[[], None]
) -> Response:
    """The SSE response; the adapter lease and the admission are given back when it ends."""
    adapter = prepared.generation.adapter
    closed = False

    def on_close() -> None:
        nonlocal closed
        if closed:
            return
        closed = True
        try:
            state.adapters.release(adapter)
        finally:
            release_admission()

    try:
        events = await open_stream(prepared, state, on_close=on_close)
    except ContextLengthError as exc:  # a 400 already; name the field at fault
        on_close()
        exc.param = "messages"
        raise
    except BaseException:
        on_close()
        raise
    return ClosingStreamingResponse(
        events,
        on_close=on_close,
        media_type="text/event-stream",
        headers={
            "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no",
            COMPLETION_ID_HEADER: prepared.completion_id,
        },
    )


async def _complete(prepared: PreparedChat, request: Request, state: ServerState) -> Response:
    """The ``chat.completion`` response, once its record is durable; decoding stops if the client goes."""
    adapter = prepared.generation.adapter
    try:
        sequences = await unless_disconnected(request, state.engine.generate(prepared.generation))
    except ContextLengthError as exc:  # a 400 already; name the field at fault
        exc.param = "messages"
        raise
    except ClientGone:
        logger.info("completion %s: the client went away; decoding stopped", prepared.completion_id)
        return Response(status_code=499)  # nobody reads it; nothing was acknowledged or recorded
    finally:
        state.adapters.release(adapter)
    content, finish_reasons = response_body(prepared, sequences, state)
    call_ids = [[c["id"] for c in choice["message"].get("tool_calls") or []] for choice in content["choices"]]
    records = [choice_record(seq, reason, ids) for seq, reason, ids in zip(
        sorted(sequences, key=lambda s: s.index), finish_reasons, call_ids, strict=True)]  # fmt: skip
    await state.records.put(make_record(prepared, records, state, stream=False))
    return JSONResponse(content, headers={COMPLETION_ID_HEADER: prepared.completion_id})


class ClientGone(Exception):
    """The client of a non-streaming request closed its connection."""


async def unless_disconnected(request: Request, work: Awaitable[_T]) -> _T:
    """Await ``work``, cancelling it (and raising :class:`ClientGone`) once the client disconnects.

    Starlette's ``Request.is_disconnected`` is polled every :data:`DISCONNECT_POLL_S`: the body
    has been read, so the next ASGI message can only be ``http.disconnect``.
    """
    task = asyncio.ensure_future(work)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=DISCONNECT_POLL_S)
            if done:
                return task.result()
            if await request.is_disconnected():
                task.cancel()
                await asyncio.wait({task})
                raise ClientGone
    finally:
        if not task.done():  # this request itself was cancelled (the server is stopping)
            task.cancel()


class ClosingStreamingResponse(StreamingResponse):
    """A stream that is closed, and ``on_close`` run, however the response ends.

    Finished, cut short by the client (then at once, not when the generator is collected) or
    never started (the client went before the first byte): the engine stops decoding for it
    and its places are given back.
    """

    def __init__(self, content: AsyncIterator[str], *, on_close: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self._on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            try:
                aclose = getattr(self.body_iterator, "aclose", None)
                if aclose is not None:
                    await aclose()
            finally:
                self._on_close()
