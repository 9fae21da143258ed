"""vLLM's sampling parameters: the maths of one step, then over HTTP on the real bundled model."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import torch
from art_adapters_backend.serving.engine.base import SamplingParams
from art_adapters_backend.serving.engine.sampling import LogitAdjuster, sample_next
from art_adapters_backend.serving.engine.text import TextTracker

from art_adapters import LocalBackend

MODEL = "smollm2-135m-instruct"
EOS = 5  # the stop id of the small unit-test vocabulary
GREEDY = SamplingParams(temperature=0.0)


def _adjuster(prompt: list[int], generated: list[int], **params: Any) -> LogitAdjuster:
    adjuster = LogitAdjuster.for_params(SamplingParams(**params), prompt, [EOS])
    assert adjuster is not None
    for token in generated:
        adjuster.accept(token)
    return adjuster


def _reported(logits: torch.Tensor, temperature: float, adjuster: LogitAdjuster | None) -> torch.Tensor:
    """The full reported distribution of one step, read back through ``top_logprobs``."""
    params = SamplingParams(temperature=temperature, top_logprobs=logits.numel())
    sampled = sample_next(logits, params, generator=None, adjuster=adjuster)
    out = torch.empty(logits.numel())
    for token, logprob in sampled.top_logprobs or []:
        out[token] = logprob
    return out


# ---- one step, exactly ----------------------------------------------------------------------


def test_defaults_adjust_nothing_and_cost_nothing() -> None:
    assert not SamplingParams().adjusts_logits
    assert LogitAdjuster.for_params(SamplingParams(), [1, 2], [EOS]) is None
    assert SamplingParams(top_k=5, min_p=0.1).adjusts_logits is False  # truncations only


def test_penalties_follow_vllm_formulas() -> None:
    logits = torch.tensor([2.0, -1.0, 0.5, -0.5, 1.0, 0.0])
    prompt, generated = [0, 3], [1, 1, 2]
    adjuster = _adjuster(
        prompt, generated, repetition_penalty=1.5, frequency_penalty=0.4, presence_penalty=0.3, temperature=0.7
    )
    counts = torch.tensor([0.0, 2.0, 1.0, 0.0, 0.0, 0.0])
    seen = torch.tensor([True, True, True, True, False, False])  # prompt or generated
    z = torch.where(seen, torch.where(logits > 0, logits / 1.5, logits * 1.5), logits)
    z = z - 0.4 * counts - 0.3 * (counts > 0).float()
    expected = torch.log_softmax(z / 0.7, dim=-1)
    assert torch.allclose(_reported(logits, 0.7, adjuster), expected, atol=1e-6)
    # Frequency and presence count generated tokens only; the prompt's token 3 is untouched by them.
    only_freq = _adjuster(prompt, generated, frequency_penalty=1.0)
    z = logits - counts
    assert torch.allclose(_reported(logits, 1.0, only_freq), torch.log_softmax(z, -1), atol=1e-6)


def test_adjuster_state_follows_accepted_tokens() -> None:
    logits = torch.zeros(6)
    adjuster = _adjuster([], [], presence_penalty=1.0)
    before = _reported(logits, 1.0, adjuster)
    adjuster.accept(4)
    after = _reported(logits, 1.0, adjuster)
    assert after[4] < before[4] and torch.allclose(after[:4], after[0].expand(4))


def test_logit_bias_forces_and_blocks() -> None:
    logits = torch.tensor([3.0, 2.0, 1.0, 0.0, -1.0, -2.0])
    force = _adjuster([], [], logit_bias=((4, 100.0),))
    assert sample_next(logits, GREEDY, generator=None, adjuster=force).token_id == 4
    block = _adjuster([], [], logit_bias=((0, -100.0), (1, -100.0)))
    picked = sample_next(logits, GREEDY, generator=None, adjuster=block)
    assert picked.token_id == 2
    expected = torch.log_softmax(logits + torch.tensor([-100.0, -100.0, 0, 0, 0, 0]), -1)[2]
    assert picked.logprob == pytest.approx(expected.item())


def test_min_tokens_blocks_eos_until_reached_unless_a_constraint_needs_it() -> None:
    logits = torch.tensor([0.0, 1.0, 0.0, 0.0, 0.0, 5.0])  # EOS (5) is the argmax
    adjuster = _adjuster([], [], min_tokens=2)
    picks = []
    for _ in range(3):
        sampled = sample_next(logits, GREEDY, generator=None, adjuster=adjuster)
        adjuster.accept(sampled.token_id)
        picks.append(sampled.token_id)
    assert picks == [1, 1, EOS]
    # A constraint that only allows ending wins over min_tokens (forced or as the only allowed id).
    early = _adjuster([], [], min_tokens=5)
    only_eos = torch.tensor([False, False, False, False, False, True])
    assert sample_next(logits, GREEDY, generator=None, allowed=only_eos, adjuster=early).token_id == EOS
    assert sample_next(logits, GREEDY, generator=None, forced=EOS, adjuster=early).logprob > -1.0
    some = torch.tensor([False, False, True, False, False, True])
    assert sample_next(logits, GREEDY, generator=None, allowed=some, adjuster=early).token_id == 2


def test_top_k_and_min_p_truncate_sampling_not_the_reported_distribution() -> None:
    probs = torch.tensor([0.4, 0.3, 0.2, 0.1])
    logits = torch.log(probs)
    generator = torch.Generator().manual_seed(0)

    def draw(top_p: float = 1.0, **kwargs: Any) -> torch.Tensor:
        params = SamplingParams(temperature=1.0, top_p=top_p, **kwargs)
        picks = [sample_next(logits, params, generator=generator).token_id for _ in range(4000)]
        return torch.bincount(torch.tensor(picks), minlength=4).float() / len(picks)

    assert torch.allclose(draw(top_k=2), torch.tensor([4 / 7, 3 / 7, 0, 0]), atol=0.03)
    assert torch.allclose(draw(top_k=4), probs, atol=0.03)  # k = V: off
    assert torch.allclose(draw(min_p=0.45), torch.tensor([4 / 9, 3 / 9, 2 / 9, 0]), atol=0.03)  # p >= 0.18
    # top_k then top_p on the renormalised top-k (vLLM's joint order): {0, 1, 2} -> mass before 2 is 7/9.
    assert torch.allclose(draw(top_k=3, top_p=0.7), torch.tensor([4 / 7, 3 / 7, 0, 0]), atol=0.03)
    one = sample_next(logits, SamplingParams(top_k=1), generator=generator)
    assert one.token_id == 0 and one.logprob == pytest.approx(torch.log(probs[0]).item())


def test_stop_strings_wait_for_min_tokens(model_path_tokenizer: Any) -> None:
    tokenizer = model_path_tokenizer
    ids = tokenizer("a b a b a b", add_special_tokens=False).input_ids
    plain = TextTracker(tokenizer, ("b",))
    for token in ids:
        if not plain.stopped:
            plain.add(token)
    assert plain.stopped and plain.text == "a "
    late = TextTracker(tokenizer, ("b",), min_tokens=3)
    for token in ids:
        if not late.stopped:
            late.add(token)
    # The first 3 tokens' text ("a b a") is not searched; the next " b" ends it.
    assert late.stopped and late.text == tokenizer.decode(ids[:3]) + " "


@pytest.fixture(scope="module")
def model_path_tokenizer() -> Any:
    from art_adapters_backend.bundled import load_tokenizer, resolve_model_path

    return load_tokenizer(resolve_model_path(MODEL))


# ---- over HTTP, on the bundled model ----------------------------------------------------------

LOOP = [{"role": "user", "content": "Repeat after me: the the the the the"}]  # greedy repeats " the"
SHORT = [{"role": "user", "content": "Say yes or no."}]  # greedy answers "Yes." and stops


@pytest.fixture(scope="module")
async def http(local_backend: LocalBackend) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=local_backend.base_url, timeout=120) as client:
        yield client


async def _chat(http: httpx.AsyncClient, messages: list[dict[str, Any]], **body: Any) -> dict[str, Any]:
    """One chat completion and its exact-token record."""
    response = await http.post("/v1/chat/completions", json={"model": MODEL, "messages": messages, **body})
    assert response.status_code == 200, response.text
    record = await http.get(f"/art/completions/{response.json()['id']}")
    assert record.status_code == 200
    return {"response": response.json(), "record": record.json()}


@pytest.mark.slow
async def test_logit_bias_makes_the_greedy_completion_that_token(
    http: httpx.AsyncClient, model_path_tokenizer: Any
) -> None:
    [banana] = model_path_tokenizer(" banana", add_special_tokens=False).input_ids
    out = await _chat(http, SHORT, temperature=0, max_tokens=3, logit_bias={str(banana): 100})
    assert out["record"]["choices"][0]["completion_token_ids"] == [banana] * 3
    assert out["record"]["logit_bias"] == {str(banana): 100.0}
    # Clamped to 100 as vLLM does; -100 keeps the greedy answer's first token out.
    first = (await _chat(http, SHORT, temperature=0, max_tokens=1))["record"]["choices"][0]["completion_token_ids"]
    out = await _chat(http, SHORT, temperature=0, max_tokens=1, logit_bias={str(first[0]): -500})
    assert out["record"]["choices"][0]["completion_token_ids"] != first
    assert out["record"]["logit_bias"] == {str(first[0]): -100.0}


@pytest.mark.slow
async def test_min_tokens_prevents_an_early_stop(http: httpx.AsyncClient, model_path_tokenizer: Any) -> None:
    eos = model_path_tokenizer.convert_tokens_to_ids("<|im_end|>")
    plain = (await _chat(http, SHORT, temperature=0, max_tokens=16))["record"]["choices"][0]
    assert plain["finish_reason"] == "stop" and len(plain["completion_token_ids"]) < 8
    out = await _chat(http, SHORT, temperature=0, max_tokens=16, min_tokens=8)
    ids = out["record"]["choices"][0]["completion_token_ids"]
    assert eos not in ids[:8] and len(ids) >= 8
    assert out["response"]["usage"]["completion_tokens"] >= 8 and out["record"]["min_tokens"] == 8


@pytest.mark.slow
async def test_frequency_penalty_breaks_a_greedy_repetition_loop(http: httpx.AsyncClient) -> None:
    loop = await _chat(http, LOOP, temperature=0, max_tokens=40)
    assert loop["response"]["choices"][0]["finish_reason"] == "length"
    assert loop["response"]["choices"][0]["message"]["content"].lower().count("the") > 30
    out = await _chat(http, LOOP, temperature=0, max_tokens=40, frequency_penalty=1.0)
    assert out["response"]["choices"][0]["finish_reason"] == "stop"
    assert out["response"]["usage"]["completion_tokens"] < 20


@pytest.mark.slow
async def test_recorded_logprobs_are_of_the_adjusted_distribution(
    http: httpx.AsyncClient, model_path_tokenizer: Any
) -> None:
    from art_adapters_backend.bundled import resolve_model_path
    from transformers import AutoModelForCausalLM

    settings = {"frequency_penalty": 0.8, "presence_penalty": 0.5, "repetition_penalty": 1.3, "temperature": 0.7}
    [bias_id] = model_path_tokenizer(" the", add_special_tokens=False).input_ids
    out = await _chat(http, LOOP, max_tokens=12, seed=3, logit_bias={str(bias_id): 2.0}, top_k=50, **settings)
    record = out["record"]
    assert (record["frequency_penalty"], record["repetition_penalty"], record["top_k"]) == (0.8, 1.3, 50)
    prompt, choice = record["prompt_token_ids"], record["choices"][0]
    completion = choice["completion_token_ids"]
    model = AutoModelForCausalLM.from_pretrained(str(resolve_model_path(MODEL)), dtype=torch.float32)
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([prompt + completion])).logits[0, len(prompt) - 1 : -1].float()
    expected, plain = [], []
    for t, token in enumerate(completion):
        z = logits[t].clone()
        plain.append(torch.log_softmax(z / 0.7, -1)[token].item())
        z[bias_id] += 2.0
        counts = torch.bincount(torch.tensor(completion[:t], dtype=torch.long), minlength=z.numel()).float()
        seen = counts > 0
        seen[torch.tensor(prompt)] = True
        z = torch.where(seen, torch.where(z > 0, z / 1.3, z * 1.3), z)
        z = z - 0.8 * counts - 0.5 * (counts > 0).float()
        expected.append(torch.log_softmax(z / 0.7, -1)[token].item())  # before top_k, as documented
    assert choice["logprobs"] == pytest.approx(expected, abs=2e-3)
    assert max(abs(a - b) for a, b in zip(choice["logprobs"], plain, strict=True)) > 0.1  # not the raw model's


@pytest.mark.slow
@pytest.mark.parametrize(
    ("body", "param", "fragment"),
    [
        ({"reasoning_effort": "low"}, "reasoning_effort", "unsupported field"),
        ({"best_of": 2}, "best_of", "unsupported field"),
        ({"presence_penalty": 2.5}, "presence_penalty", "less than or equal to 2"),
        ({"frequency_penalty": -3}, "frequency_penalty", "greater than or equal to -2"),
        ({"repetition_penalty": 0}, "repetition_penalty", "greater than 0"),
        ({"top_k": -2}, "top_k", "greater than or equal to -1"),
        ({"min_p": 1.5}, "min_p", "less than or equal to 1"),
        ({"min_tokens": -1}, "min_tokens", "greater than or equal to 0"),
        ({"min_tokens": 5, "max_tokens": 2}, "min_tokens", "min_tokens must be at most max_tokens"),
        ({"logit_bias": {"abc": 1}}, "logit_bias", "decimal strings"),
        ({"logit_bias": {"49152": 1}}, "logit_bias", "49152 outside the vocabulary"),
    ],
)
async def test_bad_sampling_fields_are_400_naming_the_field(
    http: httpx.AsyncClient, body: dict[str, Any], param: str, fragment: str
) -> None:
    response = await http.post(
        "/v1/chat/completions", json={"model": MODEL, "messages": SHORT, "max_tokens": 2, **body}
    )
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param and fragment in error["message"] and param in error["message"]


@pytest.mark.slow
async def test_harmless_fields_are_accepted_and_top_k_minus_one_is_off(http: httpx.AsyncClient) -> None:
    out = await _chat(
        http, SHORT, temperature=0, max_tokens=2, user="u1", metadata={"k": "v"}, store=False,
        service_tier="auto", top_k=-1, min_p=0.0,
    )  # fmt: skip
    assert out["record"]["top_k"] == 0


@pytest.mark.slow
async def test_chat_openai_with_sampling_settings(local_backend: LocalBackend) -> None:
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(
        model=MODEL, base_url=local_backend.openai_base_url, api_key="unused", max_retries=0, temperature=0,
        max_tokens=6, frequency_penalty=0.5, presence_penalty=0.2, seed=1, stream_usage=True,
    )  # fmt: skip
    whole = await llm.ainvoke("Say hello.")
    assert isinstance(whole.content, str) and whole.content
    chunks = [chunk async for chunk in llm.astream("Say hello.")]
    assert "".join(str(c.content) for c in chunks) == whole.content
    extra = llm.bind(extra_body={"top_k": 5, "repetition_penalty": 1.1})
    assert (await extra.ainvoke("Say hello.")).content
