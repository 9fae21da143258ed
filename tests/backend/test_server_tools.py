"""Tool calling against the real server and model: forced calls, streaming deltas, a round trip."""

from __future__ import annotations

import asyncio
import json

import openai
import pytest

from art_adapters import LocalBackend

MODEL = "smollm2-135m-instruct"


def _tool(name: str, description: str) -> dict:
    params = {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    }
    return {"type": "function", "function": {"name": name, "description": description, "parameters": params}}


ADD, MUL = _tool("add", "Add two integers."), _tool("multiply", "Multiply two integers.")
ASK = [{"role": "user", "content": "What is 2 + 3? Use the add tool."}]


def _client(backend: LocalBackend) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=backend.openai_base_url, api_key="unused", max_retries=0)


def _int_args(arguments: str) -> dict:
    args = json.loads(arguments)
    assert set(args) == {"a", "b"} and all(isinstance(v, int) for v in args.values())
    return args


@pytest.mark.slow
async def test_forced_tool_calls_named_required_and_streamed(local_backend: LocalBackend) -> None:
    """Three forced calls sent together (decoded in one batch): named, required, and streamed."""
    client = _client(local_backend)
    named_choice = {"type": "function", "function": {"name": "multiply"}}

    async def streamed() -> list:
        stream = await client.chat.completions.create(
            model=MODEL,
            messages=ASK,
            tools=[ADD],
            tool_choice="required",
            temperature=0,
            max_tokens=40,
            stream=True,
        )
        return [chunk async for chunk in stream]

    named, required, chunks = await asyncio.gather(
        client.chat.completions.create(
            model=MODEL,
            messages=ASK,
            tools=[ADD, MUL],
            temperature=0,
            max_tokens=40,
            tool_choice=named_choice,
        ),
        client.chat.completions.create(
            model=MODEL,
            messages=ASK,
            tools=[ADD, MUL],
            tool_choice="required",
            temperature=0.7,
            seed=3,
            max_tokens=40,
        ),
        streamed(),
    )
    await client.close()

    choice = named.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    [call] = choice.message.tool_calls or []
    assert call.type == "function" and call.function.name == "multiply" and call.id.startswith("call_")
    _int_args(call.function.arguments)

    [call] = required.choices[0].message.tool_calls or []
    assert call.function.name in {"add", "multiply"}
    _int_args(call.function.arguments)
    record = await local_backend.get_token_record(required.id)
    assert record["constrained"] is True and record["choices"][0]["finish_reason"] == "tool_calls"
    text = record["choices"][0]["text"]
    assert text.startswith("<tool_call>\n{") and text.endswith("}\n</tool_call>")

    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert deltas[0].role == "assistant"
    assert "".join(d.content or "" for d in deltas) == ""  # nothing of the call leaks into content
    parts = [tc for d in deltas for tc in d.tool_calls or []]
    assert parts[0].id and parts[0].function and parts[0].function.name == "add"
    assert {p.index for p in parts} == {0}
    assert _int_args("".join(p.function.arguments or "" for p in parts if p.function))
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == [
        "tool_calls"
    ]


@pytest.mark.slow
async def test_tool_call_round_trip_answers_from_the_tool_result(local_backend: LocalBackend) -> None:
    client = _client(local_backend)
    first = await client.chat.completions.create(
        model=MODEL, messages=ASK, tools=[ADD], tool_choice={"type": "function", "function": {"name": "add"}},
        temperature=0, max_tokens=40,
    )  # fmt: skip
    call = (first.choices[0].message.tool_calls or [])[0]
    result = sum(json.loads(call.function.arguments).values())
    history = [
        *ASK,
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": str(result)},
    ]
    second = await client.chat.completions.create(
        model=MODEL, messages=history, tools=[ADD], temperature=0, max_tokens=16
    )
    await client.close()
    answer = second.choices[0]
    assert answer.message.content and answer.message.content.strip()
    assert answer.finish_reason in {"stop", "length", "tool_calls"}
    first_record = await local_backend.get_token_record(first.id)
    second_record = await local_backend.get_token_record(second.id)
    # Exact-token training relies on this: the first prompt is a token prefix of the second.
    prefix = first_record["prompt_token_ids"]
    assert second_record["prompt_token_ids"][: len(prefix)] == prefix
    assert len(second_record["prompt_token_ids"]) > len(prefix) + len(
        first_record["choices"][0]["completion_token_ids"]
    )


@pytest.mark.slow
async def test_tool_choice_none_returns_text_only(local_backend: LocalBackend) -> None:
    client = _client(local_backend)
    response = await client.chat.completions.create(
        model=MODEL, messages=ASK, tools=[ADD], tool_choice="none", temperature=0, max_tokens=4
    )
    await client.close()
    assert (
        response.choices[0].message.tool_calls is None and response.choices[0].finish_reason != "tool_calls"
    )
