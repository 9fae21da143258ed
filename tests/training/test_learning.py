"""Learning, shown: a few GRPO steps through the real HTTP API raise the held-out reward.

Task (verifiable, format): "What is a + b?" with the instruction to answer with only the
number and one worked example in the conversation; reward 1.0 when the reply is only an
integer, else 0.0. The bundled 135M model answers greedily in the right format most of the
time but, sampled at temperature 1.0, only about one reply in five is a bare number: that
is the held-out reward measured (8 unseen prompts x 8 samples, fixed seeds), before
training (step 0) and after ``STEPS`` GRPO steps on other prompts.

Run it by hand with other seeds: ``python tests/training/test_learning.py 1 2 3``.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import sys
import tempfile
import time
from pathlib import Path

import pytest

from art_adapters import LocalBackend, TrainableModel, TrainConfig, TrajectoryGroup
from art_adapters._trajectory import Message
from tests.helpers.sampled_groups import group_from_choices

STEPS = 4
TRAIN_PROMPTS = 4  # prompts a step
SAMPLES = 8  # rollouts a prompt (the group)
EVAL_PROMPTS = 8
EVAL_SAMPLES = 8
MAX_TOKENS = 6
MARGIN = 0.2  # the held-out mean reward must rise by at least this much
CONFIG = TrainConfig(learning_rate=5e-4, lora_rank=8, lora_alpha=16, micro_batch_size=8)

SYSTEM = "Answer with only the number, nothing else."


def messages(a: int, b: int) -> list[Message]:
    return [
        Message(role="system", content=SYSTEM),
        Message(role="user", content="What is 2 + 3?"),
        Message(role="assistant", content="5"),
        Message(role="user", content=f"What is {a} + {b}?"),
    ]


def reward(text: str | None) -> float:
    """1.0 for a reply that is only an integer, else 0.0."""
    return 1.0 if re.fullmatch(r"\s*\d+\s*", text or "") else 0.0


async def rollouts(model: TrainableModel, a: int, b: int, n: int, seed: int) -> TrajectoryGroup:
    """``n`` sampled replies to one prompt (one request), scored."""
    client = model.openai_client()
    history = messages(a, b)
    response = await client.chat.completions.create(
        model=model.served_name(),
        messages=[m.to_openai() for m in history],
        n=n,
        temperature=1.0,
        max_tokens=MAX_TOKENS,
        seed=seed,
    )
    await client.close()
    return group_from_choices(history, response, lambda c: reward(c.message.content), {"prompt": f"{a}+{b}"})


async def held_out_reward(model: TrainableModel, pairs: list[tuple[int, int]]) -> float:
    groups = await asyncio.gather(
        *(rollouts(model, a, b, EVAL_SAMPLES, seed=1000 + i) for i, (a, b) in enumerate(pairs))
    )
    rewards = [t.reward for g in groups for t in g.trajectories]
    return sum(r or 0.0 for r in rewards) / len(rewards)


async def run(seed: int, run_dir: Path) -> tuple[float, float, list[dict]]:
    """Train ``STEPS`` steps; returns (held-out reward before, after, per-step metrics)."""
    rng = random.Random(seed)
    numbers = [(a, b) for a in range(1, 40) for b in range(1, 40)]
    rng.shuffle(numbers)
    held_out, train = numbers[:EVAL_PROMPTS], numbers[EVAL_PROMPTS:]
    async with LocalBackend(run_dir=run_dir) as backend:
        model = TrainableModel(name=f"adder-{seed}", project="learning")
        await model.register(backend)
        before = await held_out_reward(model, held_out)
        history = []
        for step in range(STEPS):
            pairs = train[step * TRAIN_PROMPTS : (step + 1) * TRAIN_PROMPTS]
            groups = await asyncio.gather(
                *(
                    rollouts(model, a, b, SAMPLES, seed=seed * 100 + step * 10 + i)
                    for i, (a, b) in enumerate(pairs)
                )
            )
            result = await model.train(groups, config=CONFIG.model_copy(update={"seed": seed}))
            history.append({"step": result.step, "trained": result.trained, **result.metrics})
        after = await held_out_reward(model, held_out)
    return before, after, history


@pytest.mark.slow
async def test_grpo_raises_held_out_reward(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ART_ADAPTERS_TORCH_THREADS", os.environ.get("ART_ADAPTERS_TORCH_THREADS", "1"))
    started = time.perf_counter()
    before, after, history = await run(seed=0, run_dir=tmp_path / "run")
    elapsed = time.perf_counter() - started
    summary = [(h["step"], h["trained"], round(h.get("reward_mean") or 0, 3)) for h in history]
    print(f"held-out reward {before:.3f} -> {after:.3f} in {elapsed:.0f} s; steps {summary}")
    assert all(h["trained"] for h in history), history
    assert after >= before + MARGIN, (before, after, summary)


if __name__ == "__main__":  # python tests/training/test_learning.py SEED...
    os.environ.setdefault("ART_ADAPTERS_TORCH_THREADS", "1")
    for arg in sys.argv[1:] or ["0"]:
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp:
            b, a, h = asyncio.run(run(int(arg), Path(tmp)))
        rewards = [round(x.get("reward_mean") or 0, 3) for x in h]
        print(f"seed {arg}: held-out {b:.3f} -> {a:.3f}; train reward by step {rewards}; "
              f"{time.perf_counter() - t0:.0f} s")  # fmt: skip
