"""The interface every inference engine implements (torch on CPU/CUDA, vLLM on a GPU).

The server hands an engine a :class:`GenerationRequest` and gets back one :class:`GeneratedSequence`
per choice, or a stream of :class:`SequenceDelta`, whichever engine runs (:class:`InferenceEngine`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from ...errors import BadRequestError

__all__ = [
    "Constraint",
    "ContextLengthError",
    "EngineStats",
    "GeneratedSequence",
    "GenerationRequest",
    "InferenceEngine",
    "SamplingParams",
    "SequenceDelta",
    "check_request",
]

FinishReason = Literal["stop", "length"]


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one request's choices (vLLM's sampling parameters, with its semantics).

    Every field's default means "off". One step turns the model's logits ``z`` into the next
    token in vLLM V1's order:

    1. ``logit_bias`` is added (``z[id] += bias``) and, while fewer than ``min_tokens`` tokens
       were generated, the end-of-sequence ids get ``-inf``;
    2. penalties: ``repetition_penalty`` divides the positive and multiplies the negative logits
       of every token seen in the prompt or the output; then
       ``z -= frequency_penalty * count + presence_penalty * (count > 0)`` over the tokens
       generated so far (``count``: how often each was generated in this choice);
    3. ``temperature`` divides ``z`` (greedy takes the argmax here);
    4. ``min_p``, ``top_k`` and ``top_p`` truncate the distribution, which is renormalised and
       sampled.

    The reported log-probabilities are ``log_softmax`` of step 3's logits (see
    :attr:`GeneratedSequence.logprobs`).

    Attributes:
        temperature: softmax temperature; 0 means greedy.
        top_p: nucleus sampling mass in (0, 1]; 1 disables it.
        max_tokens: the most new tokens per choice.
        seed: makes sampling reproducible for the same request and batch composition.
        stop: strings that end a choice (not included in the text).
        top_logprobs: how many alternatives to return per token (0 = none).
        top_k: keep only the ``top_k`` most likely tokens; 0 disables it.
        min_p: drop tokens less likely than ``min_p`` times the most likely one, in [0, 1];
            0 disables it.
        presence_penalty: subtracted once from the logit of every token already generated,
            in [-2, 2] (positive values favour new tokens).
        frequency_penalty: subtracted from a token's logit per time it was generated, in [-2, 2].
        repetition_penalty: CTRL/Hugging Face style factor over prompt and output tokens,
            > 0; 1 disables it, > 1 discourages repeats.
        min_tokens: the end-of-sequence tokens cannot be sampled, and stop strings do not end
            the choice, before this many tokens were generated (at most ``max_tokens``). A
            constraint that only allows ending still ends the choice.
        logit_bias: ``(token_id, bias)`` pairs, sorted by id, added to the logits; the
            server clamps each bias to [-100, 100] as vLLM does.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 256
    seed: int | None = None
    stop: tuple[str, ...] = ()
    top_logprobs: int = 0
    top_k: int = 0
    min_p: float = 0.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    min_tokens: int = 0
    logit_bias: tuple[tuple[int, float], ...] = ()

    @property
    def adjusts_logits(self) -> bool:
        """Whether bias, ``min_tokens`` or a penalty changes the logits before the temperature."""
        return bool(
            self.logit_bias
            or self.min_tokens
            or self.presence_penalty
            or self.frequency_penalty
            or self.repetition_penalty != 1.0
        )


@dataclass(frozen=True)
class Constraint:
    """Output that must be ``prefix + <JSON matching json_schema> + suffix``.

    Used for forced tool calls (prefix ``"<tool_call>\\n"``, suffix ``"\\n</tool_call>"``)
    and for ``response_format`` JSON schemas (empty prefix and suffix).
    """

    json_schema: dict[str, Any]
    prefix: str = ""
    suffix: str = ""


@dataclass
class GenerationRequest:
    """One request to an engine: ``n`` choices sampled from the same prompt."""

    prompt_token_ids: list[int]
    params: SamplingParams = field(default_factory=SamplingParams)
    n: int = 1
    adapter: str | None = None
    constraint: Constraint | None = None


@dataclass
class _ChoiceTokens:
    """Tokens of one choice with their log-probabilities and text (see :class:`GeneratedSequence`)."""

    index: int
    token_ids: list[int]
    logprobs: list[float]
    text: str
    _: KW_ONLY
    top_logprobs: list[list[tuple[int, float]]] | None = None
    eos: bool = False
    cached_tokens: int = 0

    @property
    def text_token_ids(self) -> list[int]:
        """``token_ids`` without the final EOS: the tokens behind ``text``."""
        return self.token_ids[:-1] if self.eos else self.token_ids


@dataclass
class GeneratedSequence(_ChoiceTokens):
    """One finished choice.

    Attributes:
        index: the choice's index within its request.
        token_ids: the sampled token ids (stop strings' tokens included). When the choice ended
            by sampling an end-of-sequence token (``<|im_end|>``), that token is the last id and
            ``eos`` is True: it was sampled, so training learns when to end a turn; it adds no
            text and is not shown in OpenAI ``logprobs.content``, but counts in ``usage``.
        logprobs: the log-probability of each sampled token under the distribution it was
            sampled from: ``log_softmax(z / T)`` where ``z`` is the logits after ``logit_bias``,
            the ``min_tokens`` mask and the penalties (:class:`SamplingParams` steps 1-3; ``T``
            is the temperature, 1 when greedy), as vLLM's ``--logprobs-mode processed_logprobs``
            reports it, but taken before ``min_p``/``top_k``/``top_p`` truncation and
            constraint masking (vLLM's also include those). Without bias, penalties or
            ``min_tokens`` a plain forward pass of prompt + completion divided by ``T``
            reproduces it (what GRPO's trainer recomputes); with them it is the behaviour
            distribution the token was really drawn from, so the trainer's first-step ratio
            is ``pi(token) / mu(token)`` rather than 1 (see ``docs/training.md``).
        top_logprobs: per token, the ``top_logprobs`` most likely ``(token_id, logprob)`` under
            the same distribution as ``logprobs``.
        text: the decoded text, cut before any stop string.
        finish_reason: ``"stop"`` (EOS, stop string, constraint done) or ``"length"``.
        eos: whether ``token_ids[-1]`` is the sampled end-of-sequence token.
        cached_tokens: leading prompt tokens whose keys and values the engine reused from its
            prefix cache instead of computing them (0 when it has none or missed).
    """

    finish_reason: FinishReason


@dataclass
class SequenceDelta(_ChoiceTokens):
    """New output of one choice while streaming; ``finish_reason`` set on its last delta.

    ``eos``: this (last) delta's final token id is the sampled end-of-sequence token (no text).
    ``cached_tokens``: on a choice's first delta, the prompt tokens reused from the prefix cache.
    """

    finish_reason: FinishReason | None = None


class ContextLengthError(BadRequestError, ValueError):
    """The prompt plus ``max_tokens`` does not fit in the model's context length (a 400)."""

    code = "context_length_exceeded"


def check_request(request: GenerationRequest, vocab_size: int, context_length: int, adapters: Collection[str]) -> None:
    """Check ``request`` before an engine queues it (beyond the logit adjustments, which need torch).

    Raises:
        ValueError: an empty prompt or one with an id outside ``[0, vocab_size)``; ``n`` or
            ``max_tokens`` below 1; a temperature, ``top_p`` or ``top_logprobs`` out of range; an
            adapter not among ``adapters`` (those loaded).
        ContextLengthError: the prompt plus ``max_tokens`` exceed ``context_length``.
    """
    params = request.params
    prompt = request.prompt_token_ids
    if not prompt:
        raise ValueError("the prompt is empty")
    if any(not 0 <= t < vocab_size for t in prompt):
        raise ValueError(f"prompt token ids must be in [0, {vocab_size})")
    if request.n < 1:
        raise ValueError(f"n must be at least 1, got {request.n}")
    if params.max_tokens < 1:
        raise ValueError(f"max_tokens must be at least 1, got {params.max_tokens}")
    if not params.temperature >= 0:
        raise ValueError(f"temperature must be >= 0, got {params.temperature}")
    if not 0 < params.top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {params.top_p}")
    if not 0 <= params.top_logprobs <= 20:
        raise ValueError(f"top_logprobs must be in [0, 20], got {params.top_logprobs}")
    needed = len(prompt) + params.max_tokens
    if needed > context_length:
        raise ContextLengthError(
            f"the prompt has {len(prompt)} tokens and max_tokens is {params.max_tokens}: "
            f"{needed} tokens do not fit the model's context of {context_length}; "
            "shorten the prompt or lower max_tokens"
        )
    if request.adapter is not None and request.adapter not in adapters:
        raise ValueError(f"unknown adapter {request.adapter!r}; loaded: {sorted(adapters)}")


@dataclass
class EngineStats:
    """Counters an engine keeps since it started.

    Attributes:
        requests: requests accepted.
        sequences: choices (rows) decoded.
        tokens_generated: new tokens sampled, over all choices.
        max_batch_size_seen: the most sequences decoded together in one step.
        steps: batched forward passes (prefills and decode steps).
        failed_requests: requests that ended with an error.
        running_sequences: choices in the batch now (a gauge, not a counter).
        waiting_sequences: choices waiting for a place in the batch now (a gauge).
        preemptions: choices paused (keys and values kept) to give another request its share of
            the batch.
        prompt_tokens: prompt tokens of the choices prefilled.
        prefill_tokens: tokens run through the model in prefills (chunks included); with the
            prefix cache, fewer than ``prompt_tokens``.
        max_step_tokens: the most tokens one forward pass processed (a bound on a step's length).
        prefix_cache_hits: prompts that reused a cached prefix.
        prefix_cache_hit_tokens: prompt tokens whose keys and values were reused (saved tokens).
        prefix_cache_hit_rate: ``prefix_cache_hit_tokens`` over the prompt tokens looked up.
        prefix_cache_bytes: bytes the prefix cache holds now (``prefix_cache_max_bytes`` at most).
        prefix_cache_max_bytes: the prefix cache's budget (0: off).
        prefix_cache_entries: sequences it holds now.
        prefix_cache_evictions: sequences evicted (least recently used) to stay in budget.
        shared_prefix_steps: decode steps whose rows' common leading tokens were read once for the
            whole batch (shared-prefix attention).
        shared_prefix_reads_saved: key/value positions those steps did not read again (the shared
            length times the other rows, summed over the steps).
    """

    requests: int = 0
    sequences: int = 0
    tokens_generated: int = 0
    max_batch_size_seen: int = 0
    steps: int = 0
    failed_requests: int = 0
    running_sequences: int = 0
    waiting_sequences: int = 0
    preemptions: int = 0
    prompt_tokens: int = 0
    prefill_tokens: int = 0
    max_step_tokens: int = 0
    prefix_cache_hits: int = 0
    prefix_cache_hit_tokens: int = 0
    prefix_cache_hit_rate: float = 0.0
    prefix_cache_bytes: int = 0
    prefix_cache_max_bytes: int = 0
    prefix_cache_entries: int = 0
    prefix_cache_evictions: int = 0
    shared_prefix_steps: int = 0
    shared_prefix_reads_saved: int = 0


@runtime_checkable
class InferenceEngine(Protocol):
    """What the server needs from an engine.

    The server turns an OpenAI request into a :class:`GenerationRequest` (prompt token ids already
    rendered by the chat template, sampling settings, an optional output :class:`Constraint`, an
    optional LoRA adapter). Engines decode concurrent requests together (dynamic batching).
    """

    context_length: int

    async def generate(self, request: GenerationRequest) -> list[GeneratedSequence]:
        """Sample ``request.n`` choices; waits for a batch slot, never drops the request."""
        ...

    def stream(self, request: GenerationRequest) -> AsyncIterator[SequenceDelta]:
        """Like :meth:`generate`, yielding output as it is decoded."""
        ...

    async def close(self) -> None:
        """Stop the decode loop and free the model."""
        ...
