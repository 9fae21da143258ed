"""vLLM's sampling parameters: the maths of one step, then over HTTP on the real bundled model."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from art_adapters_backend.engine.base import SamplingParams
from art_adapters_backend.engine.sampling import LogitAdjuster, sample_next
from art_adapters_backend.engine.text import TextTracker

MODEL = "smollm2-135m-instruct"
EOS = 5  # the stop id of the small unit-test vocabulary


def _adjuster(prompt: list[int], generated: list[int], **params: Any) -> LogitAdjuster:
    adjuster = LogitAdjuster.for_params(SamplingParams(**params), prompt, [EOS])
    assert adjuster is not None
    for token in generated:
        adjuster.accept(token)
    return adjuster


def _reported(logits: torch.Tensor, temperature: float, adjuster: LogitAdjuster | None) -> torch.Tensor:
    """The full reported distribution of one step, read back through ``top_logprobs``."""
    sampled = sample_next(
        logits, temperature=temperature, top_p=1.0, top_logprobs=logits.numel(), generator=None, adjuster=adjuster
    )
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
    assert sample_next(logits, temperature=0.0, top_p=1.0, top_logprobs=0, generator=None, adjuster=force).token_id == 4
    block = _adjuster([], [], logit_bias=((0, -100.0), (1, -100.0)))
    picked = sample_next(logits, temperature=0.0, top_p=1.0, top_logprobs=0, generator=None, adjuster=block)
    assert picked.token_id == 2
    expected = torch.log_softmax(logits + torch.tensor([-100.0, -100.0, 0, 0, 0, 0]), -1)[2]
    assert picked.logprob == pytest.approx(expected.item())


def test_min_tokens_blocks_eos_until_reached_unless_a_constraint_needs_it() -> None:
    logits = torch.tensor([0.0, 1.0, 0.0, 0.0, 0.0, 5.0])  # EOS (5) is the argmax
    adjuster = _adjuster([], [], min_tokens=2)
    picks = []
    for _ in range(3):
        sampled = sample_next(logits, temperature=0.0, top_p=1.0, top_logprobs=0, generator=None, adjuster=adjuster)
        adjuster.accept(sampled.token_id)
        picks.append(sampled.token_id)
    assert picks == [1, 1, EOS]
    # A constraint that only allows ending wins over min_tokens (forced or as the only allowed id).
    early = _adjuster([], [], min_tokens=5)
    only_eos = torch.tensor([False, False, False, False, False, True])
    kwargs: dict[str, Any] = {"temperature": 0.0, "top_p": 1.0, "top_logprobs": 0, "generator": None}
    assert sample_next(logits, allowed=only_eos, adjuster=early, **kwargs).token_id == EOS
    assert sample_next(logits, forced=EOS, adjuster=early, **kwargs).logprob > -1.0
    some = torch.tensor([False, False, True, False, False, True])
    assert sample_next(logits, allowed=some, adjuster=early, **kwargs).token_id == 2


def test_top_k_and_min_p_truncate_sampling_not_the_reported_distribution() -> None:
    probs = torch.tensor([0.4, 0.3, 0.2, 0.1])
    logits = torch.log(probs)
    generator = torch.Generator().manual_seed(0)

    def draw(top_p: float = 1.0, **kwargs: Any) -> torch.Tensor:
        picks = [
            sample_next(logits, temperature=1.0, top_p=top_p, top_logprobs=0, generator=generator, **kwargs).token_id
            for _ in range(4000)
        ]
        return torch.bincount(torch.tensor(picks), minlength=4).float() / len(picks)

    assert torch.allclose(draw(top_k=2), torch.tensor([4 / 7, 3 / 7, 0, 0]), atol=0.03)
    assert torch.allclose(draw(top_k=4), probs, atol=0.03)  # k = V: off
    assert torch.allclose(draw(min_p=0.45), torch.tensor([4 / 9, 3 / 9, 2 / 9, 0]), atol=0.03)  # p >= 0.18
    # top_k then top_p on the renormalised top-k (vLLM's joint order): {0, 1, 2} -> mass before 2 is 7/9.
    assert torch.allclose(draw(top_k=3, top_p=0.7), torch.tensor([4 / 7, 3 / 7, 0, 0]), atol=0.03)
    one = sample_next(logits, temperature=1.0, top_p=1.0, top_logprobs=0, generator=generator, top_k=1)
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
