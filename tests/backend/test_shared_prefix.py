"""Shared prefixes: the cascade decode attention against SDPA, which models qualify, the engine on the
bundled model and on tiny Qwen3 giving the unshared, uncached engine's tokens and logprobs while rows
join, share, shorten the shared part and stop sharing; and a cold batch prefilling its common prefix once."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from art_adapters_backend.bundled import BUNDLED_MODEL, resolve_model_path
from art_adapters_backend.serving.engine.base import GenerationRequest, SamplingParams
from art_adapters_backend.serving.engine.shared_prefix import (
    MIN_SHARED_TOKENS,
    common_prefix_length,
    shared_prefix_attention,
    supports_shared_prefix,
)
from art_adapters_backend.serving.engine.torch_engine import TorchEngine

from tests.helpers.engines import started_engines

SYSTEM = (
    "You are a careful assistant. Use the add tool for arithmetic, then answer with the result. "
    "When the tool's result arrives, use it to answer the user in one short sentence. "
) * 3


def test_common_prefix_length() -> None:
    assert common_prefix_length([1, 2, 3], [1, 2, 3]) == 3
    assert common_prefix_length([1, 2, 3], [1, 2]) == 2
    assert common_prefix_length([1, 2, 3, 4, 5], [1, 2, 9, 4, 5]) == 2
    assert common_prefix_length([7] * 1000 + [1], [7] * 1000 + [2]) == 1000
    assert common_prefix_length([], [1]) == 0 and common_prefix_length([1], [2]) == 0


def test_only_full_attention_models_qualify() -> None:
    from transformers import Gemma2Config, LlamaConfig, MistralConfig, Qwen3Config

    assert supports_shared_prefix(LlamaConfig())
    assert supports_shared_prefix(Qwen3Config(use_sliding_window=False))
    assert not supports_shared_prefix(Qwen3Config(use_sliding_window=True, max_window_layers=0))
    assert not supports_shared_prefix(MistralConfig(sliding_window=4096))
    assert supports_shared_prefix(MistralConfig(sliding_window=None))
    assert not supports_shared_prefix(Gemma2Config())  # soft-capped logits, sliding layers


@pytest.mark.parametrize("group", [1, 3])
def test_attention_equals_sdpa_over_the_whole_context(group: int) -> None:
    """One query per row against a shared prefix and left-padded own keys: SDPA's result on the
    concatenated keys and values (the prefix repeated per row), grouped-query heads included."""
    torch.manual_seed(0)
    rows, kv_heads, dim, prefix, own = 5, 2, 16, 40, 7
    heads = kv_heads * group
    query = torch.randn(rows, heads, 1, dim)
    prefix_keys, prefix_values = torch.randn(kv_heads, prefix, dim), torch.randn(kv_heads, prefix, dim)
    keys, values = torch.randn(rows, kv_heads, own, dim), torch.randn(rows, kv_heads, own, dim)
    mask = torch.ones(rows, 1, 1, own, dtype=torch.bool)
    mask[1, ..., :3] = False  # left padding
    mask[4, ..., :6] = False
    module = SimpleNamespace(layer_idx=1, num_key_value_groups=group)
    shared = [(torch.zeros(kv_heads, prefix, dim),) * 2, (prefix_keys, prefix_values)]
    out, weights = shared_prefix_attention(
        module, query, keys, values, mask, scaling=0.3, shared_prefix=shared
    )
    assert weights is None and out.shape == (rows, 1, heads, dim)

    whole_keys = torch.cat([prefix_keys.expand(rows, -1, -1, -1), keys], dim=2).repeat_interleave(
        group, dim=1
    )
    whole_values = torch.cat([prefix_values.expand(rows, -1, -1, -1), values], dim=2).repeat_interleave(
        group, dim=1
    )
    whole_mask = torch.cat([torch.ones(rows, 1, 1, prefix, dtype=torch.bool), mask], dim=-1)
    expected = F.scaled_dot_product_attention(
        query, whole_keys, whole_values, attn_mask=whole_mask, scale=0.3
    )
    assert torch.allclose(out, expected.transpose(1, 2), atol=1e-5)
    # without a shared prefix: transformers' SDPA attention on the keys given
    plain, _ = shared_prefix_attention(module, query, keys, values, mask, scaling=0.3)
    reference = F.scaled_dot_product_attention(
        query,
        keys.repeat_interleave(group, dim=1),
        values.repeat_interleave(group, dim=1),
        attn_mask=mask,
        scale=0.3,
    )
    assert torch.allclose(plain, reference.transpose(1, 2), atol=1e-5)
    with pytest.raises(ValueError, match="one token per row"):
        shared_prefix_attention(
            module, torch.randn(rows, heads, 2, dim), keys, values, None, shared_prefix=shared
        )


# ---- on real models ------------------------------------------------------------------------


def render(engine: TorchEngine, system: str, question: str) -> list[int]:
    messages = [{"role": "system", "content": system}, {"role": "user", "content": question}]
    text = engine.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return engine.tokenizer(text, add_special_tokens=False).input_ids


async def decode(
    engine: TorchEngine, prompts: list[list[int]], late: int
) -> list[tuple[list[int], list[float]]]:
    """Greedy tokens and logprobs of ``prompts``; the last ``late`` are sent once the first row has
    decoded its first token (so they join a running batch), the others together."""
    params = SamplingParams(temperature=0.0, max_tokens=40, min_tokens=40)
    early, rest = prompts[: len(prompts) - late], prompts[len(prompts) - late :]
    first_token = asyncio.Event()

    async def one(prompt: list[int], after_first: bool) -> tuple[list[int], list[float]]:
        if after_first:
            await first_token.wait()
        tokens: list[int] = []
        logprobs: list[float] = []
        async for delta in engine.stream(GenerationRequest(prompt, params)):
            tokens += delta.token_ids
            logprobs += delta.logprobs
            first_token.set()
        return tokens, logprobs

    return await asyncio.gather(*(one(p, False) for p in early), *(one(p, True) for p in rest))


async def assert_shared_equals_unshared(
    shared: TorchEngine, plain: TorchEngine, caplog: pytest.LogCaptureFixture
) -> None:
    """Rows that start alone, join a running row, join with a shorter common prefix, and a row with
    another system prompt (the batch stops sharing): the unshared engine's tokens, logprobs within 1e-5."""
    caplog.set_level(logging.DEBUG, logger="art_adapters_backend.serving.engine.batch")
    assert shared.share_prefixes and not plain.share_prefixes
    same = [render(shared, SYSTEM, f"What is {a} + {b}?") for a, b in ((12, 30), (7, 5), (100, 1), (3, 4))]
    assert common_prefix_length(same[0], same[1]) >= MIN_SHARED_TOKENS
    scenarios = [
        # one row alone (not shared), then three join it: the running row gives up its copy
        (same, 3),
        # the same prompt twice (shares all but its last token), then another question shortens it
        ([same[0], same[0], same[2]], 1),
        # sharing, then a row with another system prompt ends the sharing
        ([same[1], same[3], render(shared, "Answer in French.", "What is 2 + 2?")], 1),
    ]
    for prompts, late in scenarios:
        before = shared.stats.shared_prefix_steps
        got = await decode(shared, prompts, late)
        want = await decode(plain, prompts, late)
        for (tokens, logprobs), (reference_tokens, reference_logprobs) in zip(got, want, strict=True):
            assert tokens == reference_tokens and len(tokens) == 40
            assert max(abs(x - y) for x, y in zip(logprobs, reference_logprobs, strict=True)) < 1e-5
        assert shared.stats.shared_prefix_steps > before, prompts
    # each path taken: a running row and three joining share; a shorter prefix; sharing ended
    said = [record.getMessage() for record in caplog.records if "share" in record.getMessage()]
    assert re.fullmatch(r"4 rows share their first \d+ tokens", said[0]), said
    assert any(re.fullmatch(r"a joining row shares [1-9]\d+ tokens: \d+ moved .*", line) for line in said), (
        said
    )
    assert re.fullmatch(r"a joining row shares 0 tokens: \d+ moved .*", said[-1]), said
    assert shared.stats.shared_prefix_reads_saved > 0
    assert plain.stats.shared_prefix_steps == plain.stats.shared_prefix_reads_saved == 0


