"""Data safety of the real backend over HTTP when the disk refuses writes.

The server is a process of its own on the fake engine (``FakeLocalBackend``): the records, registry
and restarts are the subject, not the model.

A full disk is simulated honestly: the running server's ``RLIMIT_FSIZE`` is lowered from
outside (``prlimit``), so its writes past that size fail with ``EFBIG`` exactly where a full
disk fails with ``ENOSPC`` (Python ignores ``SIGXFSZ``, so the server gets the error and
lives). Raising the limit again is "space freed".
"""

from __future__ import annotations

import resource
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.helpers.fake_serve import FakeLocalBackend

MODEL = "smollm2-135m-instruct"

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="prlimit on another process is Linux-only")


@contextmanager
def _disk_full_past(backend: FakeLocalBackend, size: int) -> Iterator[None]:
    """While inside, the backend process cannot grow any file past ``size`` bytes."""
    assert backend.process is not None
    pid = backend.process.pid
    before = resource.prlimit(pid, resource.RLIMIT_FSIZE)
    resource.prlimit(pid, resource.RLIMIT_FSIZE, (size, before[1]))
    try:
        yield
    finally:
        resource.prlimit(pid, resource.RLIMIT_FSIZE, before)


def _chat(words: int) -> dict:
    # Long enough that the record line (prompt token ids) is larger than a buffered writer's 8 KiB.
    text = " ".join(["The quick brown fox jumps over the lazy dog."] * (words // 9))
    return {"model": MODEL, "messages": [{"role": "user", "content": text}], "max_tokens": 2, "temperature": 0}


@pytest.mark.slow
async def test_a_failed_record_append_is_cut_off_and_the_next_record_survives_a_restart(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    records = run_dir / "completions.jsonl"
    body = _chat(2200)
    async with FakeLocalBackend(run_dir=run_dir) as backend:
        async with httpx.AsyncClient(base_url=backend.base_url, timeout=120) as http:
            first = await http.post("/v1/chat/completions", json=body)
            assert first.status_code == 200
            kept = records.stat().st_size
            assert kept > 9000, kept  # one line, longer than the writer's buffer

            with _disk_full_past(backend, kept + kept // 2):  # the next line fits only half
                for _ in range(2):
                    refused = await http.post("/v1/chat/completions", json=body)
                    assert refused.status_code == 503, refused.text
                    assert refused.json()["error"]["code"] == "storage_unavailable"
                    assert records.stat().st_size == kept  # the partial line was cut off at once
                assert (await http.get("/health")).status_code == 200
                assert backend.process is not None and backend.process.poll() is None

            after = await http.post("/v1/chat/completions", json=body)  # space freed
            assert after.status_code == 200, after.text
            acknowledged = after.json()["id"]
            assert (await http.get(f"/art/completions/{acknowledged}")).status_code == 200

    async with FakeLocalBackend(run_dir=run_dir) as restarted:
        assert (await restarted.get_token_record(first.json()["id"]))["id"] == first.json()["id"]
        assert (await restarted.get_token_record(acknowledged))["id"] == acknowledged
    lines = records.read_bytes().split(b"\n")
    assert len(lines) == 3 and lines[-1] == b""  # two whole records, nothing glued


@pytest.mark.slow
async def test_a_registration_the_disk_refused_is_not_made_and_a_retry_creates_it(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    registry = run_dir / "registry.json"
    async with FakeLocalBackend(run_dir=run_dir) as backend:
        async with httpx.AsyncClient(base_url=backend.base_url, timeout=60) as http:
            first = {"name": "first", "project": "p", "base_model": MODEL}
            assert (await http.post("/art/models", json=first)).status_code == 201
            size = registry.stat().st_size
            second = {"name": "second-model", "project": "p", "base_model": MODEL}

            with _disk_full_past(backend, size + 8):  # a registry with one more model does not fit
                refused = await http.post("/art/models", json=second)
                assert refused.status_code == 503, refused.text
                assert refused.json()["error"]["code"] == "storage_unavailable"
                assert (await http.get("/art/models/second-model")).status_code == 404
                served = {m["id"] for m in (await http.get("/v1/models")).json()["data"]}
                assert "second-model" not in served
                assert [m["name"] for m in (await http.get("/art/models")).json()["data"]] == ["first"]

            retry = await http.post("/art/models", json=second)
            assert retry.status_code == 201, retry.text  # created now, not "already there"
            assert not [p.name for p in run_dir.iterdir() if p.name.startswith(".registry")]

    async with FakeLocalBackend(run_dir=run_dir) as restarted:
        names = [m["name"] for m in (await restarted.request("GET", "/art/models"))["data"]]
        assert names == ["first", "second-model"]
