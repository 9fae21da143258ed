"""Concurrent requests are decoded together (dynamic batching) and none is dropped."""

from __future__ import annotations

import asyncio

import httpx
import openai
import pytest

from art_adapters import LocalBackend

MODEL = "smollm2-135m-instruct"
PROMPTS = [
    "Write a poem about the sea.", "Explain what a CPU does.", "List uses of a paperclip.",
    "Describe a rainy morning.", "Give advice to a gardener.", "What makes good tea?",
    "Tell a story about a robot.", "Why do leaves change colour?",
]  # fmt: skip
TOKENS = 12


async def _stats(backend: LocalBackend) -> dict:
    async with httpx.AsyncClient(base_url=backend.base_url) as http:
        return (await http.get("/art/stats")).json()["engine"]


@pytest.mark.slow
async def test_eight_concurrent_requests_all_complete_batched(local_backend: LocalBackend) -> None:
    client = openai.AsyncOpenAI(base_url=local_backend.openai_base_url, api_key="unused", max_retries=0)

    async def ask(i: int) -> tuple[str, int]:
        response = await client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": PROMPTS[i]}],
            temperature=1.0,
            seed=i,
            max_tokens=TOKENS,
        )
        assert response.usage is not None
        return response.id, response.usage.completion_tokens

    before = await _stats(local_backend)
    results = await asyncio.gather(*(ask(i) for i in range(8)))
    after = await _stats(local_backend)
    await client.close()

    assert len(results) == 8 and len({rid for rid, _ in results}) == 8
    for rid, _ in results:  # every one answered and recorded
        assert (await local_backend.get_token_record(rid))["id"] == rid
    tokens = sum(n for _, n in results)
    steps = after["steps"] - before["steps"]
    # Decoded together: on average several sequences advanced per decode step ...
    assert tokens / max(steps, 1) >= 2.5, (tokens, steps)
    assert after["max_batch_size_seen"] >= 4
    # Wall-clock speed-up is measured by bench/inference.py, not asserted here (noisy machines).
