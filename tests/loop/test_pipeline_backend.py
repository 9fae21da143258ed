"""The pipelined loop on the real backend and the bundled model: rollouts in flight while a step
trains wait (on a CPU the engine pauses decoding during the step: they share the cores) and finish
after it, none fails; every turn records the checkpoint that sampled it. Kept tiny: three steps.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from art_adapters import LocalBackend, TrainableModel, TrainConfig, Trajectory
from art_adapters._loop import LoopConfig, train_loop
from art_adapters._runner import RunConfig
from art_adapters._scorers import verifiable_scorer
from art_adapters._trajectory import Message, load_groups


@pytest.mark.slow
async def test_rollouts_in_flight_during_a_real_step_resume_after_it(local_backend: LocalBackend, tmp_path: Path) -> None:
    model = TrainableModel(name="pipe-real", project="loop-tests")
    await model.register(local_backend)
    client = model.openai_client()
    spans: list[tuple[float, float, str | None, bool]] = []  # start, end, version, succeeded

    async def rollout(scenario: dict[str, Any]) -> Trajectory:
        history = [Message(role="user", content=f"Count from 1 to {scenario['n']}.")]
        start = time.monotonic()
        try:
            response = await client.chat.completions.create(
                model="pipe-real", messages=[m.to_openai() for m in history], temperature=1.0, max_tokens=12
            )
        except Exception:
            spans.append((start, time.monotonic(), None, False))
            raise
        reply = response.choices[0].message
        spans.append((start, time.monotonic(), response.model, True))
        turn = Message(role="assistant", content=reply.content, completion_id=response.id, model=response.model)
        return Trajectory(messages=[*history, turn])

    def brevity(trajectory: Trajectory, scenario: Any) -> float:
        return 1.0 / (1.0 + len(trajectory.messages[-1].content or ""))

    steps: list[tuple[float, int, float]] = []  # when each step returned, its step, its compute seconds

    def on_step(report: Any) -> None:
        steps.append((time.monotonic(), report.step, float(report.metrics.get("seconds") or 0.0)))

    config = LoopConfig(
        steps=3, groups_per_step=1, rollouts_per_group=3, max_staleness=1, max_untrained=6, run_dir=tmp_path,
        progress=False, eval_at_start=False, run=RunConfig(max_concurrency=6, timeout_s=300),
        train=TrainConfig(learning_rate=1e-4, lora_rank=4, lora_alpha=8, seed=0),
    )  # fmt: skip
    scenarios = [{"id": f"n{n}", "n": n} for n in (5, 9, 12, 7)]
    result = await train_loop(model, rollout, scenarios, score=verifiable_scorer(brevity), config=config, on_step=on_step)

    assert result.final_step == 3 and all(r.trained for r in result.steps)
    assert all(ok for *_, ok in spans), "no rollout failed because a step was training"
    stored = [g for p in sorted((tmp_path / "batches/pipeline").glob("group-*.jsonl")) for g in load_groups(p)]
    assert stored and not any(g.exceptions for g in stored)
    # rollouts under way while a step's compute ran (the engine paused) finished after the step,
    # sampled by a checkpoint from before it (the newest when they started)
    waited = [
        (version, step)
        for start, end, version, _ in spans
        for done, step, seconds in steps
        if start < done - seconds and end > done
    ]
    assert waited, f"no rollout spanned a step: rollouts {spans}, steps {steps}"
    assert all(version is not None and int(version.split("@")[1]) < step for version, step in waited), waited
    assert {v for *_, v, _ in spans} <= {"pipe-real@0", "pipe-real@1", "pipe-real@2", "pipe-real@3"}
    assert all(0 <= r.metrics["staleness_max"] <= 1 for r in result.steps)
