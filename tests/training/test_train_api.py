"""``model.train`` through the real server: groups saved first, a checkpoint served at once,
requests during the step all complete, nothing-trainable said so, retention, clear 4xx."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import openai
import pytest

from art_adapters import (
    BackendRequestError,
    LocalBackend,
    TrainableModel,
    TrainConfig,
    TrajectoryGroup,
    load_groups,
)
from tests.helpers.fake_backend import FakeBackend
from tests.helpers.models import registered, unique_name
from tests.helpers.sampled_groups import sampled_group

PROMPT = "Name a colour."


async def _group(
    model: TrainableModel, rewards: list[float] | None = None, tokens: int = 6
) -> TrajectoryGroup:
    """Sample len(rewards) completions of one prompt through the server; rewards by index (or by length)."""

    def reward(choice: Any) -> float:
        return rewards[choice.index] if rewards else float(len(choice.message.content or ""))

    n = len(rewards) if rewards else 4
    return await sampled_group(model, n, reward, prompt=PROMPT, max_tokens=tokens, seed=1)


async def _model(backend: LocalBackend | FakeBackend) -> TrainableModel:
    return await registered(backend, unique_name("t"), "train-api")


@pytest.mark.slow
async def test_train_serves_new_step_and_requests_during_the_step_complete(
    local_backend: LocalBackend,
) -> None:
    model = await _model(local_backend)
    group = await _group(model, rewards=[1.0, 0.0, 0.5, 0.0])
    client = openai.AsyncOpenAI(base_url=local_backend.openai_base_url, api_key="unused", max_retries=0)

    async def ask(i: int) -> str:
        reply = await client.chat.completions.create(
            model=model.served_name() if i % 2 else local_backend_base(),
            messages=[{"role": "user", "content": f"Say {i}."}],
            max_tokens=3,
            temperature=0,
        )
        return reply.choices[0].finish_reason

    train = asyncio.create_task(model.train([group], config=TrainConfig(learning_rate=1e-4)))
    await asyncio.sleep(0.3)  # the step is running (trainer loading, then the update)
    during = await asyncio.gather(*(ask(i) for i in range(4)))
    result = await train
    assert all(reason in ("stop", "length") for reason in during)

    assert result.trained and result.step == 1 and result.reason is None
    assert result.metrics["groups_used"] == 1 and result.metrics["trajectories"] == 4
    assert result.metrics["record_turns"] == 4 and result.metrics["fallback_turns"] == 0
    assert result.metrics["tokens"] > 0 and result.metrics["grad_norm"] > 0
    assert result.groups_file is not None
    saved = load_groups(result.groups_file)  # written before training, readable as groups
    assert [t.reward for t in saved[0].trajectories] == [1.0, 0.0, 0.5, 0.0]
    assert await model.get_step() == 1

    # Served as name@1 and name right away; step 0 still servable; records say which step answered.
    for served in (f"{model.name}@1", model.name, f"{model.name}@0"):
        reply = await client.chat.completions.create(
            model=served, messages=[{"role": "user", "content": "Hi"}], max_tokens=2, temperature=0
        )
        record = await local_backend.get_token_record(reply.id)
        assert record["step"] == (0 if served.endswith("@0") else 1), (served, record["step"])
    await client.close()

    steps = [c.step for c in await model.checkpoints()]
    assert steps == [0, 1]
    checkpoint_dir = Path(local_backend.run_dir) / "models" / model.name / "checkpoints"
    assert sorted(p.name for p in checkpoint_dir.iterdir()) == ["000001"]  # no temp folder left


def local_backend_base() -> str:
    return "smollm2-135m-instruct"


async def test_nothing_trainable_is_reported_and_makes_no_step(fake_backend: FakeBackend) -> None:
    model = await _model(fake_backend)
    group = await _group(model, rewards=[1.0, 1.0, 1.0])
    result = await model.train([group])
    assert not result.trained and result.step == 0
    assert "zero variance" in (result.reason or "") and result.dropped == {"zero_variance": 1}
    assert Path(result.groups_file or "").is_file()  # saved even so
    empty = await model.train([])
    assert not empty.trained and "no trajectory groups" in (empty.reason or "")
    assert await model.get_step() == 0


async def test_retention_keeps_latest_and_best_and_unserves_the_rest(fake_backend: FakeBackend) -> None:
    model = await _model(fake_backend)
    config = TrainConfig(learning_rate=1e-5)
    for _ in range(3):
        result = await model.train([await _group(model, rewards=[0.0, 1.0])], config=config)
        assert result.trained
    assert [c.step for c in await model.checkpoints()] == [0, 1, 2, 3]
    # Keep the latest and the best by a metric recorded with every checkpoint.
    best = max((await model.checkpoints())[1:], key=lambda c: c.metrics["grad_norm"]).step
    deleted = await model.delete_checkpoints(keep_latest=1, best_metric="grad_norm")
    assert sorted(deleted) == sorted({1, 2} - {best})
    remaining = [c.step for c in await model.checkpoints()]
    assert remaining == sorted({0, 3, best})
    client = model.openai_client()
    for step in deleted:
        with pytest.raises(openai.NotFoundError):
            await client.chat.completions.create(
                model=f"{model.name}@{step}", messages=[{"role": "user", "content": "Hi"}], max_tokens=1
            )
    await client.close()
    with pytest.raises(BackendRequestError) as info:  # the latest is never deleted
        await model.delete_checkpoints([3])
    assert info.value.status_code == 400
    # Retention through TrainConfig after a step.
    result = await model.train(
        [await _group(model, rewards=[0.0, 1.0])],
        config=TrainConfig(learning_rate=1e-5, retention={"keep_latest": 1}),
    )
    assert result.step == 4 and sorted(result.deleted_steps) == sorted(set(remaining) - {0})
    assert [c.step for c in await model.checkpoints()] == [0, 4]


async def test_errors_are_clear_4xx(fake_backend: FakeBackend) -> None:
    ghost = TrainableModel(name="never-registered")
    ghost._backend = fake_backend
    with pytest.raises(BackendRequestError) as info:
        await ghost.train([TrajectoryGroup()])
    assert info.value.status_code == 404 and "not registered" in str(info.value)

    model = await _model(fake_backend)
    cases = [
        ({"groups": [{"trajectories": [{"messages": [{"role": "robot"}]}]}]}, "role"),
        ({"groups": "nope"}, "groups"),
        ({"groups": [], "config": {"learning_rate": -1}}, "learning_rate"),
        ({"groups": [], "config": {"loss_normalization": "constant"}}, "max_tokens"),
        ({"groups": [], "config": {"no_such_setting": 1}}, "no_such_setting"),
    ]
    for body, needle in cases:
        with pytest.raises(BackendRequestError) as info:
            await fake_backend.request("POST", f"/art/models/{model.name}/train", json=body)
        assert info.value.status_code == 400 and needle in str(info.value), (body, str(info.value))
    with pytest.raises(BackendRequestError) as info:
        await fake_backend.request(
            "POST", f"/art/models/{model.name}/checkpoints/delete", json={"steps": [1], "retention": {}}
        )
    assert info.value.status_code == 400
