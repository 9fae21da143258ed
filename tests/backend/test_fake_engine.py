"""The tests' fake engine keeps the engine contract the real ones keep (so tests on it mean something)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from art_adapters_backend.serving.engine.base import (
    Constraint,
    ContextLengthError,
    GenerationRequest,
    InferenceEngine,
    SamplingParams,
)
from art_adapters_backend.serving.engine.constraint import ConstraintError

from tests.helpers.fake_engine import MAX_WORDS, FakeEngine

MODEL = "smollm2-135m-instruct"


@pytest.fixture(scope="module")
def engine() -> FakeEngine:
    from art_adapters_backend.bundled import load_tokenizer, resolve_model_path

    path = resolve_model_path(MODEL)
    return FakeEngine.for_model(path, load_tokenizer(path))


def _request(prompt: list[int], **params: Any) -> GenerationRequest:
    n = params.pop("n", 1)
    constraint = params.pop("constraint", None)
    return GenerationRequest(
        prompt_token_ids=prompt, params=SamplingParams(**params), n=n, constraint=constraint
    )


async def test_it_is_an_inference_engine_and_greedy_is_deterministic(engine: FakeEngine) -> None:
    assert isinstance(engine, InferenceEngine) and engine.context_length == 8192
    [one] = await engine.generate(_request([1, 2, 3], temperature=0.0, max_tokens=64))
    [again] = await engine.generate(_request([1, 2, 3], temperature=0.0, max_tokens=64))
    assert one == again and one.eos and one.finish_reason == "stop"
    assert one.token_ids[-1] == engine.eos_token_id and 1 <= len(one.text_token_ids) <= MAX_WORDS
    assert engine.tokenizer.decode(one.text_token_ids) == one.text and len(one.logprobs) == len(one.token_ids)
    assert all(lp < 0 for lp in one.logprobs)


async def test_sampling_varies_seeds_reproduce_and_length_caps(engine: FakeEngine) -> None:
    many = await engine.generate(_request([5, 6], temperature=1.0, max_tokens=64, n=8))
    assert len({tuple(c.token_ids) for c in many}) > 1 and [c.index for c in many] == list(range(8))
    seeded = [await engine.generate(_request([5, 6], temperature=1.0, seed=3, n=2)) for _ in range(2)]
    assert seeded[0] == seeded[1]
    capped = await engine.generate(_request([5, 6], temperature=1.0, max_tokens=1, n=4))
    assert all(len(c.token_ids) == 1 and c.finish_reason in {"stop", "length"} for c in capped)
    with pytest.raises(ContextLengthError):
        await engine.generate(_request([5] * 8000, max_tokens=500))


async def test_stream_concatenates_to_generate_with_top_logprobs(engine: FakeEngine) -> None:
    request = _request([7, 8, 9], temperature=0.0, max_tokens=32, top_logprobs=3)
    [whole] = await engine.generate(request)
    deltas = [d async for d in engine.stream(request)]
    assert "".join(d.text for d in deltas) == whole.text
    assert [t for d in deltas for t in d.token_ids] == whole.token_ids
    assert deltas[-1].finish_reason == whole.finish_reason
    assert all(d.finish_reason is None for d in deltas[:-1])
    assert whole.top_logprobs is not None
    rows = zip(whole.top_logprobs, whole.token_ids, whole.logprobs, strict=True)
    assert all(len(row) == 3 and row[0] == (t, lp) for row, t, lp in rows)


async def test_a_constraint_yields_json_of_the_schema_and_a_bad_schema_is_the_engines_error(
    engine: FakeEngine,
) -> None:
    schema = {"type": "object", "properties": {"item": {"$ref": "#/$defs/Item"}, "ok": {"type": "boolean"}},
              "$defs": {"Item": {"type": "object", "properties": {"v": {"type": "integer"}}}}}  # fmt: skip
    constraint = Constraint(json_schema=schema, prefix="<tool_call>\n", suffix="\n</tool_call>")
    [call] = await engine.generate(_request([1], temperature=0.0, max_tokens=64, constraint=constraint))
    assert call.text.startswith("<tool_call>\n") and call.text.endswith("\n</tool_call>") and call.eos
    value = json.loads(call.text.removeprefix("<tool_call>\n").removesuffix("\n</tool_call>"))
    assert set(value) == {"item", "ok"} and isinstance(value["item"]["v"], int)
    with pytest.raises(ConstraintError):
        bad = Constraint(json_schema={"type": "object", "properties": {"x": {"$ref": "#/nowhere"}}})
        await engine.generate(_request([1], constraint=bad))
