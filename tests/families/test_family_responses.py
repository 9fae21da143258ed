"""``/v1/responses`` per model family: Responses input items render as vLLM renders the chat messages
they stand for (reasoning items included), forced calls are written in the family's syntax, and a
LangGraph graph on ``ChatOpenAI(use_responses_api=True)`` is captured on exact tokens and trains a step.
"""

from __future__ import annotations

import json
import re

import openai
import pytest

from tests.helpers.families_support import (
    SYSTEM,
    Family,
    assert_served_at_step_1,
    captured_add_run,
    family_model,
    forced_add_graph,
    trains_step_1,
)

pytestmark = [pytest.mark.slow, pytest.mark.parametrize("family", ["qwen3", "smollm2"], indirect=True)]

ADD = {"type": "function", "name": "add", "description": "Add two small integers.",
       "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                      "required": ["a", "b"]}}  # fmt: skip
CHAT_ADD = {"type": "function", "function": {k: v for k, v in ADD.items() if k != "type"}}


async def test_reasoning_call_and_output_items_render_as_the_chat_messages(family: Family) -> None:
    """reasoning + function_call items make one assistant turn (reasoning_content + tool_calls), a
    function_call_output a tool message: the record's prompt is vLLM's rendering of those messages."""
    client = openai.AsyncOpenAI(base_url=family.backend.openai_base_url, api_key="unused", max_retries=0)
    arguments = '{"a": 2, "b": 3}'
    response = await client.responses.create(
        model=family.base_model, instructions=SYSTEM, tools=[ADD], max_output_tokens=4, temperature=0,
        input=[
            {"role": "user", "content": [{"type": "input_text", "text": "What is 2 + 3?"}]},
            {"type": "reasoning", "id": "rs_1", "summary": [],
             "content": [{"type": "reasoning_text", "text": "I should add them."}]},
            {"type": "function_call", "call_id": "call_1", "name": "add", "arguments": arguments},
            {"type": "function_call_output", "call_id": "call_1", "output": "5"},
        ],
    )  # fmt: skip
    await client.close()
    chat = {
        "tools": [CHAT_ADD],
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "What is 2 + 3?"},
            {"role": "assistant", "content": None, "reasoning_content": "I should add them.",
             "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "add", "arguments": arguments}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "5"},
        ],
    }  # fmt: skip
    record = await family.backend.get_token_record(response.id)
    assert record["prompt_token_ids"] == family.prompt_ids(chat)
    if family.reasoning_parser == "qwen3":  # the reasoning is after the last user turn: Qwen3 renders it
        assert "I should add them." in family.tokenizer.decode(record["prompt_token_ids"])


async def test_forced_call_in_the_familys_syntax(family: Family) -> None:
    client = openai.AsyncOpenAI(base_url=family.backend.openai_base_url, api_key="unused", max_retries=0)
    response = await client.responses.create(
        model=family.base_model, instructions=SYSTEM, input="What is 2 + 3?", tools=[ADD],
        tool_choice={"type": "function", "name": "add"}, max_output_tokens=256, temperature=1.0,
    )  # fmt: skip
    await client.close()
    calls = [item for item in response.output if item.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "add" and set(json.loads(calls[0].arguments)) == {"a", "b"}
    assert all(item.type != "reasoning" for item in response.output)  # a forced call skips thinking
    record = await family.backend.get_token_record(response.id)
    chat = {"tools": [CHAT_ADD], "messages": [{"role": "system", "content": SYSTEM},
                                              {"role": "user", "content": "What is 2 + 3?"}]}  # fmt: skip
    assert record["prompt_token_ids"] == family.prompt_ids(chat) and record["constrained"]
    text = family.tokenizer.decode(record["choices"][0]["completion_token_ids"], skip_special_tokens=False)
    assert re.match(re.escape(family.forced_prefix) + family.call_syntax, text, re.DOTALL), text
    assert record["choices"][0]["tool_call_ids"] == [calls[0].call_id]


async def test_a_streamed_forced_call_has_no_reasoning_item_and_the_same_record(family: Family) -> None:
    """Streamed, a reasoning family's empty thinking block opens no reasoning item either (it is held
    until text shows): the output is the one function call, recorded with the family's prefix."""
    client = openai.AsyncOpenAI(base_url=family.backend.openai_base_url, api_key="unused", max_retries=0)
    stream = await client.responses.create(
        model=family.base_model, instructions=SYSTEM, input="What is 2 + 3?", tools=[ADD],
        tool_choice="required", max_output_tokens=256, temperature=1.0, stream=True,
    )  # fmt: skip
    events = [event async for event in stream]
    await client.close()
    assert not any(e.type.startswith("response.reasoning") for e in events)
    final = events[-1].response
    assert [item.type for item in final.output] == ["function_call"], final.output
    record = await family.backend.get_token_record(final.id)
    text = family.tokenizer.decode(record["choices"][0]["completion_token_ids"], skip_special_tokens=False)
    assert text.startswith(family.forced_prefix) and record["stream"] is True


async def test_a_graph_on_the_responses_api_trains_a_step_on_exact_tokens(family: Family) -> None:
    model = await family_model(family, "resp")
    graph = forced_add_graph(model, responses_api=True)
    runs = [await captured_add_run(graph) for _ in range(2)]
    for run in runs:
        assistants = [m for m in run.messages if m.role == "assistant"]
        assert all((m.completion_id or "").startswith("resp_") for m in assistants), assistants
        (call,) = run.messages[2].tool_calls or []
        assert call.function.name == "add" and set(json.loads(call.function.arguments)) == {"a", "b"}
        messages, tools = run.openai_messages(), [t.model_dump(exclude_none=True) for t in run.tools or []]
        for i, message in enumerate(run.messages):  # each turn was prompted with vLLM's rendering
            if message.role == "assistant":
                record = await family.backend.get_token_record(message.completion_id or "")
                assert record["prompt_token_ids"] == family.prompt_ids({"messages": messages[:i], "tools": tools})
    result = await trains_step_1(model, family, runs, 4)
    assert result.metrics["grad_norm"] > 0
    await assert_served_at_step_1(family, model)
