"""train-mcp's forced first call with bounded strings and arrays (``bound_schema``), per model family:
the constraint closes every string within ``maxLength`` and every array within ``maxItems``, so even the
random tiny Qwen3, which loops inside an open string, ends its call well within the token limit."""

from __future__ import annotations

import json

import httpx
import pytest

from art_adapters.apps._forced_call import bound_schema
from tests.helpers.families_support import SYSTEM, Family

PARAMETERS = {
    "type": "object",
    "properties": {"title": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}}},
    "required": ["title", "tags"],
}


@pytest.mark.slow
async def test_a_bounded_forced_call_finishes_within_its_bounds(family: Family) -> None:
    tool = {"type": "function", "function": {"name": "tag_note", "description": "Tag a note.",
                                             "parameters": bound_schema(PARAMETERS, 8, 2)}}  # fmt: skip
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Tag my Lisbon note."}]
    body = {"model": family.base_model, "messages": messages, "tools": [tool], "tool_choice": "required",
            "n": 3, "max_tokens": 64, "temperature": 1.0, "seed": 11}  # fmt: skip
    async with httpx.AsyncClient(base_url=family.backend.openai_base_url, timeout=300) as client:
        response = await client.post("/chat/completions", json=body)
    assert response.status_code == 200, response.text
    for choice in response.json()["choices"]:
        assert choice["finish_reason"] == "tool_calls", choice  # never cut by the token limit
        (call,) = choice["message"]["tool_calls"]
        arguments = json.loads(call["function"]["arguments"])
        assert len(arguments["title"]) <= 8 and len(arguments["tags"]) <= 2, arguments
        assert all(len(tag) <= 8 for tag in arguments["tags"]), arguments
