"""Prompt parity over HTTP, per model family: the prompt ids the backend recorded for a request are
exactly the ids of the family's chat template rendering the same request as vLLM's OpenAI server does
(see ``tests.helpers.families_support``). Plain, system, tools, tool result, multi-turn with earlier reasoning,
thinking on and off, content parts, and tools without a description or parameters.
"""

from __future__ import annotations

import difflib
import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers.families_support import SYSTEM, TOOLS, Family


def _call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


#: One chat request of each kind (without ``model``), as a client sends it.
REQUESTS: dict[str, dict[str, Any]] = {
    "plain": {"messages": [{"role": "user", "content": "What is 2 + 3?"}]},
    "system": {
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What is 2 + 3?"}]
    },
    "tools": {
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What is 2 + 3?"}],
        "tools": TOOLS,
    },
    "tool_result": {
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "What is 2 + 3?"},
            {"role": "assistant", "content": None, "tool_calls": [_call("call_1", "add", {"a": 2, "b": 3})]},
            {"role": "tool", "tool_call_id": "call_1", "content": "5"},
        ],
        "tools": TOOLS,
    },
    # Earlier turns with reasoning: Qwen3 drops the thinking of turns before the last user query
    # and keeps it for the tool-calling turn after it.
    "multi_turn_reasoning": {
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "What is 2 + 3?"},
            {
                "role": "assistant",
                "content": "Let me add.",
                "reasoning_content": "The user wants a sum.",
                "tool_calls": [_call("call_1", "add", {"a": 2, "b": 3})],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "5"},
            {"role": "assistant", "content": "2 + 3 = 5.", "reasoning_content": "I have the result."},
            {"role": "user", "content": "And 5 + 4, in radians?"},
            {
                "role": "assistant",
                "content": "",
                "reasoning_content": "Two calls: the mode, then the sum.",
                "tool_calls": [
                    _call("call_2", "set_mode", {"mode": "rad", "verbose": False}),
                    _call("call_3", "add", {"a": 5, "b": 4}),
                ],
            },
            {"role": "tool", "tool_call_id": "call_2", "content": "ok"},
            {"role": "tool", "tool_call_id": "call_3", "content": "9"},
        ],
        "tools": TOOLS,
    },
    "thinking_off": {
        "messages": [{"role": "user", "content": "What is 2 + 3?"}],
        "chat_template_kwargs": {"enable_thinking": False},
    },
    "thinking_on_with_tools": {
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What is 2 + 3?"}],
        "tools": TOOLS,
        "chat_template_kwargs": {"enable_thinking": True},
    },
    "content_parts": {
        "messages": [
            {"role": "system", "content": [{"type": "text", "text": SYSTEM}]},
            {
                "role": "user",
                "content": [{"type": "text", "text": "What is"}, {"type": "text", "text": "2 + 3?"}],
            },
        ]
    },
    "tool_without_description": {
        "messages": [{"role": "user", "content": "What time is it?"}],
        "tools": [
            {
                "type": "function",
                "function": {"name": "now", "parameters": {"type": "object", "properties": {}}},
            }
        ],
    },
    "tool_without_parameters": {
        "messages": [{"role": "user", "content": "What time is it?"}],
        "tools": [{"type": "function", "function": {"name": "now", "description": "The current time."}}],
    },
}


#: Mismatches found by this suite and not fixed yet, with the component at fault. Strict: once
#: fixed, the test passes, the xfail fails, and the entry must go.
KNOWN_GAPS: dict[tuple[str, str], str] = {}


def _diff(family: Family, expected: list[int], got: list[int]) -> str:
    """A readable diff of two prompts (decoded text, first differing token)."""
    first = next(
        (i for i, (a, b) in enumerate(zip(expected, got, strict=False)) if a != b),
        min(len(expected), len(got)),
    )
    text = difflib.unified_diff(
        family.tokenizer.decode(expected).splitlines(),
        family.tokenizer.decode(got).splitlines(),
        "vLLM rendering",
        "backend record",
        lineterm="",
    )
    return f"first difference at token {first} of {len(expected)} / {len(got)}:\n" + "\n".join(text)


async def recorded_prompt(family: Family, body: dict[str, Any]) -> list[int]:
    """POST the request to the family's backend; the prompt ids of its exact-token record."""
    backend = family.backend
    async with httpx.AsyncClient(base_url=backend.openai_base_url, timeout=120) as client:
        response = await client.post("/chat/completions", json=body)
    assert response.status_code == 200, response.text
    completion_id = response.headers["X-Completion-Id"]
    assert completion_id == response.json()["id"]
    record = await backend.get_token_record(completion_id)
    return list(record["prompt_token_ids"])


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(REQUESTS))
async def test_recorded_prompt_is_the_chat_templates_rendering(
    family: Family, kind: str, request: pytest.FixtureRequest
) -> None:
    if (gap := KNOWN_GAPS.get((family.name, kind))) is not None:
        request.applymarker(pytest.mark.xfail(strict=True, reason=gap))
    body = {"model": family.base_model, **REQUESTS[kind], "max_tokens": 1, "temperature": 0}
    expected = family.prompt_ids(body)
    got = await recorded_prompt(family, body)
    assert got == expected, f"{family.name} / {kind}: " + _diff(family, expected, got)


@pytest.mark.slow
async def test_template_kwargs_and_history_change_the_rendering(family: Family) -> None:
    """The parity cases can fail: their variations render differently where the template says so."""
    plain = family.render({"messages": REQUESTS["plain"]["messages"]})
    thinking_off = family.render(REQUESTS["thinking_off"])
    multi = family.render(REQUESTS["multi_turn_reasoning"])
    if family.reasoning_parser == "qwen3":
        assert thinking_off == plain + "<think>\n\n</think>\n\n"
        # The turn after the last user query keeps its reasoning; the earlier turns lose theirs.
        assert "<think>\nTwo calls: the mode, then the sum.\n</think>" in multi
        assert "The user wants a sum." not in multi and "I have the result." not in multi
    else:
        assert thinking_off == plain and "Two calls" not in multi
    # The earlier calls are rendered again in the family's own call syntax, arguments as JSON objects.
    assert re.search(family.call_syntax, multi, re.DOTALL) and '"set_mode"' in multi
    assert '{"mode": "rad", "verbose": false}' in multi


@pytest.mark.slow
async def test_the_server_serves_with_the_familys_template_and_parsers(family: Family) -> None:
    run_dir = Path(family.backend.run_dir)
    settings = json.loads((run_dir / "serving.json").read_text())
    assert (settings["tool_call_parser"], settings["reasoning_parser"]) == (
        family.tool_call_parser,
        family.reasoning_parser,
    )
    assert (run_dir / settings["chat_template_file"]).read_text(encoding="utf-8") == family.chat_template
