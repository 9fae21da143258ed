"""``POST /v1/responses`` through the openai SDK against the real server and bundled model.

Each request is checked against the chat-completions request it converts to: the same prompt
token ids in the record (one rendering path), the same greedy reply.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from art_adapters import LocalBackend

MODEL = "smollm2-135m-instruct"
ADD = {"type": "function", "name": "add", "description": "Add two integers.",
       "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                      "required": ["a", "b"]}}  # fmt: skip
CHAT_ADD = {"type": "function", "function": {k: v for k, v in ADD.items() if k != "type"}}


def _client(backend: LocalBackend) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=backend.openai_base_url, api_key="unused", max_retries=0)


async def _record(backend: LocalBackend, completion_id: str) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=backend.base_url) as http:
        response = await http.get(f"/art/completions/{completion_id}")
    assert response.status_code == 200, response.text
    return response.json()


@pytest.mark.slow
async def test_text_reply_renders_and_decodes_as_the_chat_route(local_backend: LocalBackend) -> None:
    """``instructions`` + string input == system + user messages: same prompt ids, same greedy text."""
    client = _client(local_backend)
    response = await client.responses.create(
        model=MODEL, instructions="Answer briefly.", input="Say hello to Ada.", temperature=0,
        max_output_tokens=8, store=False,
    )  # fmt: skip
    chat = await client.chat.completions.create(
        model=MODEL, temperature=0, max_tokens=8,
        messages=[{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Say hello to Ada."}],
    )  # fmt: skip
    await client.close()
    assert response.id.startswith("resp_") and response.object == "response"
    assert [item.type for item in response.output] == ["message"]
    assert response.output_text == chat.choices[0].message.content
    assert response.usage is not None and response.usage.output_tokens == chat.usage.completion_tokens
    assert response.status == ("incomplete" if chat.choices[0].finish_reason == "length" else "completed")
    record, chat_record = await _record(local_backend, response.id), await _record(local_backend, chat.id)
    assert record["id"] == response.id and record["stream"] is False  # kept although store: false
    assert record["prompt_token_ids"] == chat_record["prompt_token_ids"]
    assert record["choices"][0]["completion_token_ids"] == chat_record["choices"][0]["completion_token_ids"]


@pytest.mark.slow
async def test_forced_call_and_its_output_round_trip_as_chat_messages(local_backend: LocalBackend) -> None:
    """A named ``tool_choice`` is constrained to the tool's schema; sending the call and its output back
    renders the same prompt as the chat route's assistant ``tool_calls`` + ``tool`` messages."""
    client = _client(local_backend)
    called = await client.responses.create(
        model=MODEL, input="What is 2 + 3?", tools=[ADD], tool_choice={"type": "function", "name": "add"},
        temperature=0, max_output_tokens=40,
    )  # fmt: skip
    (call,) = called.output
    assert call.type == "function_call" and call.name == "add" and call.status == "completed"
    args = json.loads(call.arguments)
    assert set(args) == {"a", "b"} and all(isinstance(v, int) for v in args.values())
    assert (await _record(local_backend, called.id))["choices"][0]["tool_call_ids"] == [call.call_id]
    followed = await client.responses.create(
        model=MODEL, tools=[ADD], temperature=0, max_output_tokens=6,
        input=[{"role": "user", "content": "What is 2 + 3?"}, call.model_dump(exclude_none=True),
               {"type": "function_call_output", "call_id": call.call_id, "output": "5"}],
    )  # fmt: skip
    chat = await client.chat.completions.create(
        model=MODEL, tools=[CHAT_ADD], temperature=0, max_tokens=6,
        messages=[{"role": "user", "content": "What is 2 + 3?"},
                  {"role": "assistant", "content": None, "tool_calls": [
                      {"id": call.call_id, "type": "function",
                       "function": {"name": "add", "arguments": call.arguments}}]},
                  {"role": "tool", "tool_call_id": call.call_id, "content": "5"}],
    )  # fmt: skip
    await client.close()
    record, chat_record = await _record(local_backend, followed.id), await _record(local_backend, chat.id)
    assert record["prompt_token_ids"] == chat_record["prompt_token_ids"]
    assert followed.output_text == chat.choices[0].message.content


@pytest.mark.slow
async def test_json_schema_text_format_constrains_the_reply(local_backend: LocalBackend) -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}},
              "required": ["city"], "additionalProperties": False}  # fmt: skip
    client = _client(local_backend)
    response = await client.responses.create(
        model=MODEL, input="Name a city in France.", temperature=0, max_output_tokens=30,
        text={"format": {"type": "json_schema", "name": "city", "schema": schema, "strict": True}},
    )  # fmt: skip
    await client.close()
    assert set(json.loads(response.output_text)) == {"city"}
    assert (await _record(local_backend, response.id))["constrained"] is True
    assert response.text is not None and response.text.format.type == "json_schema"


