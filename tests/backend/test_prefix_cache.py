"""The torch engine's prefix cache: the store itself, and reuse on the real bundled model and on tiny Qwen3."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path

import pytest
import torch
from art_adapters_backend.bundled import BUNDLED_MODEL, resolve_model_path
from art_adapters_backend.serving.engine.base import GenerationRequest, SamplingParams
from art_adapters_backend.serving.engine.prefix_cache import BLOCK, PrefixCache
from art_adapters_backend.serving.engine.torch_engine import TorchEngine

from tests.helpers.engines import started_engines

SYSTEM = (
    "You are a careful assistant. Use the add tool for arithmetic, then answer with the result. "
    "When the tool's result arrives, use it to answer the user in one short sentence."
)


def layers(n: int, fill: float, num_layers: int = 2) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """KV of ``n`` tokens: [H=2, n, D=4] per layer, every value ``fill``."""
    return [(torch.full((2, n, 4), fill), torch.full((2, n, 4), fill)) for _ in range(num_layers)]


# ---- the store -----------------------------------------------------------------------------


def test_longest_prefix_scope_and_limit() -> None:
    cache = PrefixCache(1 << 20)
    tokens = list(range(100, 140))  # 40 tokens
    cache.store("base#0", tokens, layers(40, 1.0))
    hit = cache.lookup("base#0", tokens[:35] + [7, 8, 9])
    assert hit is not None and hit.length == 35 and hit.layers[0][0].shape == (2, 35, 4)
    assert hit.logits is None
    # the whole prompt, without logits stored: all but the last token (it must give logits)
    whole = cache.lookup("base#0", tokens)
    assert whole is not None and whole.length == 39
    assert cache.lookup("lora@3#1", tokens) is None  # other weights never share
    assert cache.lookup("base#0", [1] + tokens[1:]) is None  # differs in the first block
    assert cache.lookup("base#0", tokens[: BLOCK - 1] + [0]) is None  # under one block: not worth it
    stats = cache.stats
    assert (stats.lookups, stats.hits, stats.hit_tokens, stats.entries) == (5, 2, 74, 1)


def test_stored_logits_answer_a_repeated_prompt_whole_and_survive_an_extension() -> None:
    cache = PrefixCache(1 << 20)
    prompt = list(range(50))
    logits = torch.arange(10.0)
    cache.store("s#0", prompt, layers(50, 1.0), logits)
    hit = cache.lookup("s#0", prompt)
    assert hit is not None and hit.length == 50 and torch.equal(hit.logits, logits)
    # the finished conversation extends the prompt: it replaces the entry and keeps its logits
    cache.store("s#0", prompt + [7, 8, 9], layers(53, 2.0))
    assert cache.stats.entries == 1
    hit = cache.lookup("s#0", prompt)
    assert hit is not None and hit.length == 50 and torch.equal(hit.logits, logits)
    assert float(hit.layers[0][0][0, 0, 0]) == 2.0
    longer = cache.lookup("s#0", prompt + [7, 8, 9, 10, 11])
    assert longer is not None and longer.length == 53 and longer.logits is None


def test_lru_eviction_keeps_the_byte_budget_and_invalidation_is_per_adapter() -> None:
    one = sum(k.nbytes + v.nbytes for k, v in layers(32, 0.0))
    cache = PrefixCache(2 * one)
    a, b, c = ([i] * 32 for i in (1, 2, 3))
    cache.store("x#0", a, layers(32, 1.0))
    cache.store("x#0", b, layers(32, 2.0))
    assert cache.lookup("x#0", a + [5]) is not None  # a is now the most recently used
    cache.store("x#0", c, layers(32, 3.0))
    assert cache.stats.bytes <= 2 * one and cache.stats.evictions == 1
    assert cache.lookup("x#0", b + [5]) is None and cache.lookup("x#0", a + [5]) is not None
    cache.store("name@3#1", a, layers(32, 4.0))
    cache.store("name@30#1", a, layers(32, 5.0))
    cache.invalidate("name@3")
    assert cache.lookup("name@3#1", a + [5]) is None
    assert cache.lookup("name@30#1", a + [5]) is not None
    assert PrefixCache(0).lookup("x#0", a) is None  # off: stores nothing, finds nothing
    with pytest.raises(ValueError, match="max_bytes"):
        PrefixCache(-1)


# ---- on the real model ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def model_path() -> Path:
    return resolve_model_path(BUNDLED_MODEL)


@pytest.fixture(scope="module")
async def engines(model_path: Path) -> AsyncIterator[tuple[TorchEngine, TorchEngine]]:
    """The bundled model with the prefix cache on, and with it off (the uncached path)."""
    async with started_engines(
        partial(TorchEngine.load, model_path, num_threads=1, prefix_cache_bytes=64 << 20),
        partial(TorchEngine.load, model_path, num_threads=1, prefix_cache_bytes=0),
    ) as (cached, plain):
        yield cached, plain


def render(engine: TorchEngine, messages: list[dict[str, str]]) -> list[int]:
    text = engine.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return engine.tokenizer(text, add_special_tokens=False).input_ids


def greedy(max_tokens: int = 12) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=max_tokens)


async def assert_cached_equals_uncached(cached: TorchEngine, plain: TorchEngine) -> None:
    """A shared system prompt, a repeated prompt and a second turn reuse KV, with the uncached logprobs."""
    first = render(cached, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What is 12 + 30?"}])
    [turn1] = await cached.generate(GenerationRequest(first, greedy()))
    assert turn1.cached_tokens == 0
    [again] = await cached.generate(GenerationRequest(first, greedy()))
    assert again.cached_tokens == len(first)  # the whole prompt, its logits too: bit for bit
    assert again.token_ids == turn1.token_ids and again.logprobs == turn1.logprobs

    other = render(cached, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What is 7 + 5?"}])
    second = first + turn1.token_ids + render(cached, [{"role": "user", "content": "Thanks. And 3 + 4?"}])
    for prompt, least in ((other, 2 * BLOCK), (second, len(first) + len(turn1.token_ids) - 1)):
        [hit] = await cached.generate(GenerationRequest(prompt, greedy(16)))
        [reference] = await plain.generate(GenerationRequest(prompt, greedy(16)))
        assert hit.cached_tokens >= least and reference.cached_tokens == 0
        assert hit.token_ids == reference.token_ids
        assert max(abs(x - y) for x, y in zip(hit.logprobs, reference.logprobs, strict=True)) < 1e-5
    # prefilled together: a row starting from a cached prefix and a fresh one of another length
    third = render(cached, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What is 1 + 99?"}])
    fresh = render(cached, [{"role": "user", "content": "Name three colours of the rainbow, please."}])
    together = await asyncio.gather(*(cached.generate(GenerationRequest(p, greedy(8))) for p in (third, fresh)))
    for prompt, [choice] in zip((third, fresh), together, strict=True):
        [reference] = await plain.generate(GenerationRequest(prompt, greedy(8)))
        assert choice.token_ids == reference.token_ids
        assert max(abs(x - y) for x, y in zip(choice.logprobs, reference.logprobs, strict=True)) < 1e-5
    assert together[0][0].cached_tokens >= 2 * BLOCK and together[1][0].cached_tokens == 0
    stats = cached.stats
    assert stats.prefix_cache_hits >= 3 and stats.prefix_cache_hit_tokens > len(first)
    assert stats.prefill_tokens < stats.prompt_tokens and 0 < stats.prefix_cache_hit_rate < 1
    assert plain.stats.prefix_cache_hits == 0 and plain.stats.prefix_cache_max_bytes == 0


@pytest.mark.slow
async def test_reused_prefixes_give_the_uncached_logprobs(engines: tuple[TorchEngine, TorchEngine]) -> None:
    await assert_cached_equals_uncached(*engines)


@pytest.mark.slow
async def test_a_group_shares_one_prefill_and_sampling_matches(engines: tuple[TorchEngine, TorchEngine]) -> None:
    cached, plain = engines
    prompt = render(cached, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Add 40 and 2."}])
    params = SamplingParams(temperature=1.0, max_tokens=10, seed=5)
    before = cached.stats.prefill_tokens
    group = await asyncio.gather(*(cached.generate(GenerationRequest(prompt, params)) for _ in range(4)))
    # one request's tokens: the system prompt came from the cache, the rest was prefilled once
    assert cached.stats.prefill_tokens - before <= len(prompt)
    [reference] = await plain.generate(GenerationRequest(prompt, params))
    for [choice] in group:
        assert choice.token_ids == reference.token_ids
        assert max(abs(x - y) for x, y in zip(choice.logprobs, reference.logprobs, strict=True)) < 1e-5


@pytest.mark.slow
async def test_keys_are_per_adapter_step_and_a_reload_invalidates(
    engines: tuple[TorchEngine, TorchEngine], model_path: Path, tmp_path: Path
) -> None:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    cached, plain = engines
    for seed in (3, 4):
        base = await asyncio.to_thread(AutoModelForCausalLM.from_pretrained, str(model_path), dtype=torch.float32)
        torch.manual_seed(seed)
        config = LoraConfig(r=8, lora_alpha=64, target_modules=["k_proj", "v_proj"], init_lora_weights=False)
        get_peft_model(base, config).save_pretrained(str(tmp_path / f"step{seed}"))
    prompt = render(cached, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What is 9 + 9?"}])
    await cached.load_adapter("name@3", tmp_path / "step3")
    await cached.load_adapter("name@4", tmp_path / "step4")
    await plain.load_adapter("name@4", tmp_path / "step4")
    try:
        [three] = await cached.generate(GenerationRequest(prompt, greedy(6), adapter="name@3"))
        [four] = await cached.generate(GenerationRequest(prompt, greedy(6), adapter="name@4"))
        assert four.cached_tokens == 0  # name@3's keys and values are not name@4's
        [three_again] = await cached.generate(GenerationRequest(prompt, greedy(6), adapter="name@3"))
        assert three_again.cached_tokens == len(prompt) and three_again.logprobs == three.logprobs
        assert three.logprobs != four.logprobs
        # a new checkpoint under the same name: nothing computed with the old weights is reused
        await cached.load_adapter("name@3", tmp_path / "step4")
        [reloaded] = await cached.generate(GenerationRequest(prompt, greedy(6), adapter="name@3"))
        [reference] = await plain.generate(GenerationRequest(prompt, greedy(6), adapter="name@4"))
        assert reloaded.cached_tokens == 0
        assert max(abs(x - y) for x, y in zip(reloaded.logprobs, reference.logprobs, strict=True)) < 1e-5
    finally:
        for name in ("name@3", "name@4"):
            await cached.unload_adapter(name)
        await plain.unload_adapter("name@4")


@pytest.mark.slow
async def test_tiny_qwen3_reuses_prefixes_with_the_uncached_logprobs() -> None:
    from tests.helpers.families_support import tiny_qwen3_path

    path = await asyncio.to_thread(tiny_qwen3_path)
    async with started_engines(
        partial(TorchEngine.load, path, num_threads=1, prefix_cache_bytes=16 << 20),
        partial(TorchEngine.load, path, num_threads=1, prefix_cache_bytes=0),
    ) as (cached, plain):
        await assert_cached_equals_uncached(cached, plain)


def test_bad_cache_settings_are_clear_errors() -> None:
    from art_adapters_backend.config import ServeConfig
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="prefix_cache_bytes"):
        ServeConfig(prefix_cache_bytes=-1)
    with pytest.raises(ValueError, match="prefix_cache_bytes"):
        TorchEngine.__init__(object.__new__(TorchEngine), None, None, prefix_cache_bytes=-1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="prefill_chunk"):
        TorchEngine.__init__(object.__new__(TorchEngine), None, None, prefill_chunk=0)  # type: ignore[arg-type]
