"""Token-record store, model registry, serve config and error messages (no model needed)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from art_adapters_backend.config import ServeConfig, is_loopback
from art_adapters_backend.errors import BadRequestError, ConflictError, NotFoundError, validation_message
from art_adapters_backend.serving.records import ChoiceRecord, CompletionRecord, RecordStore
from art_adapters_backend.serving.registry import Registry
from pydantic import ValidationError

from art_adapters.files import TMP_PREFIX


def _record(i: int) -> CompletionRecord:
    choice = ChoiceRecord(index=0, completion_token_ids=[i, i + 1], logprobs=[-0.5, -1.25],
                          finish_reason="stop", text=f"t{i}")  # fmt: skip
    # `created` is pinned: the test compares records built twice, and the default clock may tick between them.
    return CompletionRecord(id=f"chatcmpl-{i:04d}", model="m", base_model="m", created=1_700_000_000 + i,
                            prompt_token_ids=[1, 2, i], temperature=0.0, top_p=1.0, max_tokens=8,
                            choices=[choice])  # fmt: skip


def test_records_are_durable_and_survive_reopen_and_torn_lines(tmp_path: Path) -> None:
    path = tmp_path / "completions.jsonl"
    store = RecordStore(path)
    threads = [threading.Thread(target=store.put_sync, args=(_record(i),)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(store) == 20 and store.get("chatcmpl-0007") == _record(7)
    assert store.get("chatcmpl-nope") is None
    store.close()
    with path.open("ab") as file:  # a crash in the middle of a write
        file.write(b'{"id": "chatcmpl-torn", "mod')
    reopened = RecordStore(path)
    assert len(reopened) == 20 and "chatcmpl-torn" not in reopened
    reopened.put_sync(_record(99))
    assert reopened.get("chatcmpl-0099") == _record(99) and reopened.get("chatcmpl-0003") == _record(3)
    lines = path.read_bytes().splitlines()
    assert len(lines) == 21 and all(json.loads(line)["id"].startswith("chatcmpl-") for line in lines)
    reopened.close()


def test_registry_register_resolve_steps_and_restart(tmp_path: Path) -> None:
    registry = Registry(tmp_path, "base-m")
    record, created = registry.register("agent", "proj", "base-m")
    assert created and record.steps == [0] and record.latest_step == 0
    again, created = registry.register("agent", "proj", "base-m")
    assert not created and again == record
    with pytest.raises(ConflictError, match="already registered with base model 'base-m'"):
        registry.register("agent", "proj", "other")
    with pytest.raises(BadRequestError, match="serves base model 'base-m', not 'other'"):
        registry.register("new", "proj", "other")
    with pytest.raises(BadRequestError, match="not a valid name"):
        registry.register("bad@name", "proj", "base-m")
    assert registry.resolve("base-m").adapter_path is None
    assert registry.resolve("agent").step == 0 and registry.resolve("agent@0").adapter_key is None
    adapter = tmp_path / "ckpt-1"
    adapter.mkdir()
    registry.add_step("agent", 1, adapter)
    with pytest.raises(BadRequestError, match="must come after"):
        registry.add_step("agent", 1, adapter)
    with pytest.raises(BadRequestError, match="does not exist"):
        registry.add_step("agent", 2, tmp_path / "missing")
    with pytest.raises(NotFoundError):
        registry.add_step("ghost", 1, adapter)
    latest = registry.resolve("agent")
    assert (latest.step, latest.adapter_key, latest.adapter_path) == (1, "agent@1", str(adapter.resolve()))
    with pytest.raises(NotFoundError, match="has no step '7'"):
        registry.resolve("agent@7")
    with pytest.raises(NotFoundError, match="does not exist"):
        registry.resolve("nobody")
    reloaded = Registry(tmp_path, "base-m")
    assert reloaded.get("agent") == registry.get("agent")
    assert reloaded.served_names() == ["base-m", "agent", "agent@0", "agent@1"]
    assert "checkpoints" not in reloaded.require("agent").public()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(TMP_PREFIX)] == []  # no temp files left


def test_non_loopback_bind_needs_an_api_key(tmp_path: Path) -> None:
    assert (
        is_loopback("127.0.0.1")
        and is_loopback("localhost")
        and is_loopback("::1")
        and is_loopback("127.1.2.3")
    )
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.5") and not is_loopback("example.com")
    with pytest.raises(ValidationError, match="--api-key or set ART_ADAPTERS_API_KEY"):
        ServeConfig(host="0.0.0.0", run_dir=tmp_path)
    assert ServeConfig(host="0.0.0.0", api_key="s3cret", run_dir=tmp_path).api_key_value == "s3cret"
    assert "s3cret" not in repr(ServeConfig(api_key="s3cret"))
    with pytest.raises(ValidationError, match="empty"):
        ServeConfig(api_key="  ")


def test_validation_errors_become_one_readable_message() -> None:
    message, param = validation_message([
        {"type": "missing", "loc": ("body", "messages", 0, "user", "content"), "msg": "Field required"},
        {"type": "less_than_equal", "loc": ("body", "temperature"), "msg": "Input should be less than or equal to 2"},
    ])  # fmt: skip
    assert (
        message
        == "invalid request: messages[0].content: field required; temperature: Input should be less than or equal to 2"
    )
    assert param == "messages[0].content"
    message, _ = validation_message([{"type": "json_invalid", "loc": ("body", 12), "msg": "JSON decode error",
                                      "ctx": {"error": "Expecting value"}}])  # fmt: skip
    assert message.startswith("invalid JSON body: Expecting value (at character 12)")


def test_unexpected_errors_are_a_json_500_without_traceback(caplog: pytest.LogCaptureFixture) -> None:
    from art_adapters_backend.http.error_handlers import install_error_handlers
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    app = FastAPI()
    install_error_handlers(app)

    @app.get("/boom")
    async def boom() -> None:
        raise KeyError("secret internals")

    # raise_server_exceptions=True: the exception must not reach the ASGI server, which would log it again.
    with TestClient(app, raise_server_exceptions=True) as client, caplog.at_level("ERROR"):
        response = client.get("/boom")
        assert client.get("/missing").status_code == 404
    assert response.status_code == 500
    error = response.json()["error"]
    assert error["type"] == "server_error" and "KeyError" in error["message"]
    assert "secret internals" not in response.text and "Traceback" not in response.text
    logged = [r for r in caplog.records if r.exc_info and "secret internals" in str(r.exc_info[1])]
    assert len(logged) == 1 and logged[0].name == "art_adapters_backend.http.error_handlers"
