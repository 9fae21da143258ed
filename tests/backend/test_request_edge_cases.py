"""Odd but valid requests and adversarial model text: a clear answer, never a 500.

Over HTTP the server is the real app on the fake engine (``fake_backend``): the requests' handling
(validation, chat template, constraints compiled by the real grammar compiler) is the subject, not
what the model writes.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from art_adapters_backend.serving.chat import _constraint
from art_adapters_backend.serving.chat_template import ChatTemplate, ChatTemplateError
from art_adapters_backend.serving.openai_types import ChatCompletionRequest
from art_adapters_backend.serving.tool_parser import HermesToolParser

from tests.helpers.fake_backend import FakeBackend

MODEL = "smollm2-135m-instruct"


def _body(**overrides: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, **overrides}


@pytest.fixture(scope="module")
def template() -> ChatTemplate:
    from art_adapters_backend.bundled import load_tokenizer, resolve_model_path
    from art_adapters_backend.serving.model_family import resolve_model_family

    tokenizer = load_tokenizer(resolve_model_path(MODEL))
    return ChatTemplate(tokenizer, resolve_model_family(tokenizer, bundled=True).chat_template)


@pytest.fixture(scope="module")
async def http(fake_backend: FakeBackend) -> Any:
    async with httpx.AsyncClient(base_url=fake_backend.base_url, timeout=60) as client:
        yield client


async def test_tool_schema_with_a_boolean_subschema_is_served(http: httpx.AsyncClient) -> None:
    # `true` is a valid JSON schema ("anything"); the worked example in the prompt used to crash on it.
    params = {
        "type": "object",
        "properties": {"x": {"anyOf": [True]}, "y": {"oneOf": [True, {"type": "string"}]}},
    }
    tool = {"type": "function", "function": {"name": "f", "parameters": params}}
    response = await http.post("/v1/chat/completions", json=_body(tools=[tool]))
    assert response.status_code == 200, response.text


async def test_assistant_refusal_parts_are_history_text_and_elsewhere_a_clear_400(http: httpx.AsyncClient) -> None:
    refusal = {"type": "refusal", "refusal": "I cannot help with that."}
    messages = [
        {"role": "user", "content": "Do something bad."},
        {"role": "assistant", "content": [refusal]},
        {"role": "user", "content": "Fine, say hi."},
    ]
    response = await http.post("/v1/chat/completions", json=_body(messages=messages))
    assert response.status_code == 200, response.text
    request = ChatCompletionRequest.model_validate(_body(messages=messages))
    assert request.messages[1].content == "I cannot help with that."
    in_user = await http.post("/v1/chat/completions", json=_body(messages=[{"role": "user", "content": [refusal]}]))
    assert in_user.status_code == 400 and "'refusal'" in in_user.json()["error"]["message"]


ADD = {"type": "function", "function": {"name": "add", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}  # fmt: skip


def _history(call_id: str, arguments: str) -> list[dict[str, Any]]:
    call = {"id": call_id, "type": "function", "function": {"name": "add", "arguments": arguments}}
    return [
        {"role": "user", "content": "add 2 and 3"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "content": "5"},
    ]


async def test_deeply_nested_tool_call_arguments_in_the_history_are_served(http: httpx.AsyncClient) -> None:
    # Arguments that are not JSON are rendered as the string they are; deep nesting used to
    # raise RecursionError (a 500) in the template and in the sampled-turn lookup.
    deep = "[" * 1_100  # deeper than Python's recursion limit
    response = await http.post("/v1/chat/completions", json=_body(messages=_history("call_x", deep)))
    assert response.status_code == 200, response.text

    first = await http.post(
        "/v1/chat/completions",
        json=_body(messages=_history("call_x", "{}")[:1], tools=[ADD], tool_choice="required", max_tokens=40),
    )
    assert first.status_code == 200, first.text
    served_id = first.json()["choices"][0]["message"]["tool_calls"][0]["id"]
    response = await http.post(
        "/v1/chat/completions", json=_body(messages=_history(served_id, deep), tools=[ADD])
    )
    assert response.status_code == 200, response.text


def _ref_tool(name: str, kind: str) -> dict[str, Any]:
    # pydantic and MCP servers write nested models as $defs + $ref.
    params = {
        "type": "object",
        "properties": {"item": {"$ref": "#/$defs/Item"}},
        "required": ["item"],
        "$defs": {"Item": {"type": "object", "properties": {"v": {"type": kind}}, "required": ["v"]}},
    }
    return {"type": "function", "function": {"name": name, "parameters": params}}


@pytest.mark.parametrize(
    ("tools", "choice"),
    [
        ([_ref_tool("put", "integer")], "required"),
        ([_ref_tool("put", "integer")], {"type": "function", "function": {"name": "put"}}),
        ([_ref_tool("put", "integer"), _ref_tool("tag", "string")], "required"),
    ],
    ids=["required", "named", "two tools, same $defs name"],
)
async def test_forced_call_of_a_tool_whose_schema_uses_refs(
    http: httpx.AsyncClient, tools: list[dict[str, Any]], choice: Any
) -> None:
    response = await http.post(
        "/v1/chat/completions", json=_body(tools=tools, tool_choice=choice, max_tokens=60)
    )
    assert response.status_code == 200, response.text
    calls = response.json()["choices"][0]["message"]["tool_calls"]
    kinds = {"put": int, "tag": str}
    assert isinstance(
        json.loads(calls[0]["function"]["arguments"])["item"]["v"], kinds[calls[0]["function"]["name"]]
    )


@pytest.mark.parametrize("depth", [100, 400])
def test_a_deeply_nested_tool_schema_renders_or_is_a_clear_error(template: ChatTemplate, depth: int) -> None:
    # Valid JSON and a valid schema, rendered by the template's tojson as it is; nested past what
    # tojson can recurse through, it is a ChatTemplateError (the server's 400), never a 500.
    params: dict[str, Any] = {"type": "object", "properties": {}}
    inner = params
    for _ in range(depth):
        inner["properties"]["a"] = {"type": "object", "properties": {}}
        inner = inner["properties"]["a"]
    tools = [{"type": "function", "function": {"name": "f", "parameters": params}}]
    if depth > 300:
        with pytest.raises(ChatTemplateError, match="recursion"):
            template.render([{"role": "user", "content": "hi"}], tools)
        return
    text = template.render([{"role": "user", "content": "hi"}], tools)
    assert '"parameters": {"type": "object", "properties": {"a": {"type": "object"' in text


@pytest.mark.parametrize("with_ref", [False, True])
def test_a_deeply_nested_schema_can_be_forced(with_ref: bool) -> None:
    params: dict[str, Any] = {"type": "object", "properties": {}, "$defs": {"N": {"type": "integer"}}}
    inner = params
    for _ in range(300):
        inner["properties"]["a"] = {"type": "object", "properties": {}}
        inner = inner["properties"]["a"]
    if with_ref:
        inner["properties"]["n"] = {"$ref": "#/$defs/N"}
    request = ChatCompletionRequest.model_validate(
        _body(
            tools=[{"type": "function", "function": {"name": "f", "parameters": params}}],
            tool_choice="required",
        )
    )
    constraint = _constraint(request, HermesToolParser(), None)
    assert constraint is not None
    arguments = constraint.json_schema["properties"]["arguments"]
    if with_ref:
        assert arguments == {"$ref": "#/$defs/arguments_0"}
        assert json.dumps(constraint.json_schema).count('"#/$defs/arguments_0/$defs/N"') == 1
    else:
        assert arguments == params


def test_arguments_at_the_edge_of_the_recursion_limit_are_a_clear_error_or_render(template: ChatTemplate) -> None:
    # json.loads may just manage a depth that the template's tojson, one level deeper, cannot.
    for depth in range(900, 1001, 10):
        arguments = "[" * depth + "]" * depth
        messages = [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": None,
             "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": arguments}}]},
        ]  # fmt: skip
        try:
            text = template.render(messages)
        except ChatTemplateError as exc:
            assert "could not render" in str(exc)
        else:
            assert '<tool_call>\n{"name": "f", "arguments": ' in text