@pytest.fixture(scope="module")
async def bundled() -> AsyncIterator[tuple[TorchEngine, TorchEngine]]:
    path = resolve_model_path(BUNDLED_MODEL)
    async with started_engines(
        partial(TorchEngine.load, path, num_threads=1),
        partial(TorchEngine.load, path, num_threads=1, share_prefixes=False, prefix_cache_bytes=0),
    ) as (shared, plain):
        yield shared, plain


@pytest.mark.slow
async def test_the_bundled_model_decodes_shared_prefixes_as_unshared(
    bundled: tuple[TorchEngine, TorchEngine], caplog: pytest.LogCaptureFixture
) -> None:
    await assert_shared_equals_unshared(*bundled, caplog)


@pytest.mark.slow
async def test_tiny_qwen3_decodes_shared_prefixes_as_unshared(caplog: pytest.LogCaptureFixture) -> None:
    from tests.helpers.families_support import tiny_qwen3_path

    path: Path = await asyncio.to_thread(tiny_qwen3_path)
    async with started_engines(
        partial(TorchEngine.load, path, num_threads=1),
        partial(TorchEngine.load, path, num_threads=1, share_prefixes=False),
    ) as (shared, plain):
        await assert_shared_equals_unshared(shared, plain, caplog)


@pytest.mark.slow
async def test_a_cold_batch_prefills_its_common_prefix_once(bundled: tuple[TorchEngine, TorchEngine]) -> None:
    """Six prompts with one system prompt (not cached yet) and their own questions, sent together: the
    common part is computed once, then each question; the tokens and logprobs are those of each prompt
    decoded alone without a cache."""
    shared, plain = bundled
    system = "You answer questions about the calendar. Dates are written as YYYY-MM-DD. " * 3
    prompts = [render(shared, system, f"Which day follows day {i} of the month?") for i in range(6)]
    common = min(common_prefix_length(prompts[0], p) for p in prompts[1:])
    assert common >= MIN_SHARED_TOKENS
    before = shared.stats.prefill_tokens
    got = await decode(shared, prompts, late=0)
    computed = shared.stats.prefill_tokens - before
    assert computed <= common + sum(len(p) - common for p in prompts), (computed, common)
    assert computed < sum(len(p) for p in prompts) - 4 * common
    for prompt, (tokens, logprobs) in zip(prompts, got, strict=True):
        [(reference_tokens, reference_logprobs)] = await decode(plain, [prompt], late=0)
        assert tokens == reference_tokens
        assert max(abs(x - y) for x, y in zip(logprobs, reference_logprobs, strict=True)) < 1e-5