@pytest.mark.slow
async def test_streamed_events_reassemble_to_the_plain_reply(local_backend: LocalBackend) -> None:
    """The event sequence OpenAI sends, numbered; the deltas join to the non-streamed text; the
    record (stream: true) is written before ``response.completed`` / ``response.incomplete``."""
    client = _client(local_backend)
    kwargs: dict[str, Any] = {"model": MODEL, "input": "Say hello to Ada.", "temperature": 0,
                              "max_output_tokens": 10, "include": ["message.output_text.logprobs"]}  # fmt: skip
    plain = await client.responses.create(**kwargs)
    events = [event async for event in await client.responses.create(stream=True, **kwargs)]
    await client.close()
    kinds = [event.type for event in events]
    end = "response.incomplete" if plain.status == "incomplete" else "response.completed"
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]  # fmt: skip
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done", end]
    assert [event.sequence_number for event in events] == list(range(len(events)))
    deltas = [event for event in events if event.type == "response.output_text.delta"]
    assert "".join(d.delta for d in deltas) == plain.output_text
    final = events[-1].response
    assert final.output_text == plain.output_text and final.usage.output_tokens == plain.usage.output_tokens
    logprobs = [lp for d in deltas for lp in d.logprobs]
    assert len(logprobs) == plain.usage.output_tokens == len(plain.output[0].content[0].logprobs)
    record = await _record(local_backend, final.id)
    assert record["stream"] is True
    assert [round(x, 4) for x in record["choices"][0]["logprobs"]] == [round(lp.logprob, 4) for lp in logprobs]


@pytest.mark.slow
async def test_streamed_forced_call(local_backend: LocalBackend) -> None:
    client = _client(local_backend)
    stream = await client.responses.create(
        model=MODEL, input="What is 2 + 3?", tools=[ADD], tool_choice="required", temperature=0,
        max_output_tokens=40, stream=True,
    )  # fmt: skip
    events = [event async for event in stream]
    await client.close()
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert len(done) == 1 and done[0].name == "add" and set(json.loads(done[0].arguments)) == {"a", "b"}
    final = events[-1].response
    assert [item.type for item in final.output] == ["function_call"]
    record = await _record(local_backend, final.id)
    assert record["choices"][0]["tool_call_ids"] == [final.output[0].call_id]
    assert record["choices"][0]["finish_reason"] == "tool_calls"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("extra", "param", "says"),
    [
        ({"previous_response_id": "resp_1"}, "previous_response_id", "send the whole conversation"),
        ({"conversation": "conv_1"}, "conversation", "keeps no conversations"),
        ({"background": True}, "background", "False"),
        ({"truncation": "auto"}, "truncation", "disabled"),
        ({"reasoning": {"effort": "high"}}, "reasoning.effort", "chat_template_kwargs"),
        ({"tools": [{"type": "web_search"}]}, "tools[0].type", "function tools only"),
        ({"tools": [ADD], "tool_choice": {"type": "allowed_tools", "mode": "auto", "tools": []}},
         "tool_choice", "allowed_tools"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0]", "item_reference"),
        ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "data:,"}]}]},
         "input[0].content[0]", "text-only"),
        ({"include": ["file_search_call.results"]}, "include", "file_search_call.results"),
        ({"top_logprobs": 2}, "top_logprobs", "message.output_text.logprobs"),
        ({"modalities": ["audio"]}, "modalities", "modalities"),
        ({"text": {"verbosity": "low"}}, "text.verbosity", "medium"),
        ({"input": []}, "input", "non-empty"),
    ],
)
async def test_unsupported_is_a_400_naming_it(
    local_backend: LocalBackend, extra: dict[str, Any], param: str, says: str
) -> None:
    body = {"model": MODEL, "input": "hi", "max_output_tokens": 4, **extra}
    async with httpx.AsyncClient(base_url=local_backend.openai_base_url) as http:
        response = await http.post("/responses", json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param and says in error["message"], error


@pytest.mark.slow
async def test_limits_are_the_chat_routes(local_backend: LocalBackend) -> None:
    """``max_output_tokens`` past the context is refused as chat's ``max_tokens`` is."""
    async with httpx.AsyncClient(base_url=local_backend.openai_base_url) as http:
        response = await http.post("/responses", json={"model": MODEL, "input": "hi", "max_output_tokens": 10**6})
        unknown = await http.post("/responses", json={"model": "no-such-model", "input": "hi"})
    assert response.status_code == 400 and response.json()["error"]["code"] == "context_length_exceeded"
    assert unknown.status_code == 404


@pytest.mark.slow
async def test_a_streamed_langchain_turn_on_the_responses_api_links_to_its_record(local_backend: LocalBackend) -> None:
    """``ChatOpenAI(use_responses_api=True, streaming=True)`` parses our events into a message whose id is
    the response id, which the trajectory handler keeps as the turn's completion id."""
    from langchain_openai import ChatOpenAI

    import art_adapters as aa

    llm = ChatOpenAI(model=MODEL, base_url=local_backend.openai_base_url, api_key="unused", temperature=0,
                     max_tokens=8, use_responses_api=True, streaming=True)  # fmt: skip
    handler = aa.TrajectoryCallbackHandler()
    chunks = [chunk async for chunk in llm.astream("Say hello to Ada.", config={"callbacks": [handler]})]
    text = "".join(c.text for c in chunks)
    trajectory = handler.trajectory
    assert trajectory is not None and [m.role for m in trajectory.messages] == ["user", "assistant"]
    answer = trajectory.messages[1]
    assert (answer.completion_id or "").startswith("resp_") and answer.content == text and text
    record = await _record(local_backend, answer.completion_id or "")
    assert record["stream"] is True and record["choices"][0]["text"] == text
