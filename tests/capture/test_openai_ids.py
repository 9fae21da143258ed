"""Completion ids from a real ``ChatOpenAI`` (the class ``TrainableModel.chat_model()`` returns).

The OpenAI-compatible server is an ``httpx.MockTransport`` answering as our backend does
(ids ``chatcmpl-<hex>``), so this runs in milliseconds; the backend itself is exercised by
``test_end_to_end.py``.
"""

from __future__ import annotations

import json

import httpx
from langchain_openai import ChatOpenAI

from art_adapters._capture.langchain import TrajectoryCallbackHandler

COMPLETION_ID = "chatcmpl-0123456789abcdef"


def respond(request: httpx.Request) -> httpx.Response:
    body = json.loads(request.content)
    usage = {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9}
    if not body.get("stream"):
        return httpx.Response(
            200,
            json={
                "id": COMPLETION_ID,
                "object": "chat.completion",
                "created": 1,
                "model": body["model"],
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "Hi there"},
                        "finish_reason": "stop",
                    }
                ],
                "usage": usage,
            },
            headers={"x-completion-id": COMPLETION_ID},
        )
    chunks = [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hi"}, "finish_reason": None}]},
        {"choices": [{"index": 0, "delta": {"content": " there"}, "finish_reason": "stop"}]},
        {"choices": [], "usage": usage},
    ]
    lines = [
        "data: "
        + json.dumps(
            {
                "id": COMPLETION_ID,
                "object": "chat.completion.chunk",
                "created": 1,
                "model": body["model"],
                **c,
            }
        )
        for c in chunks
    ]
    return httpx.Response(
        200,
        text="\n\n".join([*lines, "data: [DONE]"]) + "\n\n",
        headers={"content-type": "text/event-stream", "x-completion-id": COMPLETION_ID},
    )


def chat_model(**kwargs) -> ChatOpenAI:
    transport = httpx.MockTransport(respond)
    return ChatOpenAI(
        model="agent@0",
        base_url="http://backend.test/v1",
        api_key="not-needed",
        http_client=httpx.Client(transport=transport),
        http_async_client=httpx.AsyncClient(transport=transport),
        **kwargs,
    )


async def test_a_non_streamed_completion_keeps_its_id_and_usage() -> None:
    handler = TrajectoryCallbackHandler()
    await chat_model().ainvoke("Say hi", config={"callbacks": [handler]})
    reply = handler.trajectory.messages[-1]
    assert (reply.content, reply.completion_id) == ("Hi there", COMPLETION_ID)
    assert (
        handler.trajectory.metrics["prompt_tokens"] == 7
        and handler.trajectory.metrics["completion_tokens"] == 2
    )


async def test_a_streamed_completion_keeps_its_id_through_the_response_header() -> None:
    """LangChain drops streamed chunks' ids; the backend's ``X-Completion-Id`` header (kept by
    ``include_response_headers=True``, which ``TrainableModel.chat_model()`` sets) links the turn."""
    handler = TrajectoryCallbackHandler()
    llm = chat_model(stream_usage=True, include_response_headers=True)
    chunks = [c async for c in llm.astream("Say hi", config={"callbacks": [handler]})]
    assert "".join(str(c.content) for c in chunks) == "Hi there"
    reply = handler.trajectory.messages[-1]
    assert (reply.content, reply.completion_id) == ("Hi there", COMPLETION_ID)
    assert handler.trajectory.metrics["completion_tokens"] == 2


async def test_a_streamed_completion_without_the_header_has_no_id() -> None:
    """Without the headers the id is unknown (None), never guessed from LangChain's own run ids."""
    handler = TrajectoryCallbackHandler()
    chunks = [
        c async for c in chat_model(stream_usage=True).astream("Say hi", config={"callbacks": [handler]})
    ]
    assert "".join(str(c.content) for c in chunks) == "Hi there"
    assert handler.trajectory.messages[-1].completion_id is None
