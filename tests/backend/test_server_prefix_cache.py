"""The prefix cache through the real backend over HTTP: usage, completion records, /art/stats, the flag."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from art_adapters import LocalBackend

MODEL = "smollm2-135m-instruct"
SYSTEM = (
    "You are a careful assistant for arithmetic questions. Think about the numbers, then answer "
    "with the result in one short sentence, and nothing else."
)


def turn(question: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]


async def chat(http: httpx.AsyncClient, messages: list[dict[str, Any]], **body: Any) -> tuple[dict, dict]:
    """One greedy chat completion and its exact-token record."""
    body = {"model": MODEL, "messages": messages, "temperature": 0, "max_tokens": 8, **body}
    response = await http.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    record = await http.get(f"/art/completions/{response.json()['id']}")
    assert record.status_code == 200
    return response.json(), record.json()


async def engine_stats(http: httpx.AsyncClient) -> dict[str, Any]:
    return dict((await http.get("/art/stats")).json()["engine"])


@pytest.mark.slow
async def test_shared_prefixes_and_later_turns_are_served_from_the_cache(local_backend: LocalBackend) -> None:
    async with httpx.AsyncClient(base_url=local_backend.base_url, timeout=300) as http:
        before = await engine_stats(http)
        first, _ = await chat(http, turn("What is 17 + 25?"))
        prompt_tokens = first["usage"]["prompt_tokens"]
        # the same system prompt, another question: the system prompt's tokens are reused
        other, other_record = await chat(http, turn("What is 8 + 9?"))
        cached = other["usage"]["prompt_tokens_details"]["cached_tokens"]
        assert cached >= 32
        assert other_record["choices"][0]["cached_prompt_tokens"] == cached
        # the next turn of the first conversation starts from its keys and values
        reply = first["choices"][0]["message"]["content"]
        messages = [*turn("What is 17 + 25?"), {"role": "assistant", "content": reply},
                    {"role": "user", "content": "And 42 + 1?"}]  # fmt: skip
        second, second_record = await chat(http, messages)
        assert second_record["choices"][0]["cached_prompt_tokens"] >= prompt_tokens
        # streamed: the same figure in the stream's usage and in its record
        streamed = await http.post(
            "/v1/chat/completions",
            json={"model": MODEL, "messages": turn("What is 8 + 9?"), "temperature": 0, "max_tokens": 4,
                  "stream": True, "stream_options": {"include_usage": True}},
        )  # fmt: skip
        assert streamed.status_code == 200
        assert '"cached_tokens":' in streamed.text and '"cached_tokens":0' not in streamed.text
        after = await engine_stats(http)
    assert after["prefix_cache_hits"] - before["prefix_cache_hits"] >= 3
    saved = after["prefix_cache_hit_tokens"] - before["prefix_cache_hit_tokens"]
    assert saved >= cached + prompt_tokens
    assert 0 < after["prefix_cache_hit_rate"] <= 1 and after["prefix_cache_max_bytes"] == 256 << 20
    assert 0 < after["prefix_cache_bytes"] <= after["prefix_cache_max_bytes"] and after["prefix_cache_entries"] > 0
    assert after["prefill_tokens"] - before["prefill_tokens"] < after["prompt_tokens"] - before["prompt_tokens"]


@pytest.mark.slow
async def test_prefix_cache_bytes_zero_turns_it_off(tmp_path: Path) -> None:
    async with (
        LocalBackend(run_dir=tmp_path / "run", extra_args=["--prefix-cache-bytes", "0"]) as backend,
        httpx.AsyncClient(base_url=backend.base_url, timeout=300) as http,
    ):
        await chat(http, turn("What is 17 + 25?"))
        again, record = await chat(http, turn("What is 17 + 25?"))
        stats = await engine_stats(http)
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert record["choices"][0]["cached_prompt_tokens"] == 0
    assert stats["prefix_cache_max_bytes"] == 0 and stats["prefix_cache_hits"] == 0
    assert stats["prefill_tokens"] == stats["prompt_tokens"] > 0
