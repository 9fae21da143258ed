"""Output constraints compile on the grammar cache's own bounded pool, not the event loop's default
one: slow compiles never delay other work, and too many waiting compiles are a 429 (issue 24)."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import torch
from art_adapters_backend.bundled import BUNDLED_MODEL, load_tokenizer, resolve_model_path
from art_adapters_backend.serving.engine.base import Constraint, GenerationRequest, SamplingParams
from art_adapters_backend.serving.engine.constraint import GrammarCache
from art_adapters_backend.serving.engine.torch_engine import TorchEngine
from art_adapters_backend.errors import ServerBusyError

from tests.helpers.slow_grammar import pattern_schema, slow_pattern_length


#: How long each slow constraint takes to compile here (seconds), whatever the xgrammar release.
SLOW_COMPILE_S = 1.5


def slow(tokenizer: Any, i: int) -> Constraint:
    """A schema xgrammar takes at least ``SLOW_COMPILE_S`` to compile, distinct per ``i``."""
    return Constraint(json_schema=pattern_schema(slow_pattern_length(tokenizer, SLOW_COMPILE_S), variant=i))


QUICK = Constraint(json_schema={"type": "object", "properties": {"b": {"type": "integer"}}, "required": ["b"]})


@pytest.fixture(scope="module")
def model_path() -> Path:
    return resolve_model_path(BUNDLED_MODEL)


@pytest.fixture(scope="module")
def tokenizer(model_path: Path) -> Any:
    return load_tokenizer(model_path)


async def _default_pool_delay() -> float:
    started = time.perf_counter()
    await asyncio.to_thread(lambda: None)
    return time.perf_counter() - started


@pytest.mark.slow
async def test_slow_compiles_leave_the_default_pool_free(model_path: Path, tokenizer: Any) -> None:
    """With a 2-thread default pool, 3 slow constrained requests once held it for seconds."""
    constraints = [slow(tokenizer, i) for i in range(3)]
    loop = asyncio.get_running_loop()
    loop.set_default_executor(ThreadPoolExecutor(max_workers=2))
    threads = torch.get_num_threads()
    engine = await asyncio.to_thread(TorchEngine.load, model_path, max_batch_size=2, num_threads=1)
    await engine.start()
    try:
        params = SamplingParams(max_tokens=1, temperature=0.0)
        requests = [asyncio.create_task(engine.generate(GenerationRequest([1, 2, 3], params, constraint=constraint)))
                    for constraint in constraints]  # fmt: skip
        await asyncio.sleep(0.2)  # all three submitted and compiling or queued
        assert not any(task.done() for task in requests)
        delay = await _default_pool_delay()
        assert delay < 0.5, f"a plain to_thread call waited {delay:.2f} s behind grammar compiles"
        for task in requests:
            [seq] = await task
            assert len(seq.token_ids) == 1
    finally:
        await engine.close()
        torch.set_num_threads(threads)


async def test_too_many_waiting_compiles_are_a_429_and_cached_ones_still_answer(tokenizer: Any) -> None:
    slow(tokenizer, 0)  # measure the slow schema's size before the clock matters
    cache = GrammarCache(tokenizer, len(tokenizer), [int(tokenizer.eos_token_id)], threads=1, max_waiting=2)
    try:
        quick = await cache.compile_async(QUICK)
        running = [asyncio.create_task(cache.compile_async(slow(tokenizer, 10 + i))) for i in range(2)]
        await asyncio.sleep(0.05)
        with pytest.raises(ServerBusyError, match="2 output constraints .* being compiled") as refused:
            await cache.compile_async(slow(tokenizer, 20))
        assert refused.value.status_code == 429 and refused.value.response_headers() == {"Retry-After": "1"}
        assert await cache.compile_async(QUICK) is quick  # cached: no wait, no refusal
        await asyncio.gather(*running)
        assert await cache.compile_async(slow(tokenizer, 20)) is not None  # room again once they end
    finally:
        cache.close()


def test_the_pool_needs_a_thread_and_a_place(tokenizer: Any) -> None:
    for threads, waiting in [(0, 4), (1, 0)]:
        with pytest.raises(ValueError, match="must be at least 1"):
            GrammarCache(tokenizer, len(tokenizer), [0], threads=threads, max_waiting=waiting)
