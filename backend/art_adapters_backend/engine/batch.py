"""The rows decoded together and their shared KV cache (one worker thread owns it).

A :class:`Row` is one choice of one request; :class:`Batch` lets arrivals join a running batch
between decode steps instead of waiting for it to finish.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from .base import FinishReason, GenerationRequest, SequenceDelta
from .constraint import ConstrainedDecoder
from .sampling import LogitAdjuster, SampledToken, sample_next
from .text import TextTracker

if TYPE_CHECKING:
    from transformers import PreTrainedModel

__all__ = ["BASE_ADAPTER", "Batch", "Job", "Row"]

logger = logging.getLogger(__name__)

BASE_ADAPTER = "__base__"
"""PEFT's name for "no adapter" in a mixed-adapter batch."""


@dataclass(eq=False)
class Job:
    """One request in flight: its choices report to ``emit`` (called on the worker thread)."""

    request: GenerationRequest
    emit: Callable[[SequenceDelta | BaseException | None], None]
    compiled_grammar: Any = None
    remaining: int = 0
    done: bool = False
    cancelled: bool = False
    queued_at: float = field(default_factory=time.monotonic)

    def fail(self, exc: BaseException) -> None:
        """End the request with ``exc`` (once)."""
        if not self.done:
            self.done = True
            self.emit(exc)

    def finish_choice(self) -> None:
        """Count one finished choice; the last one ends the request."""
        self.remaining -= 1
        if self.remaining <= 0 and not self.done:
            self.done = True
            self.emit(None)


@dataclass(eq=False)
class Row:
    """One choice being decoded."""

    job: Job
    index: int
    tracker: TextTracker
    generator: torch.Generator | None
    decoder: ConstrainedDecoder | None
    adjuster: LogitAdjuster | None = None  # bias/min_tokens/penalty state, None when not asked for
    position: int = 0  # position id of the next token fed to the model
    last_token: int = -1
    n_tokens: int = 0
    finish: FinishReason | None = None

    @property
    def adapter(self) -> str:
        """The PEFT adapter name for this row (``__base__`` for the base weights)."""
        return self.job.request.adapter or BASE_ADAPTER


@dataclass
class StepCounters:
    """What one step did, for the engine's stats."""

    tokens: int = 0
    batch_size: int = 0


