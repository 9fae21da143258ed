"""Choosing the next token of one sequence from its logits.

Pure functions over one row of logits (plus :class:`LogitAdjuster`, one choice's penalty
state), so the decode loop stays short and the maths is testable on its own; :func:`sample_next`
follows vLLM V1's sampler.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from .base import SamplingParams

__all__ = ["LogitAdjuster", "SampledToken", "sample_next", "sample_plain", "validate_adjustments"]


class LogitAdjuster:
    """One choice's request-time logit adjustments (bias, ``min_tokens``, penalties) and their state.

    The decode loop calls :meth:`accept` with every token the choice generates; the counts it
    keeps are the choice's own (``n`` choices of one request are penalised independently).
    """

    def __init__(
        self, params: SamplingParams, prompt_token_ids: Sequence[int], stop_token_ids: Iterable[int]
    ) -> None:
        """Prepare the adjustments ``params`` asks for; ``stop_token_ids`` are the EOS ids."""
        self._params = params
        self._prompt = list(prompt_token_ids)
        self._stop_ids = torch.tensor(sorted(set(stop_token_ids)), dtype=torch.long)
        self._bias_ids = torch.tensor([t for t, _ in params.logit_bias], dtype=torch.long)
        self._bias_values = torch.tensor([b for _, b in params.logit_bias], dtype=torch.float32)
        self._counts: torch.Tensor | None = None  # [V] float32, generated tokens
        self._seen: torch.Tensor | None = None  # [V] bool, prompt or generated tokens
        self._pending: list[int] = []  # generated before the vocabulary size was known
        self.generated = 0
        """Tokens generated so far in this choice."""

    @classmethod
    def for_params(
        cls, params: SamplingParams, prompt_token_ids: Sequence[int], stop_token_ids: Iterable[int]
    ) -> LogitAdjuster | None:
        """An adjuster when ``params`` adjusts the logits, else ``None`` (the free fast path)."""
        return cls(params, prompt_token_ids, stop_token_ids) if params.adjusts_logits else None

    @property
    def blocks_stop(self) -> bool:
        """Whether ``min_tokens`` still forbids the stop ids."""
        return self.generated < self._params.min_tokens

    @property
    def stop_ids(self) -> torch.Tensor:
        """The stop (EOS) ids ``min_tokens`` masks, [S] long."""
        return self._stop_ids

    def accept(self, token_id: int) -> None:
        """Count one generated token."""
        self.generated += 1
        if self._counts is not None:
            self._counts[token_id] += 1
        if self._seen is not None:
            self._seen[token_id] = True
        if self._counts is None and self._seen is None:
            self._pending.append(token_id)

    def _state(self, vocab: int) -> None:
        """Allocate the count and seen vectors (once the vocabulary size is known)."""
        params = self._params
        if (params.presence_penalty or params.frequency_penalty) and self._counts is None:
            self._counts = torch.zeros(vocab, dtype=torch.float32)
            if self._pending:
                ids = torch.tensor(self._pending, dtype=torch.long)
                self._counts.index_add_(0, ids, torch.ones(len(self._pending)))
        if params.repetition_penalty != 1.0 and self._seen is None:
            self._seen = torch.zeros(vocab, dtype=torch.bool)
            self._seen[torch.tensor(self._prompt + self._pending, dtype=torch.long)] = True
        self._pending = []

    def apply(self, logits: torch.Tensor, *, block_stop: bool) -> torch.Tensor:
        """The adjusted logits (a new tensor).  logits: [V] float32 -> [V] float32.

        ``z = logits + bias``; ``z[stop] = -inf`` when ``block_stop``; then
        ``z = where(seen, where(z > 0, z / rp, z * rp), z) - fp * count - pp * (count > 0)``.
        """
        params = self._params
        z = logits.clone()
        if self._bias_ids.numel():
            z.index_add_(0, self._bias_ids, self._bias_values)
        if block_stop and self._stop_ids.numel():
            z.index_fill_(0, self._stop_ids, float("-inf"))
        if params.presence_penalty or params.frequency_penalty or params.repetition_penalty != 1.0:
            self._state(z.numel())
            if self._seen is not None:
                rp = params.repetition_penalty
                z = torch.where(self._seen, torch.where(z > 0, z / rp, z * rp), z)
            if self._counts is not None:
                if params.frequency_penalty:
                    z = z - params.frequency_penalty * self._counts
                if params.presence_penalty:
                    z = z - params.presence_penalty * (self._counts > 0).float()
        return z


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


def _top_k_filter(logits: torch.Tensor, top_k: int) -> torch.Tensor:
    """Set to ``-inf`` every logit below the ``top_k``-th largest (ties kept, as vLLM).  [V] -> [V]."""
    kth = torch.topk(logits, top_k).values[-1]
    return logits.masked_fill(logits < kth, float("-inf"))


def _min_p_filter(logits: torch.Tensor, min_p: float) -> torch.Tensor:
    """Set to ``-inf`` every logit whose probability is below ``min_p`` times the top one.  [V] -> [V]."""
    probs = torch.softmax(logits, dim=-1)
    return logits.masked_fill(probs < min_p * probs.max(), float("-inf"))


def sample_next(
    logits: torch.Tensor,
    params: SamplingParams,
    *,
    generator: torch.Generator | None,
    allowed: torch.Tensor | None = None,
    forced: int | None = None,
    adjuster: LogitAdjuster | None = None,
) -> SampledToken:
    """Pick the next token from one row of logits.

    The steps follow vLLM V1's sampler (see :class:`~.base.SamplingParams`):

    1. *adjust* (only when a request asks for it): ``logit_bias`` added; the stop ids masked while
       fewer than ``min_tokens`` tokens were generated; then ``repetition_penalty`` (positive logits
       of tokens seen in the prompt or output divided by it, negative ones multiplied),
       ``frequency_penalty * count`` and ``presence_penalty * (count > 0)`` subtracted, ``count``
       being how often each token was generated so far;
    2. divide by the temperature ``T`` (``T = 1`` when greedy);
    3. the *reported* distribution is ``log_softmax`` of that, the sampled token's log-probability
       and the ``top_logprobs`` come from it. It equals vLLM's ``processed_logprobs`` except that
       it is taken before the truncations and the constraint mask below (vLLM's come after them),
       so with no adjustment a plain forward pass divided by ``T`` reproduces it;
    4. the *sampling* distribution additionally applies the constraint mask (disallowed tokens get
       ``-inf``), ``min_p`` (tokens below ``min_p`` times the top probability), ``top_k`` and
       ``top_p`` (the smallest set of most likely tokens whose mass reaches ``top_p``), each on the
       renormalised result of the one before, then samples;
    5. greedy (``T == 0``) takes the argmax of the masked adjusted logits.

    With every option at its default, step 1 and the truncations cost nothing.

    Args:
        logits: [V] float32 raw logits for the next position.
        params: the request's sampling settings; this reads ``temperature`` (0 = greedy),
            ``top_p``, ``top_k``, ``min_p`` and ``top_logprobs`` (the adjustments are ``adjuster``'s).
        generator: the sequence's own random generator (for reproducible seeds).
        allowed: optional [V] bool mask of tokens a constraint allows.
        forced: a token a constraint imposes (reported like a sampled one, no randomness used).
        adjuster: the choice's bias/``min_tokens``/penalty state, or ``None`` (none asked for).
            The caller reports the chosen token to it with :meth:`LogitAdjuster.accept`.

    Returns:
        The token, its log-probability under the reported distribution, and the
        ``top_logprobs`` most likely alternatives under that same distribution.
    """
    z = logits.float()
    if adjuster is not None:
        z = adjuster.apply(
            z, block_stop=adjuster.blocks_stop and not _constraint_must_stop(adjuster, allowed, forced)
        )
    temperature = params.temperature
    scaled = z if temperature == 0 else z / temperature
    log_probs = torch.log_softmax(scaled, dim=-1)  # [V], the reported distribution
    masked = scaled if allowed is None else scaled.masked_fill(~allowed, float("-inf"))
    if forced is not None:
        token = forced
    elif temperature == 0:
        token = int(torch.argmax(masked).item())
    else:
        if params.min_p > 0.0:
            masked = _min_p_filter(masked, params.min_p)
        if 0 < params.top_k < masked.numel():
            masked = _top_k_filter(masked, params.top_k)
        if params.top_p < 1.0:
            masked = _top_p_filter(masked, params.top_p)
        # Inverse-CDF sampling: one uniform draw (torch.multinomial costs ~2 ms a row here).
        # right=True never lands on a zero-probability token.
        cdf = torch.cumsum(torch.softmax(masked, dim=-1), dim=-1)
        u = torch.rand((), generator=generator) * cdf[-1]
        token = int(torch.searchsorted(cdf, u.reshape(1), right=True).clamp(max=cdf.numel() - 1).item())
    top: list[tuple[int, float]] | None = None
    if params.top_logprobs > 0:
        values, indices = torch.topk(log_probs, params.top_logprobs)
        top = [(int(i), float(v)) for i, v in zip(indices.tolist(), values.tolist(), strict=True)]
    return SampledToken(token_id=token, logprob=float(log_probs[token].item()), top_logprobs=top)


def sample_plain(
    logits: torch.Tensor,
    *,
    temperatures: Sequence[float],
    generators: Sequence[torch.Generator | None],
    top_logprobs: Sequence[int],
) -> list[SampledToken]:
    """:func:`sample_next` for rows that ask for nothing but a temperature, all rows at once.

    Same maths and the same random draws as :func:`sample_next` row by row (one uniform per
    sampled row from its own generator, inverse-CDF), with the softmax, cumulative sums and
    searches done over the batch.  logits: [B, V] float32; ``temperatures[i] == 0`` is greedy.
    """
    z = logits.float()
    temps = torch.tensor([t if t > 0 else 1.0 for t in temperatures], dtype=z.dtype).unsqueeze(1)
    scaled = z / temps  # [B, V]
    log_probs = torch.log_softmax(scaled, dim=-1)
    sampled_rows = [i for i, t in enumerate(temperatures) if t > 0]
    tokens = torch.argmax(scaled, dim=-1)  # greedy rows keep this
    if sampled_rows:
        index = torch.tensor(sampled_rows)
        cdf = torch.cumsum(torch.softmax(scaled.index_select(0, index), dim=-1), dim=-1)  # [S, V]
        u = torch.stack([torch.rand((), generator=generators[i]) for i in sampled_rows]) * cdf[:, -1]
        drawn = torch.searchsorted(cdf, u.unsqueeze(1), right=True).clamp(max=cdf.shape[1] - 1).squeeze(1)
        tokens = tokens.index_copy(0, index, drawn)
    chosen = log_probs.gather(1, tokens.unsqueeze(1)).squeeze(1).tolist()
    k = max(top_logprobs, default=0)
    tops: list[list[tuple[int, float]]] | None = None
    if k > 0:
        values, indices = torch.topk(log_probs, k, dim=-1)
        tops = [list(zip(i[:n], v[:n], strict=True)) for i, v, n in zip(
            indices.tolist(), values.tolist(), top_logprobs, strict=True)]  # fmt: skip
    return [
        SampledToken(token_id=int(t), logprob=float(lp), top_logprobs=tops[i] if tops and top_logprobs[i] > 0 else None)
        for i, (t, lp) in enumerate(zip(tokens.tolist(), chosen, strict=True))
    ]


def _constraint_must_stop(adjuster: LogitAdjuster, allowed: torch.Tensor | None, forced: int | None) -> bool:
    """Whether the constraint leaves only a stop token (it then wins over ``min_tokens``)."""
    stop = adjuster.stop_ids
    if forced is not None:
        return bool((stop == forced).any())
    if allowed is None:
        return False
    return not bool(allowed.index_fill(0, stop, False).any())


def validate_adjustments(params: SamplingParams, vocab_size: int) -> None:
    """Check the vLLM sampling options beyond temperature and top-p (vLLM's ranges); ``ValueError`` if not."""
    if params.top_k < 0:
        raise ValueError(f"top_k must be 0 (disabled) or at least 1, got {params.top_k}")
    if not 0 <= params.min_p <= 1:
        raise ValueError(f"min_p must be in [0, 1], got {params.min_p}")
    for name in ("presence_penalty", "frequency_penalty"):
        value = getattr(params, name)
        if not -2 <= value <= 2:
            raise ValueError(f"{name} must be in [-2, 2], got {value}")
    if not (math.isfinite(params.repetition_penalty) and params.repetition_penalty > 0):
        raise ValueError(f"repetition_penalty must be a finite number > 0, got {params.repetition_penalty}")
    if not 0 <= params.min_tokens <= params.max_tokens:
        raise ValueError(
            f"min_tokens must be in [0, max_tokens={params.max_tokens}], got {params.min_tokens}"
        )
    bad = [t for t, _ in params.logit_bias if not 0 <= t < vocab_size]
    if bad:
        raise ValueError(f"logit_bias names token ids outside the vocabulary [0, {vocab_size}): {bad}")
    if any(not math.isfinite(b) for _, b in params.logit_bias):
        raise ValueError("logit_bias values must be finite numbers")
