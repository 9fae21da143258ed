"""One tiny GRPO step through a real backend, for tests about what a step leaves behind in the server."""

from __future__ import annotations

from typing import Any

from art_adapters import Backend, TrainableModel, TrainConfig, Trajectory, TrajectoryGroup


async def train_tiny_step(backend: Backend, name: str, project: str) -> dict[str, Any]:
    """Register ``name`` on the bundled model and train one step on a two-answer group ("Yes." rewarded
    over "No."); returns ``/art/stats`` from just before the step (the step must train)."""
    model = TrainableModel(name=name, project=project, base_model="smollm2-135m-instruct")
    await model.register(backend)
    before = await backend.request("GET", "/art/stats")
    group = TrajectoryGroup(trajectories=[
        Trajectory(messages=[{"role": "user", "content": "Say yes."}, {"role": "assistant", "content": answer}],
                   reward=reward)
        for answer, reward in (("Yes.", 1.0), ("No.", 0.0))
    ])  # fmt: skip
    result = await model.train([group], config=TrainConfig(learning_rate=1e-5, lora_rank=4, lora_alpha=8))
    assert result.trained, result
    return before
