"""Second hardening round, training and export: bounded steps, bodies parsed off the loop, confined exports.

Over HTTP on real servers: one of this module's own with small training caps and one export root
(``capped_backend``), and servers started for a test alone (SIGTERM mid-step, an API-key server).
"""

from __future__ import annotations

import asyncio
import json
import signal
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from art_adapters import LocalBackend

from tests.helpers.health_poll import while_polling_health

MODEL = "smollm2-135m-instruct"
PROMPT = "Name a colour."
HEALTH_LATENCY_S = 1.0

CAPS = [
    "--max-train-iterations", "2",
    "--max-train-mini-batches", "2",
    "--max-sft-epochs", "2",
    "--max-group-trajectories", "4",
]  # fmt: skip


@pytest.fixture(scope="module")
def export_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("allowed-exports")


@pytest.fixture(scope="module")
async def capped_backend(
    tmp_path_factory: pytest.TempPathFactory, export_root: Path
) -> AsyncIterator[LocalBackend]:
    """A real server with small training caps, exporting only under ``export_root`` (and its run dir)."""
    run_dir = tmp_path_factory.mktemp("capped")
    async with LocalBackend(run_dir=run_dir, extra_args=CAPS, export_roots=[export_root]) as backend:
        async with httpx.AsyncClient(base_url=backend.base_url, timeout=60) as http:
            registered = await http.post("/art/models", json={"name": "capped", "project": "p", "base_model": MODEL})
            assert registered.status_code in (200, 201), registered.text
        yield backend


def _trajectory(reward: float, answer: str = "Blue.") -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": PROMPT}, {"role": "assistant", "content": answer}],
            "reward": reward}  # fmt: skip


async def _post(backend: LocalBackend, path: str, body: Any, key: str | None = None) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"Content-Type": "application/json", **({"Idempotency-Key": key} if key else {})}
    async with httpx.AsyncClient(base_url=backend.base_url, timeout=600) as http:
        return await http.post(path, content=content, headers=headers)


# ---- High 2: train bodies are parsed off the event loop, after the model is found ---------------


def _big_train_body(trajectories: int) -> bytes:
    one = json.dumps(_trajectory(1.0))
    return ('{"groups": [{"trajectories": [' + ",".join([one] * trajectories) + "]}]}").encode()


@pytest.mark.slow
async def test_a_big_train_body_never_freezes_health(capped_backend: LocalBackend) -> None:
    # The report's request: 60 MB to /art/models/nobody/train froze /health 13.7 s, then a 404.
    body = _big_train_body(300_000)  # 36 MB, within --max-train-request-bytes (64 MiB)
    assert len(body) > 35_000_000
    unknown, _, worst_unknown = await while_polling_health(capped_backend, _post(capped_backend, "/art/models/nobody/train", body))
    assert unknown.status_code == 404, unknown.text
    known, _, worst_known = await while_polling_health(capped_backend, _post(capped_backend, "/art/models/capped/train", body))
    print(f"36 MB train body: slowest /health {worst_unknown:.3f} s (unknown model), {worst_known:.3f} s (parsed)")
    assert known.status_code == 400, known.text  # parsed in a worker thread, then past the cap
    assert known.json()["error"]["param"] == "groups[0].trajectories"
    assert worst_unknown < HEALTH_LATENCY_S and worst_known < HEALTH_LATENCY_S, (worst_unknown, worst_known)


@pytest.mark.slow
async def test_group_metadata_nested_past_the_parser_limit_is_a_400(capped_backend: LocalBackend) -> None:
    metadata: dict[str, Any] = {"a": 1}
    for _ in range(300):
        metadata = {"a": metadata}
    body = {"groups": [{"trajectories": [_trajectory(0.0), _trajectory(1.0)], "metadata": metadata}]}
    response = await _post(capped_backend, "/art/models/capped/train", body)
    assert response.status_code == 400, response.text  # was a 500
    assert response.json()["error"]["code"] == "invalid_json"


