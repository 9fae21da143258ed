"""Choosing the next token of one sequence from its logits.

Pure functions over one row of logits, so the decode loop stays short and the maths is
testable on its own. Definitions (see :class:`~.base.GeneratedSequence`):

* the *reported* distribution is ``log_softmax(logits / T)`` (``T = 1`` when greedy), taken
  before top-p truncation and constraint masking, so a plain forward pass reproduces it;
* the *sampling* distribution additionally applies the constraint mask (disallowed tokens get
  ``-inf``) and top-p truncation (the smallest set of most likely tokens whose mass reaches
  ``top_p``), then renormalises;
* greedy (``T == 0``) takes the argmax of the masked logits.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["SampledToken", "sample_next"]


@dataclass(frozen=True)
class SampledToken:
    """The token chosen for one sequence at one step, with what the caller reports about it."""

    token_id: int
    logprob: float
    top_logprobs: list[tuple[int, float]] | None


def _top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Set to ``-inf`` every logit outside the top-p nucleus.  logits: [V] -> [V]."""
    sorted_logits, order = torch.sort(logits, descending=True)
    probs = torch.softmax(sorted_logits, dim=-1)
    # Mass strictly before each token; a token is kept while that mass is below top_p,
    # so the most likely token is always kept.
    mass_before = torch.cumsum(probs, dim=-1) - probs
    remove_sorted = mass_before >= top_p
    remove = torch.zeros_like(remove_sorted).scatter(0, order, remove_sorted)
    return logits.masked_fill(remove, float("-inf"))


def sample_next(
    logits: torch.Tensor,
    *,
    temperature: float,
    top_p: float,
    top_logprobs: int,
    generator: torch.Generator | None,
    allowed: torch.Tensor | None = None,
    forced: int | None = None,
) -> SampledToken:
    """Pick the next token from one row of logits.

    Args:
        logits: [V] float32 raw logits for the next position.
        temperature: 0 = greedy, else the softmax temperature.
        top_p: nucleus mass in (0, 1]; 1 disables truncation.
        top_logprobs: how many alternatives to report (0 = none).
        generator: the sequence's own random generator (for reproducible seeds).
        allowed: optional [V] bool mask of tokens a constraint allows.
        forced: a token a constraint imposes (reported like a sampled one, no randomness used).

    Returns:
        The token, its log-probability under the reported distribution, and the
        ``top_logprobs`` most likely alternatives under that same distribution.
    """
    scaled = logits.float() if temperature == 0 else logits.float() / temperature
    log_probs = torch.log_softmax(scaled, dim=-1)  # [V], the reported distribution
    masked = scaled if allowed is None else scaled.masked_fill(~allowed, float("-inf"))
    if forced is not None:
        token = forced
    elif temperature == 0:
        token = int(torch.argmax(masked).item())
    else:
        if top_p < 1.0:
            masked = _top_p_filter(masked, top_p)
        # Inverse-CDF sampling: one uniform draw (torch.multinomial costs ~2 ms a row here).
        # right=True never lands on a zero-probability token.
        cdf = torch.cumsum(torch.softmax(masked, dim=-1), dim=-1)
        u = torch.rand((), generator=generator) * cdf[-1]
        token = int(torch.searchsorted(cdf, u.reshape(1), right=True).clamp(max=cdf.numel() - 1).item())
    top: list[tuple[int, float]] | None = None
    if top_logprobs > 0:
        values, indices = torch.topk(log_probs, top_logprobs)
        top = [(int(i), float(v)) for i, v in zip(indices.tolist(), values.tolist(), strict=True)]
    return SampledToken(token_id=token, logprob=float(log_probs[token].item()), top_logprobs=top)
