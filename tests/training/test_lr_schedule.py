"""The learning-rate schedule across steps: its values, its validation, and a restarted backend that
continues it from the model's step on disk (the real training service and trainer, fake engine)."""

from __future__ import annotations

import json
import logging
import math
import uuid
from pathlib import Path
from typing import Any

import pytest
from art_adapters_backend.config import ServeConfig
from art_adapters_backend.errors import BadRequestError
from art_adapters_backend.state import ServerState
from art_adapters_backend.training.peft_trainer import PeftTrainer
from art_adapters_backend.training.service import TrainingService
from pydantic import ValidationError

from art_adapters import Message, TrainConfig, Trajectory, TrajectoryGroup
from tests.helpers.fake_engine import FakeEngine


def test_schedule_values() -> None:
    constant = TrainConfig(learning_rate=1.0, warmup_steps=2)
    assert [constant.learning_rate_at(k) for k in range(4)] == pytest.approx([1 / 3, 2 / 3, 1.0, 1.0])
    linear = TrainConfig(learning_rate=1.0, lr_schedule="linear", total_steps=4)
    assert [linear.learning_rate_at(k) for k in range(4)] == pytest.approx([1.0, 0.75, 0.5, 0.25])
    cosine = TrainConfig(learning_rate=2.0, lr_schedule="cosine", warmup_steps=1, total_steps=5)
    expected = [1.0] + [1.0 + math.cos(math.pi * (k - 1) / 4) for k in range(1, 5)]
    assert [cosine.learning_rate_at(k) for k in range(5)] == pytest.approx(expected)
    assert all(cosine.learning_rate_at(k) > 0 for k in range(5))  # no step is wasted at rate 0
    with pytest.raises(ValueError, match="raise total_steps"):
        cosine.learning_rate_at(5)
    assert TrainConfig(learning_rate=3e-4).learning_rate_at(1000) == 3e-4  # the default: constant


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"lr_schedule": "cosine"}, "set total_steps"),
        ({"total_steps": 10}, "remove total_steps"),
        ({"lr_schedule": "linear", "warmup_steps": 10, "total_steps": 10}, "must exceed warmup_steps"),
        ({"warmup_steps": -1}, "warmup_steps"),
        ({"lr_schedule": "exponential", "total_steps": 3}, "lr_schedule"),
    ],
)
def test_schedule_validation_says_what_to_change(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        TrainConfig(**fields)


def _groups() -> list[TrajectoryGroup]:
    """Two answers of different reward (no token records: the chat template tokenises them)."""
    user = Message(role="user", content="Name a colour.")
    answers = [("Blue.", 1.0), ("I am not sure, maybe green or red.", 0.0), ("Red.", 0.8)]
    return [TrajectoryGroup(trajectories=[
        Trajectory(messages=[user, Message(role="assistant", content=text)], reward=reward)
        for text, reward in answers
    ])]  # fmt: skip


async def _service(run_dir: Path) -> TrainingService:
    config = ServeConfig(run_dir=run_dir, port=0, log_level="warning")
    state = await ServerState.create(config, engine_factory=FakeEngine.for_model, trainer_factory=PeftTrainer)
    return TrainingService(state)


@pytest.mark.slow
async def test_a_restarted_backend_continues_the_cosine_schedule(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = TrainConfig(learning_rate=1e-3, lr_schedule="cosine", warmup_steps=1, total_steps=4,
                         lora_rank=4, lora_alpha=8)  # fmt: skip
    name = f"lr-{uuid.uuid4().hex[:6]}"
    service = await _service(tmp_path)
    try:
        service.state.registry.register(name, "lr", service.state.config.base_model)
        rates = [(await service.train(name, _groups(), config))["metrics"]["learning_rate"] for _ in range(3)]
    finally:
        await service.state.close()
    assert rates == pytest.approx([config.learning_rate_at(k) for k in range(3)], rel=1e-12)
    assert rates == pytest.approx([5e-4, 1e-3, 1e-3 * (1 + math.cos(math.pi / 3)) / 2])
    state_file = tmp_path / "models" / name / "checkpoints" / "000003" / "trainer_state.json"
    saved = json.loads(state_file.read_text("utf-8"))
    assert saved["steps_done"] == 3
    assert saved["lr_schedule"] == {"lr_schedule": "cosine", "learning_rate": 1e-3, "warmup_steps": 1,
                                    "total_steps": 4}  # fmt: skip

    # A new backend process on the same run directory: a fresh trainer, the model's step from disk.
    service = await _service(tmp_path)
    try:
        caplog.set_level(logging.WARNING)
        body = await service.train(name, _groups(), config)
        assert body["step"] == 4 and body["metrics"]["learning_rate"] == pytest.approx(config.learning_rate_at(3))
        trainer = service._trainer
        assert trainer is not None and trainer.optimizer is not None
        assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(config.learning_rate_at(3))
        assert "schedule changes" not in caplog.text  # the same schedule, continued
        assert body["metrics"]["pass_1_ratio_mean"] == pytest.approx(body["metrics"]["ratio_mean"])
        # The schedule is over: refused before anything is written, with what to change.
        with pytest.raises(BadRequestError, match="raise total_steps"):
            await service.train(name, _groups(), config)
        assert [c.step for c in service.store(name).checkpoints()] == [1, 2, 3, 4]
        # Changing the schedule's inputs mid-run is allowed, and logged.
        longer = config.model_copy(update={"total_steps": 8})
        body = await service.train(name, _groups(), longer)
        assert body["metrics"]["learning_rate"] == pytest.approx(longer.learning_rate_at(4))
        assert "schedule changes at step 4" in caplog.text
    finally:
        await service.state.close()
