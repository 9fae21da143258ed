"""A train request is idempotent by its ``Idempotency-Key``: a retry after a client timeout, or
after the server died past the checkpoint, gets the step already made instead of a second one."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from pathlib import Path

import httpx
import pytest

from art_adapters import LocalBackend, TrainableModel, TrainConfig, TrajectoryGroup
from tests.helpers.models import registered
from tests.helpers.sampled_groups import sampled_group

PROMPT = "Name a colour."


async def _group(model: TrainableModel) -> TrajectoryGroup:
    """Two real completions of the server, rewarded 0 and 1: one trainable group."""
    return await sampled_group(model, 2, lambda c: float(c.index), prompt=PROMPT, max_tokens=4, seed=3)


@pytest.mark.slow
async def test_a_client_retry_after_a_timeout_gets_the_first_step_not_a_second(
    local_backend: LocalBackend,
) -> None:
    model = await registered(local_backend, f"idem-{uuid.uuid4().hex[:6]}", "idempotency")
    group = await _group(model)

    # Every attempt gives up after 0.5 s, long before the step ends; the client sends the same
    # request again (same key) after 2, 4, 8... s until one attempt gets the answer.
    result = await model.train([group], timeout=0.5, retries=7)
    assert result.trained and result.step == 1
    assert result.replayed  # answered from the first attempt's step
    await asyncio.sleep(1.0)  # the abandoned attempts have all been answered by now
    assert await model.get_step() == 1
    assert [c.step for c in await model.checkpoints()] == [0, 1]


@pytest.mark.slow
async def test_a_retry_after_a_crash_past_the_checkpoint_is_answered_from_disk(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    model = TrainableModel(name="crashy", project="idempotency")
    key = uuid.uuid4().hex
    backend = LocalBackend(run_dir=run_dir)
    await backend.start()
    try:
        await model.register(backend)
        group = await _group(model)
        body = {"groups": [group.model_dump(mode="json")], "config": TrainConfig().model_dump(mode="json")}
        url = f"{backend.base_url}/art/models/{model.name}/train"
        async with httpx.AsyncClient(timeout=600) as http:
            first = asyncio.create_task(http.post(url, json=body, headers={"Idempotency-Key": key}))
            manifest = run_dir / "models" / model.name / "checkpoints" / "000001" / "checkpoint.json"
            deadline = time.monotonic() + 500
            while not manifest.exists() and not first.done() and time.monotonic() < deadline:
                await asyncio.sleep(0.005)
            assert manifest.exists(), "the step never wrote its checkpoint"
            assert backend.process is not None
            backend.process.kill()  # the server dies right after the checkpoint: the answer is lost
            with contextlib.suppress(httpx.HTTPError):
                await first
    finally:
        await backend.close()

    async with LocalBackend(run_dir=run_dir) as restarted:
        async with httpx.AsyncClient(base_url=restarted.base_url, timeout=600) as http:
            path = f"/art/models/{model.name}/train"
            retry = await http.post(path, json=body, headers={"Idempotency-Key": key})
            assert retry.status_code == 200, retry.text
            assert retry.json()["step"] == 1 and retry.json()["trained"] and retry.json()["replayed"]
            assert (await http.get(f"/art/models/{model.name}")).json()["latest_step"] == 1

            other = {**body, "config": TrainConfig(learning_rate=3e-4).model_dump(mode="json")}
            reused = await http.post(path, json=other, headers={"Idempotency-Key": key})
            assert reused.status_code == 409 and reused.json()["error"]["code"] == "idempotency_key_reused"

            fresh = await http.post(path, json=body, headers={"Idempotency-Key": uuid.uuid4().hex})
            assert fresh.status_code == 200 and fresh.json()["step"] == 2 and not fresh.json().get("replayed")
