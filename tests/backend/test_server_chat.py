"""Chat completions through the openai SDK (sync and async) against the real server and model."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import openai
import pytest
from art_adapters_backend.serving.chat_template import ChatTemplate

from art_adapters import LocalBackend

MODEL = "smollm2-135m-instruct"
HELLO = [{"role": "user", "content": "Say hello to Ada in one short sentence."}]


@pytest.fixture(scope="module")
def template() -> ChatTemplate:
    from art_adapters_backend.bundled import load_tokenizer, resolve_model_path
    from art_adapters_backend.serving.model_family import resolve_model_family

    tokenizer = load_tokenizer(resolve_model_path(MODEL))
    return ChatTemplate(tokenizer, resolve_model_family(tokenizer, bundled=True).chat_template)


def _sync_client(backend: LocalBackend) -> openai.OpenAI:
    return openai.OpenAI(base_url=backend.openai_base_url, api_key="unused", max_retries=0)


def _async_client(backend: LocalBackend) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=backend.openai_base_url, api_key="unused", max_retries=0)


@pytest.mark.slow
def test_sync_sdk_plain_chat(local_backend: LocalBackend) -> None:
    with _sync_client(local_backend) as client:
        response = client.chat.completions.create(model=MODEL, messages=HELLO, temperature=0, max_tokens=6)
    assert response.id.startswith("chatcmpl-") and response.object == "chat.completion"
    assert response.model == MODEL and len(response.choices) == 1
    choice = response.choices[0]
    assert choice.message.role == "assistant" and choice.message.content and choice.message.content.strip()
    assert choice.message.tool_calls is None and choice.finish_reason in {"stop", "length"}
    assert response.usage is not None and 0 < response.usage.completion_tokens <= 6
    assert response.usage.total_tokens == response.usage.prompt_tokens + response.usage.completion_tokens


@pytest.mark.slow
async def test_async_sdk_streaming_reassembles_to_the_greedy_answer(local_backend: LocalBackend) -> None:
    client = _async_client(local_backend)
    plain = await client.chat.completions.create(
        model=MODEL, messages=HELLO, temperature=0, max_tokens=10, logprobs=True
    )
    stream = await client.chat.completions.create(
        model=MODEL, messages=HELLO, temperature=0, max_tokens=10, stream=True, logprobs=True,
        stream_options={"include_usage": True},
    )  # fmt: skip
    chunks = [chunk async for chunk in stream]
    await client.close()
    assert plain.choices[0].message.content == "".join(
        c.choices[0].delta.content or "" for c in chunks if c.choices
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    assert len({c.id for c in chunks}) == 1 and chunks[0].id != plain.id
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == [plain.choices[0].finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert plain.usage is not None
    streamed_usage = chunks[-1].usage
    # The same counts; the streamed request repeats the prompt, so the prefix cache holds all of it.
    assert (streamed_usage.prompt_tokens, streamed_usage.completion_tokens, streamed_usage.total_tokens) == (
        plain.usage.prompt_tokens, plain.usage.completion_tokens, plain.usage.total_tokens
    )
    assert streamed_usage.prompt_tokens_details is not None
    assert streamed_usage.prompt_tokens_details.cached_tokens == streamed_usage.prompt_tokens
    assert all(c.usage is None for c in chunks[:-1])
    streamed_logprobs = [
        e for c in chunks if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content or []
    ]
    plain_logprobs = plain.choices[0].logprobs.content if plain.choices[0].logprobs else None
    assert [e.token for e in streamed_logprobs] == [e.token for e in plain_logprobs or []]
    assert [e.logprob for e in streamed_logprobs] == pytest.approx(
        [e.logprob for e in plain_logprobs or []], abs=1e-4
    )
    # The streamed completion is recorded too.
    record = await local_backend.get_token_record(chunks[0].id)
    assert record["stream"] is True and record["choices"][0]["text"] == plain.choices[0].message.content


@pytest.mark.slow
async def test_logprobs_and_the_token_record_match_the_response(
    local_backend: LocalBackend, template: ChatTemplate
) -> None:
    client = _async_client(local_backend)
    response = await client.chat.completions.create(
        model=MODEL, messages=HELLO, temperature=0, max_tokens=8, logprobs=True, top_logprobs=3, seed=7
    )
    await client.close()
    choice = response.choices[0]
    assert choice.logprobs is not None and choice.logprobs.content is not None
    entries = choice.logprobs.content
    assert len(entries) == response.usage.completion_tokens if response.usage else False
    for entry in entries:
        assert entry.logprob <= 0 and len(entry.top_logprobs) == 3
        assert entry.top_logprobs[0].token == entry.token  # greedy: the most likely token was taken
        assert entry.top_logprobs[0].logprob == pytest.approx(entry.logprob)
    assert b"".join(bytes(e.bytes or []) for e in entries).decode() == choice.message.content

    record = await local_backend.get_token_record(response.id)
    assert record["id"] == response.id and record["model"] == MODEL and record["temperature"] == 0.0
    assert record["prompt_token_ids"] == template.encode(HELLO)
    [recorded] = record["choices"]
    assert template.tokenizer.decode(recorded["completion_token_ids"]) == choice.message.content
    assert recorded["logprobs"] == [e.logprob for e in entries]
    assert [[t for t, _ in row] for row in recorded["top_logprobs"]] == [
        template.tokenizer.convert_tokens_to_ids(
            [template.tokenizer.convert_ids_to_tokens(t) for t, _ in row]) for row in recorded["top_logprobs"]
    ]  # fmt: skip
    assert recorded["finish_reason"] == choice.finish_reason


@pytest.mark.slow
async def test_n_seed_stop_and_json_response_format(local_backend: LocalBackend) -> None:
    client = _async_client(local_backend)
    kwargs: dict[str, Any] = {"model": MODEL, "messages": HELLO, "temperature": 1.0, "max_tokens": 6, "n": 3}
    first = await client.chat.completions.create(seed=11, **kwargs)
    again = await client.chat.completions.create(seed=11, **kwargs)
    assert [c.index for c in first.choices] == [0, 1, 2]
    assert [c.message.content for c in first.choices] == [c.message.content for c in again.choices]
    record = await local_backend.get_token_record(first.id)
    assert len(record["choices"]) == 3 and record["n"] == 3 and record["seed"] == 11

    schema = {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 10}},
        "required": ["city"],
    }
    count = [{"role": "user", "content": "Count from 1 to 9, separated by commas."}]
    stopped, structured = await asyncio.gather(  # decoded together
        client.chat.completions.create(model=MODEL, messages=count, temperature=0, max_tokens=16, stop=["3"]),
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Name a city in France as JSON."}], temperature=0,
            max_tokens=16, response_format={"type": "json_schema", "json_schema": {"name": "city", "schema": schema}},
        ),
    )  # fmt: skip
    assert "3" not in (stopped.choices[0].message.content or "")
    assert stopped.choices[0].finish_reason == "stop"
    await client.close()
    data = json.loads(structured.choices[0].message.content or "")
    assert set(data) == {"city"} and isinstance(data["city"], str)


@pytest.mark.slow
async def test_models_list_and_health(local_backend: LocalBackend) -> None:
    async with httpx.AsyncClient(base_url=local_backend.base_url) as http:
        assert (await http.get("/health")).json() == {"status": "ok"}
        models = (await http.get("/v1/models")).json()
        assert models["object"] == "list" and MODEL in [m["id"] for m in models["data"]]
        assert all(m["object"] == "model" and m["max_model_len"] == 8192 for m in models["data"])
        assert (await http.get(f"/v1/models/{MODEL}")).json() | {"created": 0} == {
            "id": MODEL, "object": "model", "created": 0, "owned_by": "art-adapters", "max_model_len": 8192
        }
        missing = await http.get("/v1/models/nope@3")
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"
        openapi = (await http.get("/openapi.json")).json()
        assert {"/v1/chat/completions", "/art/models", "/art/completions/{completion_id}"} <= set(
            openapi["paths"]
        )