# ---- High 3: how long a step may pause inference is bounded ------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    ("route", "change", "param", "what"),
    [
        ("train", {"config": {"num_iterations": 1_000_000}}, "config.num_iterations", "--max-train-iterations"),
        ("train", {"config": {"mini_batches": 3}}, "config.mini_batches", "--max-train-mini-batches"),
        ("train", {"trajectories": 5}, "groups[0].trajectories", "--max-group-trajectories"),
        ("train", {"config": {"max_sequence_length": 16384}}, "config.max_sequence_length", "context of 8192"),
        ("train_sft", {"config": {"epochs": 3}}, "config.epochs", "--max-sft-epochs"),
        ("train_sft", {"trajectories": 5}, "trajectories", "--max-group-trajectories"),
    ],
)
async def test_training_lengths_past_the_caps_are_a_400(
    capped_backend: LocalBackend, route: str, change: dict[str, Any], param: str, what: str
) -> None:
    trajectories = [_trajectory(float(i % 2)) for i in range(change.get("trajectories", 2))]
    config = change.get("config", {})
    body = {"groups": [{"trajectories": trajectories}], "config": config} if route == "train" else {
        "trajectories": trajectories, "config": config}  # fmt: skip
    response = await _post(capped_backend, f"/art/models/capped/{route}", body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param and what in error["message"], error
    assert not (Path(capped_backend.run_dir) / "models" / "capped" / "groups").exists()  # nothing written


# ---- Medium 8: a retry is compared on the client's body, not on server-filled defaults ---------


@pytest.mark.slow
async def test_a_retry_of_a_body_without_ids_is_replayed_not_refused(capped_backend: LocalBackend) -> None:
    body = {"groups": [{"trajectories": [_trajectory(1.0), _trajectory(1.0)]}]}  # no id, no started_at
    first = await _post(capped_backend, "/art/models/capped/train", body, key="retry-1")
    assert first.status_code == 200, first.text
    again = await _post(capped_backend, "/art/models/capped/train", body, key="retry-1")
    assert again.status_code == 200, again.text  # was a 409: the server-filled ids entered the hash
    assert again.json()["replayed"] is True and again.json()["groups_file"] == first.json()["groups_file"]
    other = {"groups": [{"trajectories": [_trajectory(0.0), _trajectory(0.0)]}]}
    reused = await _post(capped_backend, "/art/models/capped/train", other, key="retry-1")
    assert reused.status_code == 409 and reused.json()["error"]["code"] == "idempotency_key_reused"


# ---- High 5: exports are confined, and force never deletes a folder an export did not write ----


@pytest.mark.slow
async def test_export_out_is_confined_and_force_replaces_only_an_export(
    capped_backend: LocalBackend, export_root: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "elsewhere" / "out"
    refused = await _post(capped_backend, "/art/models/capped/export",
                          {"out": str(outside), "step": 0, "merged": True})  # fmt: skip
    assert refused.status_code == 403, refused.text  # was written (and its parents created) anywhere
    assert refused.json()["error"]["param"] == "out" and "--export-root" in refused.json()["error"]["message"]
    assert not (tmp_path / "elsewhere").exists()

    precious = export_root / "someone-elses"
    precious.mkdir()
    (precious / "notes.txt").write_text("keep me")
    forced = await _post(capped_backend, "/art/models/capped/export",
                         {"out": str(precious), "step": 0, "merged": True, "force": True})  # fmt: skip
    assert forced.status_code == 409, forced.text  # was renamed away and deleted
    assert (precious / "notes.txt").read_text() == "keep me"

    escape = export_root / ".." / "escaped"
    dotdot = await _post(capped_backend, "/art/models/capped/export",
                         {"out": str(escape), "step": 0, "merged": True})  # fmt: skip
    assert dotdot.status_code == 403, dotdot.text


# ---- Medium 7: SIGTERM during a training step stops the server promptly -------------------------


@pytest.mark.slow
async def test_sigterm_during_a_training_step_stops_the_server_promptly(tmp_path: Path) -> None:
    answer = "Blue, like the sky over the sea on a clear summer day. " * 8
    trajectories = [_trajectory(float(i % 2), answer) for i in range(16)]
    config = {"num_iterations": 16, "mini_batches": 8, "micro_batch_size": 1}  # minutes of updates on CPU
    backend = LocalBackend(run_dir=tmp_path / "run")
    await backend.start()
    try:
        async with httpx.AsyncClient(base_url=backend.base_url, timeout=600) as http:
            registered = await http.post("/art/models", json={"name": "long", "project": "p", "base_model": MODEL})
            assert registered.status_code in (200, 201), registered.text
            step = asyncio.ensure_future(
                http.post("/art/models/long/train", json={"groups": [{"trajectories": trajectories}], "config": config})
            )
            log = Path(backend.log_path)
            deadline = time.monotonic() + 120
            while "for training" not in log.read_text() and time.monotonic() < deadline:
                await asyncio.sleep(0.5)  # the trainer is loaded: the step is running
            await asyncio.sleep(5.0)
            assert not step.done()
            process = backend.process
            assert process is not None
            sent = time.monotonic()
            process.send_signal(signal.SIGTERM)
            code = await asyncio.to_thread(process.wait, 120)
            stopped_s = time.monotonic() - sent
            step.cancel()
    finally:
        await backend.close()
    print(f"SIGTERM mid-step: the server exited with {code} after {stopped_s:.1f} s")
    # the graceful period (5 s), then one micro-batch (seconds on a loaded CPU); before: the whole
    # step (minutes: 272 forward/backward passes), or SIGKILL
    assert stopped_s < 45, stopped_s
    assert "training step cancelled" in Path(backend.log_path).read_text()
    assert not (tmp_path / "run" / "models" / "long" / "checkpoints" / "000001").exists()


# ---- Low: an API-key server warns of a short key, throttles its log, leaves no temp folder ------


@pytest.mark.slow
async def test_a_keyed_server_warns_of_a_short_key_and_throttles_rejection_logs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))  # where LocalBackend's port file goes
    async with LocalBackend(run_dir=tmp_path / "run", api_key="k") as backend:
        assert list(temp.iterdir()) == []  # the art-port-* folder went once the port was read
        async with httpx.AsyncClient(base_url=backend.base_url, timeout=60) as http:
            for attempt in range(50):
                rejected = await http.get("/v1/models", headers={"Authorization": f"Bearer guess-{attempt}"})
                assert rejected.status_code == 401
        log = Path(backend.log_path).read_text()
    assert "the API key is 1 characters long" in log  # was accepted silently
    assert log.count("rejected GET /v1/models") <= 2, log.count("rejected GET /v1/models")  # was 50 lines
