"""Every kind of bad input gets an OpenAI-style 4xx with a message that says what is wrong."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import openai
import pytest

from tests.helpers.fake_backend import FakeBackend

MODEL = "smollm2-135m-instruct"
MSG = [{"role": "user", "content": "hi"}]
ADD = {"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {
    "a": {"type": "integer"}}}}}  # fmt: skip


def _body(**overrides: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": MSG, "max_tokens": 2, **overrides}


CASES: list[tuple[str, Any, int, str, str | None]] = [
    # (name, body, status, message fragment, param)
    ("invalid json", b'{"model": "x", "messages": [', 400, "invalid JSON body", None),
    ("not an object", b"[1, 2]", 400, "must be a JSON object", None),
    ("missing messages", {"model": MODEL}, 400, "messages: field required", "messages"),
    ("empty messages", _body(messages=[]), 400, "messages: List should have at least 1 item", "messages"),
    ("unknown role", _body(messages=[{"role": "wizard", "content": "x"}]), 400, "'wizard'", "messages[0]"),
    ("missing content", _body(messages=[{"role": "user"}]), 400, "messages[0].content: field required", None),
    ("image content", _body(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]),
     400, "only 'text' parts are supported", "messages[0].content"),
    ("unknown model", _body(model="no-such-model"), 404, "'no-such-model' does not exist", "model"),
    ("unknown step", _body(model="errors-model@9"), 404, "has no step '9'", "model"),
    ("temperature", _body(temperature=3), 400, "temperature: Input should be less than or equal to 2", "temperature"),
    ("n zero", _body(n=0), 400, "n: Input should be greater than or equal to 1", "n"),
    ("n too big", _body(n=100), 400, "at most 16 choices", "n"),
    ("top_p", _body(top_p=0), 400, "top_p", "top_p"),
    ("top_logprobs alone", _body(top_logprobs=2), 400, "top_logprobs needs logprobs", "top_logprobs"),
    ("tool_choice without tools", _body(tool_choice="required"), 400, "no tools were given", "tool_choice"),
    ("unknown tool", _body(tools=[ADD], tool_choice={"type": "function", "function": {"name": "mul"}}),
     400, "'mul', which is not among the tools (add)", "tool_choice"),
    ("bad tool_choice", _body(tools=[ADD], tool_choice="sometimes"), 400, "not a valid tool_choice", "tool_choice"),
    ("bad tool schema", _body(tools=[{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"x": {"type": "nonsense"}}}}}]),
     400, "not a valid JSON schema", "tools[0].function.parameters"),
    ("bad format schema", _body(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "object", "properties": 5}}}), 400, "not a valid JSON schema", "response_format.json_schema.schema"),
    ("duplicate tools", _body(tools=[ADD, ADD]), 400, "tool names must be unique", "tools"),
    ("stop list", _body(stop=["a", "b", "c", "d", "e"]), 400, "at most 4", "stop"),
    ("max_tokens over context", _body(max_tokens=9000), 400, "context length is 8192", "max_tokens"),
    ("prompt over context", _body(messages=[{"role": "user", "content": "hello " * 9000}]), 400,
     "context length is 8192", "messages"),
]  # fmt: skip


@pytest.fixture(scope="module")
async def http(fake_backend: FakeBackend) -> Any:
    await fake_backend.register_model(name="errors-model", project="tests", base_model=MODEL)
    async with httpx.AsyncClient(base_url=fake_backend.base_url, timeout=60) as client:
        yield client


@pytest.mark.parametrize(("name", "body", "status", "fragment", "param"), CASES, ids=[c[0] for c in CASES])
async def test_bad_chat_request_is_a_clear_4xx(
    http: httpx.AsyncClient, name: str, body: Any, status: int, fragment: str, param: str | None
) -> None:
    if isinstance(body, bytes):
        response = await http.post(
            "/v1/chat/completions", content=body, headers={"content-type": "application/json"}
        )
    else:
        response = await http.post("/v1/chat/completions", json=body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error"
    assert fragment in error["message"]
    if param is not None:
        assert error["param"] == param
    assert "Traceback" not in response.text


async def test_other_routes_answer_errors_as_json(http: httpx.AsyncClient) -> None:
    missing = await http.get("/art/completions/chatcmpl-does-not-exist")
    assert missing.status_code == 404 and "chatcmpl-does-not-exist" in missing.json()["error"]["message"]
    assert (
        (await http.get("/no/such/route"))
        .json()["error"]["message"]
        .startswith("no route GET /no/such/route")
    )
    assert (await http.delete("/v1/models")).status_code == 405
    bad_register = await http.post("/art/models", json={"name": "x"})
    assert (
        bad_register.status_code == 400
        and "base_model: field required" in bad_register.json()["error"]["message"]
    )
    other_base = await http.post("/art/models", json={"name": "y", "project": "p", "base_model": "other"})
    assert other_base.status_code == 400 and MODEL in other_base.json()["error"]["message"]


async def test_sdk_raises_with_the_message_and_the_server_keeps_serving(fake_backend: FakeBackend) -> None:
    client = openai.AsyncOpenAI(base_url=fake_backend.openai_base_url, api_key="unused", max_retries=0)
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        await client.chat.completions.create(model="nope", messages=MSG)  # type: ignore[arg-type]
    with pytest.raises(openai.BadRequestError, match="no tools were given"):
        await client.chat.completions.create(model=MODEL, messages=MSG, tool_choice="required")  # type: ignore[arg-type]
    ok = await client.chat.completions.create(model=MODEL, messages=MSG, max_tokens=2, temperature=0)  # type: ignore[arg-type]
    await client.close()
    assert ok.choices[0].message.content is not None


def test_each_error_carries_its_status_and_one_handler_answers_them_all(tmp_path: Path) -> None:
    from art_adapters_backend.config import ServeConfig
    from art_adapters_backend.errors import APIError, ServerBusyError
    from art_adapters_backend.http.app import create_app
    from art_adapters_backend.http.body_limit import BodyTooLargeError
    from art_adapters_backend.http.error_handlers import error_response
    from art_adapters_backend.serving.engine.base import ContextLengthError
    from art_adapters_backend.serving.engine.constraint import ConstraintError
    from art_adapters_backend.serving.export import ExportError, ExportExistsError, ExportNotFoundError

    app = create_app(SimpleNamespace(config=ServeConfig(run_dir=tmp_path)))  # type: ignore[arg-type]
    handled = [c for c in app.exception_handlers if isinstance(c, type) and issubclass(c, APIError)]
    assert handled == [APIError]  # no handler per class: the class says its status
    expected = [  # (error, status, code, param)
        (ContextLengthError("too long"), 400, "context_length_exceeded", None),
        (ConstraintError("bad schema"), 400, "invalid_value", None),
        (ExportError("step 0 needs merged"), 400, None, None),
        (ExportNotFoundError("no step 9"), 404, "checkpoint_not_found", None),
        (ExportExistsError("not empty"), 409, "export_exists", "out"),
        (BodyTooLargeError(10, "--max-request-bytes", 11), 413, "request_too_large", None),
        (ServerBusyError("busy", retry_after=3), 429, "server_busy", None),
    ]
    for error, status, code, param in expected:
        response = error_response(error)
        body = json.loads(bytes(response.body))["error"]
        assert (response.status_code, body["code"], body["param"]) == (status, code, param), error
        assert body["message"] == error.message
    assert error_response(ServerBusyError("busy", retry_after=3)).headers["Retry-After"] == "3"
