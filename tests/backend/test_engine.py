"""TorchEngine on the real bundled model: sampling, batching, constraints, adapters, streaming."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path

import pytest
import torch
from art_adapters_backend.bundled import BUNDLED_MODEL, resolve_model_path
from art_adapters_backend.serving.engine.base import (
    Constraint,
    ContextLengthError,
    GenerationRequest,
    InferenceEngine,
    SamplingParams,
)
from art_adapters_backend.serving.engine.constraint import ConstraintError
from art_adapters_backend.serving.engine.text import TextTracker
from art_adapters_backend.serving.engine.torch_engine import EngineClosedError, TorchEngine

from tests.helpers.engines import started_engines

ADD_CALL_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"const": "add"},
        "arguments": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
    "required": ["name", "arguments"],
}


@pytest.fixture(scope="module")
def model_path() -> Path:
    return resolve_model_path(BUNDLED_MODEL)


@pytest.fixture(scope="module")
async def engine(model_path: Path) -> AsyncIterator[TorchEngine]:
    # One intra-op thread: on a 2-core machine shared with other busy processes, torch's
    # spinning worker threads make decoding 10x slower. Restored for the tests that follow.
    load = partial(TorchEngine.load, model_path, max_batch_size=8, num_threads=1)
    async with started_engines(load) as (engine,):
        yield engine


def chat(engine: TorchEngine, text: str, system: str | None = None) -> list[int]:
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": text}]
    rendered = engine.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return engine.tokenizer(rendered, add_special_tokens=False).input_ids


def greedy(max_tokens: int = 12, **kwargs: object) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=max_tokens, **kwargs)  # type: ignore[arg-type]


def forward_logprobs(model: torch.nn.Module, prompt: list[int], completion: list[int], temperature: float) -> list[float]:
    """Log-probabilities of ``completion`` after ``prompt`` from one plain forward pass."""
    ids = torch.tensor([prompt + completion])
    with torch.inference_mode():
        logits = model(input_ids=ids).logits[0].float()
    logits = logits[len(prompt) - 1 : -1] / temperature
    lp = torch.log_softmax(logits, dim=-1)
    return lp.gather(1, torch.tensor(completion).unsqueeze(1)).squeeze(1).tolist()


@pytest.mark.slow
async def test_engine_implements_the_protocol(engine: TorchEngine) -> None:
    assert isinstance(engine, InferenceEngine)
    assert engine.context_length == 8192
    assert engine.eos_token_ids == {engine.tokenizer.convert_tokens_to_ids("<|im_end|>")}


@pytest.mark.slow
async def test_greedy_is_deterministic_and_stops_at_eos(engine: TorchEngine) -> None:
    prompt = chat(engine, "What is the capital of France?")
    [first] = await engine.generate(GenerationRequest(prompt, greedy(24)))
    [second] = await engine.generate(GenerationRequest(prompt, greedy(24)))
    assert first.token_ids == second.token_ids and first.text == second.text
    assert "Paris" in first.text
    assert first.finish_reason == "stop" and first.eos  # the sampled EOS ends the tokens, adds no text
    assert first.token_ids[-1] == engine.tokenizer.eos_token_id
    assert engine.tokenizer.eos_token_id not in first.text_token_ids
    assert engine.tokenizer.decode(first.text_token_ids) == first.text
    assert len(first.logprobs) == len(first.token_ids) and first.top_logprobs is None
    # Its log-prob is the model's, like every sampled token's (training needs it).
    expected = forward_logprobs(engine.model, prompt, first.token_ids, temperature=1.0)
    assert abs(first.logprobs[-1] - expected[-1]) < 1e-3


@pytest.mark.slow
async def test_seed_reproduces_and_choices_differ(engine: TorchEngine) -> None:
    prompt = chat(engine, "Write a short poem about the sea.")
    params = SamplingParams(temperature=1.0, max_tokens=8, seed=1234)
    a = await engine.generate(GenerationRequest(prompt, params, n=3))
    b = await engine.generate(GenerationRequest(prompt, params, n=3))
    assert [s.token_ids for s in a] == [s.token_ids for s in b]
    assert [s.index for s in a] == [0, 1, 2]
    assert len({tuple(s.token_ids) for s in a}) > 1, "the n choices of one request must be sampled independently"
    c = await engine.generate(GenerationRequest(prompt, SamplingParams(temperature=1.0, max_tokens=8, seed=99), n=3))
    assert [s.token_ids for s in c] != [s.token_ids for s in a]


@pytest.mark.slow
async def test_stop_string_cuts_text_and_length_finish(engine: TorchEngine) -> None:
    prompt = chat(engine, "What is the capital of France?")
    [full] = await engine.generate(GenerationRequest(prompt, greedy(24)))
    assert " Paris" in full.text
    [cut] = await engine.generate(GenerationRequest(prompt, greedy(24, stop=("xyz-never", " Paris"))))
    assert cut.finish_reason == "stop"
    assert cut.text == full.text[: full.text.index(" Paris")]
    assert engine.tokenizer.decode(cut.token_ids).startswith(cut.text + " Paris")  # stop tokens kept
    assert len(cut.token_ids) < len(full.token_ids)
    [short] = await engine.generate(GenerationRequest(prompt, greedy(3)))
    assert short.finish_reason == "length" and short.token_ids == full.token_ids[:3]


@pytest.mark.slow
async def test_logprobs_match_a_fresh_forward_pass(engine: TorchEngine) -> None:
    """Sampled at temperature 1 in a batch with prompts of other lengths (so with left padding)."""
    prompts = [
        chat(engine, "Name a fruit."),
        chat(engine, "Tell me about the history of the Roman empire in a few words.", system="Be brief."),
    ]
    results = await asyncio.gather(
        *(
            engine.generate(GenerationRequest(p, SamplingParams(temperature=1.0, max_tokens=10, seed=5), n=2))
            for p in prompts
        )
    )
    for prompt, choices in zip(prompts, results, strict=True):
        for choice in choices:
            expected = forward_logprobs(engine.model, prompt, choice.token_ids, temperature=1.0)
            assert max(abs(x - y) for x, y in zip(choice.logprobs, expected, strict=True)) < 1e-4
    # Temperature scales the reported distribution.
    prompt = prompts[0]
    [hot] = await engine.generate(GenerationRequest(prompt, SamplingParams(temperature=0.7, max_tokens=6, seed=3)))
    expected = forward_logprobs(engine.model, prompt, hot.token_ids, temperature=0.7)
    assert max(abs(x - y) for x, y in zip(hot.logprobs, expected, strict=True)) < 1e-4


@pytest.mark.slow
async def test_top_logprobs(engine: TorchEngine) -> None:
    prompt = chat(engine, "Count from one to five.")
    [choice] = await engine.generate(GenerationRequest(prompt, greedy(6, top_logprobs=3)))
    assert choice.top_logprobs is not None and len(choice.top_logprobs) == len(choice.token_ids)
    for token, logprob, top in zip(choice.token_ids, choice.logprobs, choice.top_logprobs, strict=True):
        assert len(top) == 3
        assert [lp for _, lp in top] == sorted((lp for _, lp in top), reverse=True)
        assert top[0] == (token, pytest.approx(logprob))  # greedy picks the most likely token


@pytest.mark.slow
async def test_constrained_tool_call_is_valid_json(engine: TorchEngine) -> None:
    prompt = chat(engine, "Add 2 and 3 with the add tool.")
    constraint = Constraint(ADD_CALL_SCHEMA, prefix="<tool_call>\n", suffix="\n</tool_call>")
    choices = await engine.generate(
        GenerationRequest(prompt, SamplingParams(temperature=1.0, max_tokens=40, seed=11), n=3, constraint=constraint)
    )
    finished = [c for c in choices if c.finish_reason == "stop"]
    assert finished, "at least one constrained choice should complete within 40 tokens"
    for choice in finished:
        assert choice.text.startswith("<tool_call>\n") and choice.text.endswith("\n</tool_call>")
        call = json.loads(choice.text[len("<tool_call>\n") : -len("\n</tool_call>")])
        assert call["name"] == "add" and set(call["arguments"]) == {"a", "b"}
        assert all(isinstance(v, int) for v in call["arguments"].values())
    # The forced prefix is fed as the tokenizer's own tokens.
    prefix_ids = engine.tokenizer("<tool_call>\n", add_special_tokens=False).input_ids
    assert choices[0].token_ids[: len(prefix_ids)] == prefix_ids
    with pytest.raises(ConstraintError, match="schema"):
        await engine.generate(GenerationRequest(prompt, greedy(4), constraint=Constraint({"type": "objectx"})))


@pytest.mark.slow
async def test_concurrent_requests_are_batched_and_a_bad_one_fails_alone(engine: TorchEngine) -> None:
    before = engine.stats
    prompts = [chat(engine, f"Say a word that starts with the letter {c}.") for c in "ABCDEFGH"]
    too_long = GenerationRequest(prompts[0], SamplingParams(max_tokens=engine.context_length))
    requests = [engine.generate(GenerationRequest(p, SamplingParams(temperature=1.0, max_tokens=8, seed=i)))
                for i, p in enumerate(prompts)]
    results = await asyncio.gather(*requests[:4], engine.generate(too_long), *requests[4:], return_exceptions=True)
    assert isinstance(results[4], ContextLengthError) and "context" in str(results[4])
    good = results[:4] + results[5:]
    assert all(isinstance(r, list) and len(r[0].token_ids) > 0 for r in good), good
    after = engine.stats
    assert after.max_batch_size_seen > 1
    assert len(good) == 8 and after.requests - before.requests == 8
    # One decode step serves several sequences: far fewer steps than tokens.
    assert after.steps - before.steps < (after.tokens_generated - before.tokens_generated) / 2


@pytest.mark.slow
async def test_invalid_requests_are_clear_errors(engine: TorchEngine) -> None:
    prompt = chat(engine, "Hi")
    cases = [
        (GenerationRequest([], greedy()), "empty"),
        (GenerationRequest(prompt, greedy(), n=0), "n must"),
        (GenerationRequest(prompt, SamplingParams(top_p=0.0)), "top_p"),
        (GenerationRequest(prompt, SamplingParams(temperature=-1.0)), "temperature"),
        (GenerationRequest(prompt, greedy(), adapter="nope"), "unknown adapter"),
        (GenerationRequest([10**9], greedy()), "token ids"),
    ]
    for request, message in cases:
        with pytest.raises(ValueError, match=message):
            await engine.generate(request)


@pytest.mark.slow
async def test_lora_adapter_changes_output_and_unload_restores(
    engine: TorchEngine, model_path: Path, tmp_path: Path
) -> None:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = await asyncio.to_thread(AutoModelForCausalLM.from_pretrained, str(model_path), dtype=torch.float32)
    torch.manual_seed(0)
    lora = get_peft_model(
        base, LoraConfig(r=8, lora_alpha=32, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    ).eval()
    lora.save_pretrained(str(tmp_path / "lora"))

    prompt = chat(engine, "What is the capital of France?")
    [before] = await engine.generate(GenerationRequest(prompt, greedy(8)))
    await engine.load_adapter("random", tmp_path / "lora")
    assert engine.adapters == {"random"}
    # Base and adapter requests decoded in the same batch.
    [with_lora], [base_again] = await asyncio.gather(
        engine.generate(GenerationRequest(prompt, greedy(8), adapter="random")),
        engine.generate(GenerationRequest(prompt, greedy(8))),
    )
    assert with_lora.token_ids != before.token_ids
    assert base_again.token_ids == before.token_ids
    expected = forward_logprobs(lora, prompt, with_lora.token_ids, temperature=1.0)
    assert max(abs(x - y) for x, y in zip(with_lora.logprobs, expected, strict=True)) < 1e-4
    await engine.unload_adapter("random")
    assert engine.adapters == set()
    [after] = await engine.generate(GenerationRequest(prompt, greedy(8)))
    assert after.token_ids == before.token_ids
    assert after.logprobs == pytest.approx(before.logprobs, abs=1e-5)
    with pytest.raises(FileNotFoundError, match="adapter_config.json"):
        await engine.load_adapter("broken", tmp_path)
    (tmp_path / "ia3").mkdir()
    (tmp_path / "ia3" / "adapter_config.json").write_text('{"peft_type": "IA3"}')
    with pytest.raises(ValueError, match="only LoRA"):
        await engine.load_adapter("ia3", tmp_path / "ia3")
    assert engine.adapters == set()


@pytest.mark.slow
async def test_stream_deltas_concatenate_to_generate(engine: TorchEngine) -> None:
    prompt = chat(engine, "Tell me a fun fact.")
    params = SamplingParams(temperature=1.0, max_tokens=16, seed=42, stop=("\n\n",))
    generated = await engine.generate(GenerationRequest(prompt, params, n=2))
    texts, tokens, finishes = ["", ""], [[], []], [None, None]
    n_deltas = 0
    async for delta in engine.stream(GenerationRequest(prompt, params, n=2)):
        assert finishes[delta.index] is None, "nothing may follow a choice's finishing delta"
        texts[delta.index] += delta.text
        tokens[delta.index] += delta.token_ids
        finishes[delta.index] = delta.finish_reason
        n_deltas += 1
    assert n_deltas > 4
    for choice in generated:
        assert texts[choice.index] == choice.text
        assert tokens[choice.index] == choice.token_ids
        assert finishes[choice.index] == choice.finish_reason


@pytest.mark.slow
async def test_paused_holds_decoding_then_releases(engine: TorchEngine) -> None:
    prompt = chat(engine, "Hi")
    async with engine.paused():
        steps = engine.stats.steps
        task = asyncio.create_task(engine.generate(GenerationRequest(prompt, greedy(4))))
        await asyncio.sleep(0.5)
        assert not task.done()
        assert engine.stats.steps == steps
    [choice] = await asyncio.wait_for(task, timeout=60)
    assert len(choice.token_ids) > 0


@pytest.mark.slow
async def test_abandoned_stream_is_cancelled(engine: TorchEngine) -> None:
    prompt = chat(engine, "Write a long story.")
    stream = engine.stream(GenerationRequest(prompt, SamplingParams(temperature=1.0, max_tokens=200, seed=1)))
    async for _ in stream:
        break
    await stream.aclose()
    [choice] = await asyncio.wait_for(engine.generate(GenerationRequest(prompt, greedy(2))), timeout=60)
    assert len(choice.token_ids) == 2


def test_text_tracker_holds_back_stop_prefixes(model_path: Path) -> None:
    from art_adapters_backend.bundled import load_tokenizer

    tokenizer = load_tokenizer(model_path)
    tracker = TextTracker(tokenizer, ("</end>",))
    out = []
    for token in tokenizer("Hello world </en", add_special_tokens=False).input_ids:
        tracker.add(token)
        out.append(tracker.delta(final=False))
    assert "".join(out) == "Hello world "  # " </en" might start the stop string
    for token in tokenizer("d> more", add_special_tokens=False).input_ids:
        tracker.add(token)
    assert tracker.stopped and tracker.text == "Hello world "
    out.append(tracker.delta(final=True))
    assert "".join(out) == tracker.text


@pytest.mark.slow
async def test_arrivals_merge_into_a_running_batch_exactly(engine: TorchEngine) -> None:
    """A request arriving mid-decode joins the running batch; both keep exact logprobs."""
    long_prompt = chat(engine, "Describe a walk in the forest, step by step, in detail.", system="Be vivid.")
    short_prompt = chat(engine, "Hi")
    first_params = SamplingParams(temperature=1.0, max_tokens=24, seed=8)
    first_tokens: list[int] = []
    first_logprobs: list[float] = []
    late: asyncio.Task[list] | None = None
    late_done_first = False
    async for delta in engine.stream(GenerationRequest(long_prompt, first_params)):
        first_tokens += delta.token_ids
        first_logprobs += delta.logprobs
        if late is None and len(first_tokens) >= 4:
            late_params = SamplingParams(temperature=1.0, max_tokens=6, seed=2)
            late = asyncio.create_task(engine.generate(GenerationRequest(short_prompt, late_params, n=2)))
        if delta.finish_reason is not None:
            assert delta.finish_reason == "length"
            late_done_first = late is not None and late.done()
    assert late is not None
    second = await late
    assert late_done_first, "the late request should have run alongside the first, not after it"
    expected = forward_logprobs(engine.model, long_prompt, first_tokens, temperature=1.0)
    assert max(abs(x - y) for x, y in zip(first_logprobs, expected, strict=True)) < 1e-4
    for choice in second:
        expected = forward_logprobs(engine.model, short_prompt, choice.token_ids, temperature=1.0)
        assert max(abs(x - y) for x, y in zip(choice.logprobs, expected, strict=True)) < 1e-4


@pytest.mark.slow
async def test_small_batch_limit_queues_choices_and_close_fails_waiters(model_path: Path) -> None:
    """n above max_batch_size is decoded in turns; closing fails what is left, clearly."""
    from art_adapters_backend.serving.engine.torch_engine import EngineClosedError

    threads = torch.get_num_threads()
    small = await asyncio.to_thread(TorchEngine.load, model_path, max_batch_size=2, num_threads=1)
    with pytest.raises(RuntimeError, match="not started"):
        await small.generate(GenerationRequest([1, 2, 3], greedy(2)))
    await small.start()
    try:
        prompt = chat(small, "Hi")
        choices = await small.generate(GenerationRequest(prompt, SamplingParams(temperature=1.0, max_tokens=3, seed=1), n=5))
        assert [c.index for c in choices] == list(range(5)) and all(c.token_ids for c in choices)
        assert small.stats.max_batch_size_seen == 2 and small.stats.sequences == 5
        long_run = asyncio.create_task(small.generate(GenerationRequest(prompt, SamplingParams(max_tokens=500, seed=2))))
        await asyncio.sleep(0.3)
    finally:
        await small.close()
        torch.set_num_threads(threads)
    with pytest.raises(EngineClosedError):
        await long_run
    with pytest.raises(EngineClosedError):
        await small.generate(GenerationRequest(prompt, greedy(2)))


def test_sampling_follows_the_distribution_top_p_and_mask() -> None:
    from art_adapters_backend.serving.engine.sampling import sample_next

    logits = torch.log(torch.tensor([0.5, 0.3, 0.2, 0.0]))
    generator = torch.Generator().manual_seed(0)

    def draw(top_p: float, allowed: torch.Tensor | None = None) -> torch.Tensor:
        params = SamplingParams(temperature=1.0, top_p=top_p)
        picks = [sample_next(logits, params, generator=generator, allowed=allowed).token_id for _ in range(4000)]
        return torch.bincount(torch.tensor(picks), minlength=4).float() / len(picks)

    freq = draw(top_p=1.0)
    assert torch.allclose(freq, torch.tensor([0.5, 0.3, 0.2, 0.0]), atol=0.03) and freq[3] == 0
    freq = draw(top_p=0.6)  # the nucleus is {0, 1}: mass before token 2 is 0.8 >= 0.6
    assert torch.allclose(freq, torch.tensor([0.625, 0.375, 0.0, 0.0]), atol=0.03)
    freq = draw(top_p=1.0, allowed=torch.tensor([False, True, True, True]))
    assert torch.allclose(freq, torch.tensor([0.0, 0.6, 0.4, 0.0]), atol=0.03)
    # The reported logprob ignores top-p and the mask; a forced token uses no randomness.
    forced = sample_next(logits, SamplingParams(top_p=0.6, top_logprobs=2), generator=None, forced=2)
    assert forced.token_id == 2 and forced.logprob == pytest.approx(torch.log(torch.tensor(0.2)).item())
    assert [t for t, _ in forced.top_logprobs or []] == [0, 1]


@pytest.mark.slow
async def test_a_short_request_is_admitted_before_longer_ones_that_wait(model_path: Path) -> None:
    """With the only batch slot busy, a shorter request queued after a long one runs first;
    a request that has waited MAX_WAIT_S goes before shorter ones (no starvation). A one-token
    request takes no slot at all (its prefill gives its token): it finishes first, preempting
    nobody."""
    from art_adapters_backend.serving.engine import torch_engine

    threads = torch.get_num_threads()
    one = await asyncio.to_thread(TorchEngine.load, model_path, max_batch_size=1, num_threads=1)
    await one.start()
    finished: list[str] = []

    async def run(name: str, max_tokens: int) -> None:
        ids = chat(one, "Tell me a story.")
        params = SamplingParams(temperature=0.0, max_tokens=max_tokens, stop=())
        await one.generate(GenerationRequest(ids, params))
        finished.append(name)

    async def race(short_tokens: int) -> None:
        busy = asyncio.create_task(run("busy", 24))
        await asyncio.sleep(0.2)  # the slot is taken
        long_wait = asyncio.create_task(run("long", 24))
        await asyncio.sleep(0.05)
        # 12 tokens: not far shorter than what the busy row has left (24 at most), so no preemption
        short = asyncio.create_task(run("short", short_tokens))
        await asyncio.gather(busy, long_wait, short)

    try:
        await race(12)
        assert finished == ["busy", "short", "long"]

        finished.clear()
        saved, torch_engine.MAX_WAIT_S = torch_engine.MAX_WAIT_S, 0.0  # every waiting row counts as aged
        try:
            await race(12)
        finally:
            torch_engine.MAX_WAIT_S = saved
        assert finished == ["busy", "long", "short"]  # aged rows keep their arrival order

        finished.clear()
        await race(1)
        assert finished == ["short", "busy", "long"]
        assert one.stats.preemptions == 0
    finally:
        await one.close()
        torch.set_num_threads(threads)


@pytest.mark.slow
async def test_exclusive_work_runs_on_the_decode_thread_outside_inference_mode(engine: TorchEngine) -> None:
    # A training step or an adapter load run there: OpenMP keeps one team of worker threads per OS
    # thread that ran parallel torch code, and with more of them than CPUs every team stops
    # spin-waiting (decoding was 25-34% slower after a step trained in another thread).
    def where() -> tuple[str, bool, bool]:
        trainable = torch.ones(2, requires_grad=True)
        (trainable * 2).sum().backward()  # autograd works: not inference mode
        return threading.current_thread().name, torch.is_inference_mode_enabled(), trainable.grad is not None

    assert await engine.run_exclusive(where) == ("torch-engine", False, True)

    def fails() -> None:
        raise RuntimeError("a step that failed")

    with pytest.raises(RuntimeError, match="a step that failed"):
        await engine.run_exclusive(fails)
    # interleaved with decoding, while paused (as training holds it), the engine goes on decoding after
    prompt = chat(engine, "Say hello.")
    decoding = asyncio.ensure_future(engine.generate(GenerationRequest(prompt_token_ids=prompt, params=greedy(8))))
    async with engine.paused():
        assert (await engine.run_exclusive(where))[0] == "torch-engine"
    [choice] = await decoding
    assert len(choice.token_ids) > 0


@pytest.mark.slow
async def test_exclusive_work_on_a_closed_engine_is_refused(model_path: Path) -> None:
    load = partial(TorchEngine.load, model_path, max_batch_size=2, num_threads=1)
    async with started_engines(load) as (engine,):
        pass
    with pytest.raises(EngineClosedError):
        await engine.run_exclusive(lambda: None)
