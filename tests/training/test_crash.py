"""Crash safety: kill -9 the backend during a train step, restart it on the same run directory.

It serves the latest complete checkpoint, no partial checkpoint is visible, and the interrupted
step's groups are on disk and train again.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import httpx
import pytest

from art_adapters import LocalBackend, TrainableModel, TrainConfig, TrajectoryGroup, load_groups
from art_adapters._trajectory import Message
from tests.helpers.sampled_groups import group_from_choices


async def _group(model: TrainableModel, seed: int) -> TrajectoryGroup:
    client = model.openai_client()
    prompt = [Message(role="user", content="Say a number.")]
    response = await client.chat.completions.create(
        model=model.served_name(), messages=[m.to_openai() for m in prompt], n=4, temperature=1.0,
        max_tokens=5, seed=seed,
    )  # fmt: skip
    await client.close()
    return group_from_choices(prompt, response, lambda c: float(c.index % 2))


@pytest.mark.slow
async def test_kill_during_train_step_then_restart(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    model = TrainableModel(name=f"crash-{uuid.uuid4().hex[:6]}", project="crash")
    config = TrainConfig(learning_rate=1e-4)
    models_dir = run_dir / "models" / model.name
    checkpoints, groups_dir = models_dir / "checkpoints", models_dir / "groups"

    backend = LocalBackend(run_dir=run_dir)
    await backend.start()
    try:
        await model.register(backend)
        assert (await model.train([await _group(model, 1)], config=config)).step == 1
        interrupted = await _group(model, 2)
        body = {"groups": [interrupted.model_dump(mode="json")], "config": config.model_dump(mode="json")}
        http = httpx.AsyncClient(base_url=backend.base_url, timeout=120)
        request = asyncio.create_task(http.post(f"/art/models/{model.name}/train", json=body))
        # Kill as soon as the step is under way: its groups are on disk (written first); if we
        # catch the checkpoint being written, even better.
        deadline = time.monotonic() + 60
        killed_mid_write = False
        while time.monotonic() < deadline and not request.done():
            if list(checkpoints.glob(".tmp-*")):
                killed_mid_write = True
                break
            if list(groups_dir.glob("step-000002-*.jsonl")):
                await asyncio.sleep(0.2)  # the trainer is loading the checkpoint or stepping
                break
            await asyncio.sleep(0.005)
        assert not request.done(), "the step finished before it could be interrupted"
        process = backend.process
        assert process is not None
        process.kill()  # SIGKILL: no cleanup runs
        await asyncio.to_thread(process.wait)
        with pytest.raises(httpx.HTTPError):
            await request
        await http.aclose()
    finally:
        await backend.close()

    [saved] = list(groups_dir.glob("step-000002-*.jsonl"))
    # Whether or not the kill caught the checkpoint mid-write, leave a partial one as it would.
    partial = checkpoints / ".tmp-000002-deadbeef"
    partial.mkdir(exist_ok=True)
    (partial / "adapter_config.json").write_text("{")

    backend = LocalBackend(run_dir=run_dir)
    await backend.start()
    try:
        # Cleaned at startup, before any training request.
        assert sorted(p.name for p in checkpoints.iterdir()) == ["000001"], killed_mid_write
        await model.register(backend)  # idempotent
        assert await model.get_step() == 1
        assert [c.step for c in await model.checkpoints()] == [0, 1]
        client = model.openai_client()
        reply = await client.chat.completions.create(
            model=model.name, messages=[{"role": "user", "content": "Hi"}], max_tokens=2, temperature=0
        )
        await client.close()
        assert (await backend.get_token_record(reply.id))["step"] == 1  # the latest complete checkpoint

        again = load_groups(saved)  # the interrupted step's groups, as sent
        assert [t.reward for t in again[0].trajectories] == [t.reward for t in interrupted.trajectories]
        result = await model.train(again, config=config)
        assert result.trained and result.step == 2 and result.metrics["record_turns"] == 4
        assert sorted(p.name for p in checkpoints.iterdir()) == ["000001", "000002"]
    finally:
        await backend.close()
