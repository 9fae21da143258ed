"""generate_scenarios with the REAL bundled model through the backend's OpenAI API, schema-constrained."""

from __future__ import annotations

import re
from typing import Any

import pytest
from langchain_core.callbacks import AsyncCallbackHandler

import art_adapters as aa
import mcp_tools
from mcp_tools.servers import server_command


class RequestLog(AsyncCallbackHandler):
    """Keeps the invocation parameters of every chat-model call."""

    def __init__(self) -> None:
        self.params: list[dict[str, Any]] = []

    async def on_chat_model_start(self, serialized: Any, messages: Any, **kwargs: Any) -> None:
        self.params.append(kwargs.get("invocation_params") or {})


@pytest.mark.slow
async def test_the_local_model_writes_exactly_n_schema_valid_scenarios(
    local_backend: aa.LocalBackend,
) -> None:
    model = aa.TrainableModel(name="scenario-writer", project="mcp-tests")
    await model.register(local_backend)
    log = RequestLog()
    llm = model.chat_model(temperature=0.8, max_tokens=80, seed=0, callbacks=[log])
    tools = await mcp_tools.load_tools(server_command("calculator"))
    scenarios = await mcp_tools.generate_scenarios(
        tools, n=2, model=llm, max_task_chars=80, max_retries=2, task_pattern=mcp_tools.PLAIN_TASK_PATTERN
    )
    assert len(scenarios) == 2
    assert len({mcp_tools.normalize_task(s.task) for s in scenarios}) == 2
    for scenario in scenarios:
        assert 8 <= len(scenario.task) <= 80 and 1 <= scenario.difficulty <= 5
        assert re.fullmatch(mcp_tools.PLAIN_TASK_PATTERN, scenario.task)  # words, not digits and punctuation
    # every call asked the backend for schema-constrained output
    assert log.params
    for params in log.params:
        response_format = params["response_format"]
        assert response_format["type"] == "json_schema"
        schema = response_format["json_schema"]["schema"]
        assert schema["properties"]["scenarios"]["items"]["required"] == ["task", "difficulty"]
        assert schema["properties"]["scenarios"]["items"]["properties"]["task"]["pattern"]
