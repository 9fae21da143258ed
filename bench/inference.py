"""Inference throughput of the embedded backend: 1 vs 8 concurrent requests, and time to first token.

Starts the real backend (LocalBackend) on 127.0.0.1, then in the same run measures:

- sequential: 8 requests one after another (the baseline);
- concurrent: 8 requests at once (dynamic batching);
- time to first token of a streamed request while the server is idle.

Prints tokens/s for both and their ratio (goal: concurrent >= 3.5x sequential on 2 cores).
Not part of the test suite's pass/fail. Usage: ``./dev bench inference [--max-tokens 64]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time

from openai import AsyncOpenAI

from art_adapters import LocalBackend

PROMPTS = [
    "Write a short poem about the sea.",
    "Explain what a CPU does in two sentences.",
    "List three uses of a paperclip.",
    "Describe a rainy morning in a city.",
    "Give advice to a new gardener.",
    "What makes a good cup of tea?",
    "Tell a very short story about a robot.",
    "Why do leaves change colour in autumn?",
]


async def one(client: AsyncOpenAI, model: str, prompt: str, max_tokens: int, seed: int) -> int:
    """Send one chat request; return the number of completion tokens."""
    response = await client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": prompt}],
        max_tokens=max_tokens,
        temperature=1.0,
        seed=seed,
    )
    return response.usage.completion_tokens if response.usage else 0


async def time_to_first_token(client: AsyncOpenAI, model: str, max_tokens: int) -> float:
    """Seconds from sending a streamed request to its first content chunk."""
    start = time.perf_counter()
    stream = await client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": PROMPTS[0]}],
        max_tokens=max_tokens,
        stream=True,
    )
    first = None
    async for chunk in stream:
        if first is None and chunk.choices and chunk.choices[0].delta.content:
            first = time.perf_counter() - start
    return first if first is not None else float("nan")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-tokens", type=int, default=64, help="new tokens per request (default 64)")
    parser.add_argument("--rounds", type=int, default=2, help="repetitions of each measurement (default 2)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as run_dir:
        async with LocalBackend(run_dir=run_dir) as backend:
            client = AsyncOpenAI(base_url=backend.openai_base_url, api_key="unused")
            model = "smollm2-135m-instruct"
            await one(client, model, "warm up", 8, 0)
            seq_rates, conc_rates, ttfts = [], [], []
            for round_index in range(args.rounds):
                # Interleave the two measurements so drift on a noisy machine hits both alike.
                start = time.perf_counter()
                tokens = 0
                for i, prompt in enumerate(PROMPTS):
                    tokens += await one(client, model, prompt, args.max_tokens, round_index * 100 + i)
                seq_rates.append(tokens / (time.perf_counter() - start))

                start = time.perf_counter()
                counts = await asyncio.gather(
                    *(one(client, model, p, args.max_tokens, round_index * 100 + i) for i, p in enumerate(PROMPTS))
                )
                conc_rates.append(sum(counts) / (time.perf_counter() - start))
                ttfts.append(await time_to_first_token(client, model, 16))

    seq, conc = statistics.median(seq_rates), statistics.median(conc_rates)
    print(f"max_tokens={args.max_tokens}, rounds={args.rounds}, {len(PROMPTS)} requests each")
    print(f"sequential (1 at a time): {seq:7.1f} tokens/s")
    print(f"concurrent (8 at once):   {conc:7.1f} tokens/s")
    print(f"ratio concurrent/sequential: {conc / seq:.2f}x  (goal >= 3.5x)")
    print(f"time to first token (idle server, streamed): {statistics.median(ttfts) * 1000:.0f} ms")


if __name__ == "__main__":
    asyncio.run(main())
