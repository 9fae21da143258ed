"""Odd but valid requests and adversarial model text: a clear answer, never a 500."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from art_adapters import LocalBackend

MODEL = "smollm2-135m-instruct"


def _body(**overrides: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, **overrides}


@pytest.fixture(scope="module")
async def http(local_backend: LocalBackend) -> Any:
    async with httpx.AsyncClient(base_url=local_backend.base_url, timeout=60) as client:
        yield client


async def test_tool_schema_with_a_boolean_subschema_is_served(http: httpx.AsyncClient) -> None:
    # `true` is a valid JSON schema ("anything"); the worked example in the prompt used to crash on it.
    params = {"type": "object", "properties": {"x": {"anyOf": [True]}, "y": {"oneOf": [True, {"type": "string"}]}}}
    tool = {"type": "function", "function": {"name": "f", "parameters": params}}
    response = await http.post("/v1/chat/completions", json=_body(tools=[tool]))
    assert response.status_code == 200, response.text
