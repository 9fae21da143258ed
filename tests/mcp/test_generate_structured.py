"""generate_scenarios against an OpenAI-compatible endpoint that rejects json_schema response formats."""

from __future__ import annotations

import json
from typing import Any

from langchain_openai import ChatOpenAI

from mcp_tools import generate_scenarios
from tests.helpers.judge_server import JudgeServer  # the scripted OpenAI-compatible server of the RULER tests

TOOLS = [{"name": "search_notes", "description": "Find notes.", "inputSchema": {"type": "object"}}]
TASKS = ["Find my notes about the garden party", "Look up what I wrote about the dentist"]


def rejects_response_format(body: dict[str, Any]) -> dict[str, Any]:
    if "response_format" in body:
        return {"status": 400}
    return {"content": json.dumps({"scenarios": [{"task": t, "difficulty": 2} for t in TASKS]})}


async def test_structured_generation_falls_back_to_plain_json_on_a_400() -> None:
    with JudgeServer() as server:
        server.reset(default=rejects_response_format)
        model = ChatOpenAI(base_url=server.url, api_key="test", model="gen", max_retries=0)
        scenarios = await generate_scenarios(TOOLS, n=2, model=model, max_retries=1)
        assert [s.task for s in scenarios] == TASKS
        assert "response_format" not in server.requests[-1]
