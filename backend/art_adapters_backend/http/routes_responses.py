"""``POST /v1/responses``: OpenAI's Responses API served through the chat-completions path.

The body becomes a chat request (:func:`..serving.responses.to_chat_request`), prepared, admitted,
decoded and recorded exactly as ``/v1/chat/completions`` does; the record is keyed by the response id.
"""

from __future__ import annotations

import logging

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from ..serving.chat import choice_record, make_record, prepare_chat
from ..serving.engine.base import ContextLengthError
from ..serving.responses import new_response_id, output_items, response_object, to_chat_request, usage
from ..serving.responses_types import ResponsesRequest
from ..state import ServerState
from .json_body import body_schema
from .responses_stream import open_response_stream
from .routes_openai import (
    COMPLETION_ID_HEADER,
    ClientGone,
    ClosingStreamingResponse,
    read_request,
    unless_disconnected,
)

__all__ = ["router"]

logger = logging.getLogger(__name__)

router = APIRouter(prefix="/v1", tags=["openai"])


@router.post(
    "/responses", summary="Create a model response (OpenAI Responses API)", response_model=None,
    openapi_extra=body_schema(ResponsesRequest),
)  # fmt: skip
async def create_response(request: Request) -> Response:
    """Answer a Responses request; its ``id`` keys the exact-token record (``GET /art/completions/{id}``).

    Admission (429), disconnect handling and limits are those of ``/v1/chat/completions``.
    ``store`` changes nothing here: no response is kept for ``previous_response_id`` (refused),
    and the exact-token record is kept either way.
    """
    state: ServerState = request.app.state.server
    chat_request = to_chat_request(body := await read_request(request, ResponsesRequest, "input"))
    admission = state.admission.admit(1)
    handed_over = False
    try:
        await state.records.check_writable()
        prepared = await prepare_chat(chat_request, state)
        prepared.completion_id = new_response_id()
        adapter = prepared.generation.adapter
        if body.stream:
            closed = False

            def on_close() -> None:
                nonlocal closed
                if not closed:
                    closed = True
                    try:
                        state.adapters.release(adapter)
                    finally:
                        state.admission.release(admission)

            try:
                events = await open_response_stream(body, prepared, state, on_close=on_close)
            except ContextLengthError as exc:
                on_close()
                exc.param = "input"
                raise
            except BaseException:
                on_close()
                raise
            handed_over = True  # the stream gives the places back when it ends
            return ClosingStreamingResponse(
                events, on_close=on_close, media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no",
                         COMPLETION_ID_HEADER: prepared.completion_id},
            )  # fmt: skip
        try:
            sequences = await unless_disconnected(request, state.engine.generate(prepared.generation))
        except ContextLengthError as exc:
            exc.param = "input"
            raise
        except ClientGone:
            logger.info("response %s: the client went away; decoding stopped", prepared.completion_id)
            return Response(status_code=499)
        finally:
            state.adapters.release(adapter)
        sequence = sequences[0]
        output = output_items(sequence, prepared, state)
        call_ids = [item["call_id"] for item in output if item["type"] == "function_call"]
        reason = "tool_calls" if call_ids else sequence.finish_reason
        record = choice_record(sequence, reason, call_ids)
        await state.records.put(make_record(prepared, [record], state, stream=False))
        status = "incomplete" if sequence.finish_reason == "length" else "completed"
        counts = usage(len(prepared.generation.prompt_token_ids), len(sequence.token_ids))
        content = response_object(body, prepared, output, status=status, usage_body=counts)
        return JSONResponse(content, headers={COMPLETION_ID_HEADER: prepared.completion_id})
    finally:
        if not handed_over:
            state.admission.release(admission)

