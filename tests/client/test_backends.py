"""LocalBackend and RemoteBackend against the real service on 127.0.0.1."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from art_adapters import BackendRequestError, BackendUnavailableError, LocalBackend, RemoteBackend
from tests.helpers.fake_backend import FakeBackend


@pytest.mark.slow
async def test_local_backend_serves_and_reports_its_url(local_backend: LocalBackend) -> None:
    assert local_backend.base_url.startswith("http://127.0.0.1:")
    assert await local_backend.health()
    models = await local_backend.request("GET", "/v1/models")
    assert "smollm2-135m-instruct" in {m["id"] for m in models["data"]}


async def test_remote_backend_to_the_same_service(fake_backend: FakeBackend) -> None:
    async with RemoteBackend(fake_backend.base_url) as remote:
        record = await remote.register_model(name="remote-m", project="p", base_model="smollm2-135m-instruct")
        assert record["latest_step"] == 0
        assert (await remote.get_model("remote-m"))["name"] == "remote-m"


async def test_unreachable_backend_gives_a_clear_error() -> None:
    async with RemoteBackend("http://127.0.0.1:9") as remote:
        assert not await remote.health()
        with pytest.raises(BackendUnavailableError, match="could not reach the backend"):
            await remote.get_model("x")


async def test_error_status_becomes_backend_request_error(fake_backend: FakeBackend) -> None:
    with pytest.raises(BackendRequestError) as info:
        await fake_backend.get_model("never-registered")
    assert info.value.status_code == 404
    assert "never-registered" in str(info.value)


@pytest.mark.slow
async def test_local_backend_that_cannot_start_says_why(tmp_path: Path) -> None:
    backend = LocalBackend(run_dir=tmp_path, base_model="no-such-model-anywhere", startup_timeout=120)
    with pytest.raises(BackendUnavailableError, match="exited with code") as info:
        await backend.start()
    assert "no-such-model-anywhere" in str(info.value)
    assert backend.process is None


@pytest.mark.slow
async def test_killed_backend_is_reported_and_close_is_safe(tmp_path: Path) -> None:
    backend = LocalBackend(run_dir=tmp_path)
    await backend.start()
    process = backend.process
    assert process is not None
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=10)
    with pytest.raises(BackendUnavailableError):
        await backend.get_model("anything")
    await backend.close()  # no error after the process died
    assert backend.process is None


@pytest.mark.slow
async def test_close_stops_the_subprocess(tmp_path: Path) -> None:
    async with LocalBackend(run_dir=tmp_path) as backend:
        process = backend.process
        assert process is not None and process.poll() is None
    assert process.poll() is not None