@dataclass(eq=False)
class Batch:
    """The active rows and their KV cache.

    It holds a left-padded attention mask ``[B, L]`` and a ``DynamicCache`` whose layers hold keys
    and values ``[B, H, L, D]``. New rows are prefilled on their own (identical prompts once, then
    copied: a request's ``n`` choices share one prefill) and merged in between decode steps by
    left-padding the shorter cache. Position ids come from each row's real token count, so padding
    never changes a row's result. Finished rows are dropped and fully padded columns trimmed.
    """

    model: PreTrainedModel
    eos_token_ids: set[int]
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    rows: list[Row] = field(default_factory=list)
    cache: Any = None
    mask: torch.Tensor | None = None  # [B, L] long, 1 = real token

    # ---- model calls -------------------------------------------------------------------

    def _forward(self, rows: list[Row], **kwargs: Any) -> torch.Tensor:
        """Run the model for ``rows`` (mixed adapters via PEFT's ``adapter_names``) -> logits [B, V]."""
        if hasattr(self.model, "peft_config"):
            kwargs["adapter_names"] = [row.adapter for row in rows]
        out = self.model(use_cache=True, logits_to_keep=1, **kwargs)
        return out.logits[:, -1, :].float().cpu()  # sampling runs on the CPU with per-row generators

    def prefill(self, new_rows: list[Row]) -> list[Row]:
        """Prefill ``new_rows``, sample their first token and merge them into the batch.

        Returns the rows that finished at once (their requests were told).
        """
        from transformers import DynamicCache

        prompts: dict[tuple[int, ...], int] = {}
        which = [prompts.setdefault(tuple(row.job.request.prompt_token_ids), len(prompts)) for row in new_rows]
        unique = list(prompts)
        # One prefill per (prompt, adapter): the adapter changes the cache.
        keys: dict[tuple[int, str], int] = {}
        slot = [keys.setdefault((w, row.adapter), len(keys)) for w, row in zip(which, new_rows, strict=True)]
        pairs = list(keys)
        width = max(len(unique[w]) for w, _ in pairs)
        input_ids = torch.zeros((len(pairs), width), dtype=torch.long)
        mask = torch.zeros((len(pairs), width), dtype=torch.long)
        for i, (w, _) in enumerate(pairs):
            ids = unique[w]
            input_ids[i, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
            mask[i, width - len(ids) :] = 1
        input_ids, mask = input_ids.to(self.device), mask.to(self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        cache = DynamicCache(config=self.model.config)
        prefill_rows = [new_rows[slot.index(i)] for i in range(len(pairs))]
        logits = self._forward(
            prefill_rows, input_ids=input_ids, attention_mask=mask, position_ids=positions, past_key_values=cache
        )
        expand = torch.tensor(slot, dtype=torch.long)
        logits = logits.index_select(0, expand)
        expand = expand.to(self.device)
        cache.batch_select_indices(expand)
        mask = mask.index_select(0, expand)
        for row in new_rows:
            row.position = len(row.job.request.prompt_token_ids)
        self._merge(new_rows, cache, mask)
        return self._sample(new_rows, logits)

    def decode(self) -> list[Row]:
        """One decode step for every active row. Returns the rows that finished."""
        assert self.mask is not None
        input_ids = torch.tensor([[row.last_token] for row in self.rows], dtype=torch.long, device=self.device)
        positions = torch.tensor([[row.position] for row in self.rows], dtype=torch.long, device=self.device)
        for row in self.rows:
            row.position += 1
        self.mask = torch.cat([self.mask, self.mask.new_ones((len(self.rows), 1))], dim=1)
        logits = self._forward(
            self.rows,
            input_ids=input_ids,
            attention_mask=self.mask,
            position_ids=positions,
            past_key_values=self.cache,
        )
        return self._sample(list(self.rows), logits)

    # ---- sampling and bookkeeping ------------------------------------------------------

    def _sample(self, rows: list[Row], logits: torch.Tensor) -> list[Row]:
        """Sample one token per row from ``logits`` [len(rows), V]; report it; return finished rows."""
        finished: list[Row] = []
        for i, row in enumerate(rows):
            if row.job.done or row.job.cancelled:  # nobody listens: sample nothing, drop it
                row.finish = row.finish or "stop"
                finished.append(row)
                continue
            try:
                self._advance(row, logits[i])
            except Exception as exc:  # one row's failure ends its request only
                logger.exception("sampling failed for a request")
                row.job.fail(exc)
                row.finish = "stop"
            if row.finish is not None:
                finished.append(row)
        return finished

    def _advance(self, row: Row, logits: torch.Tensor) -> None:
        """Sample, record and report one token of ``row``."""
        params = row.job.request.params
        allowed = row.decoder.allowed() if row.decoder is not None else None
        forced = row.decoder.forced_token() if row.decoder is not None else None
        sampled: SampledToken = sample_next(
            logits,
            temperature=params.temperature,
            top_p=params.top_p,
            top_logprobs=params.top_logprobs,
            generator=row.generator,
            allowed=allowed,
            forced=forced,
            top_k=params.top_k,
            min_p=params.min_p,
            adjuster=row.adjuster,
        )
        token = sampled.token_id
        if row.adjuster is not None:
            row.adjuster.accept(token)
        row.last_token = token
        row.n_tokens += 1
        if token in self.eos_token_ids:  # sampled: reported (and trained on), adds no text
            row.finish = "stop"
            top = [sampled.top_logprobs] if sampled.top_logprobs is not None else None
            self._report(row, [token], [sampled.logprob], top, eos=True)
            return
        if row.decoder is not None:
            row.decoder.accept(token)
        row.tracker.add(token)
        if row.tracker.stopped or (row.decoder is not None and row.decoder.must_stop):
            row.finish = "stop"
        elif row.n_tokens >= params.max_tokens:
            row.finish = "length"
        top = [sampled.top_logprobs] if sampled.top_logprobs is not None else None
        self._report(row, [token], [sampled.logprob], top)

    def _report(
        self, row: Row, token_ids: list[int], logprobs: list[float], top: list[list[tuple[int, float]]] | None,
        *, eos: bool = False,
    ) -> None:  # fmt: skip
        """Send one delta for ``row`` (its last when finished) and count a finished choice."""
        final = row.finish is not None
        if final and not token_ids and row.job.request.params.top_logprobs > 0:
            top = []
        row.job.emit(
            SequenceDelta(
                index=row.index,
                token_ids=token_ids,
                logprobs=logprobs,
                text=row.tracker.delta(final=final),
                finish_reason=row.finish,
                top_logprobs=top,
                eos=eos,
            )
        )
        if final:
            row.job.finish_choice()

    # ---- cache surgery -----------------------------------------------------------------

    def _merge(self, new_rows: list[Row], cache: Any, mask: torch.Tensor) -> None:
        """Append rows with their own cache, left-padding whichever cache is shorter."""
        if not self.rows:
            self.rows, self.cache, self.mask = list(new_rows), cache, mask
            return
        assert self.mask is not None
        old_len, new_len = self.mask.shape[1], mask.shape[1]
        width = max(old_len, new_len)
        for old_layer, new_layer in zip(self.cache.layers, cache.layers, strict=True):
            old_layer.keys = torch.cat([_pad_left(old_layer.keys, width), _pad_left(new_layer.keys, width)], dim=0)
            old_layer.values = torch.cat(
                [_pad_left(old_layer.values, width), _pad_left(new_layer.values, width)], dim=0
            )
        self.mask = torch.cat([_pad_left_mask(self.mask, width), _pad_left_mask(mask, width)], dim=0)
        self.rows.extend(new_rows)

    def drop(self, gone: list[Row]) -> None:
        """Remove rows (finished, failed or cancelled) and trim columns no row uses."""
        if not gone:
            return
        gone_ids = {id(row) for row in gone}
        keep = [i for i, row in enumerate(self.rows) if id(row) not in gone_ids]
        if not keep:
            self.clear()
            return
        if len(keep) < len(self.rows):
            index = torch.tensor(keep, dtype=torch.long, device=self.device)
            self.cache.batch_select_indices(index)
            assert self.mask is not None
            self.mask = self.mask.index_select(0, index)
            self.rows = [self.rows[i] for i in keep]
        assert self.mask is not None
        used = self.mask.any(dim=0).nonzero()
        start = int(used[0].item()) if used.numel() else 0
        if start > 0:
            self.mask = self.mask[:, start:]
            for layer in self.cache.layers:
                layer.keys = layer.keys[:, :, start:, :]
                layer.values = layer.values[:, :, start:, :]

    def clear(self) -> None:
        """Forget every row and the cache."""
        self.rows, self.cache, self.mask = [], None, None


def _pad_left(states: torch.Tensor, width: int) -> torch.Tensor:
    """Left-pad a [B, H, L, D] key/value tensor with zeros to length ``width``."""
    missing = width - states.shape[2]
    if missing <= 0:
        return states
    pad = states.new_zeros((states.shape[0], states.shape[1], missing, states.shape[3]))
    return torch.cat([pad, states], dim=2)


def _pad_left_mask(mask: torch.Tensor, width: int) -> torch.Tensor:
    """Left-pad a [B, L] attention mask with zeros to length ``width``."""
    missing = width - mask.shape[1]
    if missing <= 0:
        return mask
    return torch.cat([mask.new_zeros((mask.shape[0], missing)), mask], dim=1)
