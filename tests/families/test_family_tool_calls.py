"""Forced tool calls per model family, whole and streamed: ``tool_choice`` ``required`` and named give
parsed ``tool_calls`` whose arguments are valid JSON matching the tool's schema, written in the
family's own call syntax (the exact-token record says so), with empty reasoning for a reasoning family.
The tiny Qwen3 model is random: only the constraint makes its calls well formed, so nothing here
depends on what the model would say by itself.
"""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import openai
import pytest

from tests.helpers.families_support import ADD, SET_MODE, SYSTEM, TOOLS, Family

MESSAGES = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What is 2 + 3?"}]
SCHEMAS = {tool["function"]["name"]: tool["function"]["parameters"] for tool in TOOLS}


def check_arguments(name: str, arguments: str) -> dict[str, Any]:
    """``arguments`` parsed, checked against the (flat) schema of tool ``name``."""
    schema = SCHEMAS[name]
    parsed = json.loads(arguments)
    assert isinstance(parsed, dict) and set(parsed) == set(schema["required"]), (name, arguments)
    for key, value in parsed.items():
        spec = schema["properties"][key]
        kind = {"integer": int, "boolean": bool, "string": str}[spec["type"]]
        assert isinstance(value, kind) and (kind is bool or not isinstance(value, bool)), (key, value)
        if "enum" in spec:
            assert value in spec["enum"], (key, value)
    return parsed


def check_reasoning(family: Family, reasoning: str | None) -> None:
    """A forced call skips thinking: a reasoning family's reasoning is empty, the others have none."""
    if family.reasoning_parser is None:
        assert reasoning is None
    else:
        assert (reasoning or "").strip() == "", reasoning


async def check_record(
    family: Family, completion_id: str, body: dict[str, Any], call_ids: list[list[str]]
) -> None:
    """The exact-token record: the request's prompt, and each choice sampled in the family's call syntax."""
    record = await family.backend.get_token_record(completion_id)
    assert record["prompt_token_ids"] == family.prompt_ids(body) and record["constrained"]
    for choice, ids in zip(record["choices"], call_ids, strict=True):
        text = family.tokenizer.decode(choice["completion_token_ids"], skip_special_tokens=False)
        assert re.match(re.escape(family.forced_prefix) + family.call_syntax, text, re.DOTALL), text
        assert choice["tool_call_ids"] == ids


@pytest.mark.slow
@pytest.mark.parametrize(
    ("tool_choice", "names"),
    [
        ("required", {"add", "set_mode"}),
        ({"type": "function", "function": {"name": "set_mode"}}, {"set_mode"}),
    ],
    ids=["required", "named"],
)
async def test_forced_calls_parse_into_tool_calls(family: Family, tool_choice: Any, names: set[str]) -> None:
    body = {"model": family.base_model, "messages": MESSAGES, "tools": TOOLS, "tool_choice": tool_choice,
            "n": 2, "max_tokens": 64, "temperature": 1.0, "seed": 7}  # fmt: skip
    async with httpx.AsyncClient(base_url=family.backend.openai_base_url, timeout=120) as client:
        response = await client.post("/chat/completions", json=body)
    assert response.status_code == 200, response.text
    reply = response.json()
    call_ids = []
    for choice in reply["choices"]:
        message = choice["message"]
        assert choice["finish_reason"] == "tool_calls", choice
        assert message["content"] is None
        check_reasoning(family, message.get("reasoning_content"))
        (call,) = message["tool_calls"]
        assert call["type"] == "function" and call["id"].startswith("call_")
        assert call["function"]["name"] in names
        check_arguments(call["function"]["name"], call["function"]["arguments"])
        call_ids.append([call["id"]])
    await check_record(family, reply["id"], body, call_ids)


@pytest.mark.slow
async def test_a_streamed_forced_call_parses_into_tool_call_deltas(family: Family) -> None:
    body = {"model": family.base_model, "messages": MESSAGES, "tools": [ADD, SET_MODE],
            "tool_choice": {"type": "function", "function": {"name": "add"}}, "max_tokens": 64,
            "temperature": 1.0, "seed": 11}  # fmt: skip
    client = openai.AsyncOpenAI(base_url=family.backend.openai_base_url, api_key="unused", max_retries=0)
    stream = await client.chat.completions.create(**body, stream=True)
    content, reasoning, finish = "", "", None
    calls: dict[int, dict[str, str]] = {}
    completion_id = None
    async for chunk in stream:
        completion_id = chunk.id
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        content += delta.content or ""
        reasoning += (delta.model_extra or {}).get("reasoning_content") or ""
        for part in delta.tool_calls or []:
            call = calls.setdefault(part.index, {"id": "", "name": "", "arguments": ""})
            call["id"] += part.id or ""
            if part.function is not None:
                call["name"] += part.function.name or ""
                call["arguments"] += part.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    await client.close()
    assert finish == "tool_calls" and content == ""
    check_reasoning(family, reasoning or None)
    (call,) = calls.values()
    assert call["name"] == "add" and call["id"].startswith("call_")
    check_arguments("add", call["arguments"])
    assert completion_id is not None
    await check_record(family, completion_id, body, [[call["id"]]])


@pytest.mark.slow
async def test_a_forced_call_with_thinking_off_follows_the_prompts_empty_block(family: Family) -> None:
    """With ``enable_thinking`` false the prompt ends in Qwen3's empty thinking block: the call comes next."""
    body = {"model": family.base_model, "messages": MESSAGES, "tools": TOOLS, "tool_choice": "required",
            "chat_template_kwargs": {"enable_thinking": False}, "max_tokens": 64, "temperature": 1.0,
            "seed": 3}  # fmt: skip
    async with httpx.AsyncClient(base_url=family.backend.openai_base_url, timeout=120) as client:
        response = await client.post("/chat/completions", json=body)
    assert response.status_code == 200, response.text
    (choice,) = response.json()["choices"]
    assert choice["finish_reason"] == "tool_calls" and choice["message"].get("reasoning_content") is None
    (call,) = choice["message"]["tool_calls"]
    check_arguments(call["function"]["name"], call["function"]["arguments"])
    record = await family.backend.get_token_record(response.json()["id"])
    assert record["prompt_token_ids"] == family.prompt_ids(body)
    text = family.tokenizer.decode(record["choices"][0]["completion_token_ids"], skip_special_tokens=False)
    assert re.match(family.call_syntax, text, re.DOTALL), text
