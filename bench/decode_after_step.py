"""Decoding speed of the embedded backend before and after a training step, in one run.

Every RL step after the first samples from a trained adapter in a server that has just trained, so
the decode speed that matters is the one after a step. This starts the embedded backend (bundled
model), measures ``--requests`` concurrent completions of ``--tokens`` forced tokens on the base
model, trains one tiny GRPO step, then measures the base model and the new adapter (``name@1``)
again; each rate is the best of ``--repeats`` rounds after a warm-up round. Printed: tokens/s
and the ratios against the base model before the step.

Before the engine ran training steps and adapter loads on its own decode thread
(``TorchEngine.run_exclusive``), the step ran in another thread and left a second OpenMP team
behind: then the adapter after the step decoded at 0.51x of the base model before it, now 0.71-0.73x
(the rest is PEFT's LoRA layers). Not part of the tests. Usage::

    ./dev bench decode_after_step [--requests 16] [--tokens 48] [--repeats 2]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time

import httpx

import art_adapters as aa

PROMPT = [{"role": "user", "content": "Write a long story about the sea and a lighthouse keeper."}]


async def tokens_per_second(base_url: str, model: str, requests: int, tokens: int) -> float:
    """Completion tokens/s of ``requests`` concurrent requests of ``tokens`` forced tokens each."""
    async with httpx.AsyncClient(base_url=base_url, timeout=600) as http:

        async def one(seed: int) -> int:
            body = {
                "model": model, "messages": PROMPT, "max_tokens": tokens, "min_tokens": tokens,
                "temperature": 1.0, "seed": seed,
            }  # fmt: skip
            response = await http.post("/v1/chat/completions", json=body)
            response.raise_for_status()
            return int(response.json()["usage"]["completion_tokens"])

        started = time.perf_counter()
        total = sum(await asyncio.gather(*(one(seed) for seed in range(requests))))
        return total / (time.perf_counter() - started)


async def best_rate(base_url: str, model: str, args: argparse.Namespace) -> float:
    """The best of ``args.repeats`` rounds, after a short warm-up round."""
    await tokens_per_second(base_url, model, 4, args.tokens)
    return max(
        [await tokens_per_second(base_url, model, args.requests, args.tokens) for _ in range(args.repeats)]
    )


async def run(args: argparse.Namespace) -> None:
    """Measure, train one step, measure again, print."""
    with tempfile.TemporaryDirectory() as tmp:
        async with aa.LocalBackend(run_dir=f"{tmp}/backend") as backend:
            model = aa.TrainableModel(name="speed", project="bench", base_model="smollm2-135m-instruct")
            await model.register(backend)
            before = await best_rate(backend.base_url, "speed@0", args)
            group = aa.TrajectoryGroup(trajectories=[
                aa.Trajectory(messages=[aa.Message(role="user", content="Say yes."),
                                        aa.Message(role="assistant", content=answer)], reward=reward)
                for answer, reward in (("Yes.", 1.0), ("No.", 0.0))
            ])  # fmt: skip
            result = await model.train(
                [group], config=aa.TrainConfig(learning_rate=1e-5, lora_rank=4, lora_alpha=8)
            )
            if not result.trained:
                raise SystemExit(f"the step did not train: {result.reason}")
            base_after = await best_rate(backend.base_url, "speed@0", args)
            adapter_after = await best_rate(backend.base_url, "speed@1", args)
    print(f"{args.requests} concurrent requests x {args.tokens} tokens, best of {args.repeats} rounds")
    print(f"{'base model before the step':34} {before:7.1f} tokens/s  1.00")
    print(f"{'base model after the step':34} {base_after:7.1f} tokens/s  {base_after / before:.2f}")
    print(
        f"{'adapter speed@1 after the step':34} {adapter_after:7.1f} tokens/s  {adapter_after / before:.2f}"
    )


def main() -> None:
    """Parse the arguments and run."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=16, help="concurrent requests per round")
    parser.add_argument("--tokens", type=int, default=48, help="forced completion tokens per request")
    parser.add_argument(
        "--repeats", type=int, default=2, help="timed rounds per measurement (the best counts)"
    )
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
