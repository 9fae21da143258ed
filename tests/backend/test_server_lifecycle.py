"""Servers of their own: restart keeps the registry and records, API-key enforcement, exposure refused.

The restart and API-key test runs the server process on the fake engine (``FakeLocalBackend``): its
subject is the server's settings and stores, not the model.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from art_adapters import BackendRequestError
from tests.helpers.fake_serve import FakeLocalBackend

MODEL = "smollm2-135m-instruct"
KEY = "test-key-123"


@pytest.mark.slow
async def test_api_key_is_enforced_and_restart_keeps_registry_and_records(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    async with FakeLocalBackend(run_dir=run_dir, api_key=KEY) as backend:
        async with httpx.AsyncClient(base_url=backend.base_url, timeout=60) as http:
            assert (await http.get("/health")).status_code == 200  # open without a key
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}):
                refused = await http.get("/v1/models", headers=headers)
                assert refused.status_code == 401
                assert refused.json()["error"]["type"] == "authentication_error"
            chat = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
            assert (await http.post("/v1/chat/completions", json=chat)).status_code == 401
            assert (
                await http.post("/art/models", json={"name": "x", "base_model": MODEL})
            ).status_code == 401
            ok = await http.post(
                "/v1/chat/completions", json=chat, headers={"Authorization": f"Bearer {KEY}"}
            )
            assert ok.status_code == 200
            completion_id = ok.json()["id"]
        await backend.register_model(name="kept", project="p", base_model=MODEL)  # the client sends the key
    assert backend.process is None

    async with FakeLocalBackend(run_dir=run_dir, api_key=KEY) as restarted:
        record = await restarted.get_model("kept")
        assert record["name"] == "kept" and record["steps"] == [0] and record["base_model"] == MODEL
        served = {m["id"] for m in (await restarted.request("GET", "/v1/models"))["data"]}
        assert {MODEL, "kept", "kept@0"} <= served
        assert (await restarted.get_token_record(completion_id))["id"] == completion_id
        again = await restarted.register_model(name="kept", project="p", base_model=MODEL)
        assert again["created"] == record["created"]
        with pytest.raises(BackendRequestError) as info:
            await restarted.register_model(name="kept", project="p", base_model="/other/model")
        assert info.value.status_code == 409


def test_non_loopback_bind_without_a_key_is_refused(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "art_adapters_backend", "serve", "--host", "0.0.0.0", "--port", "0",
               "--run-dir", str(tmp_path)]  # fmt: skip
    env = {"PATH": "/usr/bin:/bin", "COLUMNS": "200"}  # no ART_ADAPTERS_API_KEY from the outside
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env, check=False)
    assert result.returncode == 2
    output = " ".join((result.stdout + result.stderr).split())
    assert "--api-key" in output and "ART_ADAPTERS_API_KEY" in output
    assert not (tmp_path / "registry.json").exists()
