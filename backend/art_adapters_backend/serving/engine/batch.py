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
from .kv_cache import growing_cache, stack_left_padded
from .prefix_cache import KVLayers, PrefixCache
from .sampling import LogitAdjuster, SampledToken, sample_next, sample_plain
from .shared_prefix import MIN_SHARED_TOKENS, SharedPrefix, common_prefix_length
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
    """One choice being decoded.

    Before it joins the decode batch a row is *prefilled*, possibly over several steps (chunked):
    ``past`` holds the keys and values of the first ``computed`` tokens of :meth:`context` (reused
    from the prefix cache or computed by earlier chunks). A row preempted to make room for another
    request keeps its keys and values there and resumes where it stopped.
    """

    job: Job
    index: int
    tracker: TextTracker
    generator: torch.Generator | None
    decoder: ConstrainedDecoder | None
    adjuster: LogitAdjuster | None = None  # bias/min_tokens/penalty state, None when not asked for
    scope: str = BASE_ADAPTER  # the weights' prefix-cache scope (adapter and its load generation)
    position: int = 0  # position id of the next token fed to the model
    last_token: int = -1
    n_tokens: int = 0
    finish: FinishReason | None = None
    generated: list[int] = field(default_factory=list)
    computed: int = 0  # leading tokens of context() whose keys and values are in ``past``
    past: KVLayers | None = None  # per layer [H, computed, D]
    cached_tokens: int = 0  # prompt tokens reused from the prefix cache
    looked_up: bool = False
    ready_logits: torch.Tensor | None = None  # [V]: the whole prompt was cached, with its logits
    ran: int = 0  # decode steps since the row was last admitted (the scheduler's quantum)

    @property
    def adapter(self) -> str:
        """The PEFT adapter name for this row (``__base__`` for the base weights)."""
        return self.job.request.adapter or BASE_ADAPTER

    def context(self) -> list[int]:
        """The tokens the model must have seen before sampling this row's next token."""
        return self.job.request.prompt_token_ids + self.generated


@dataclass
class StepCounters:
    """What one step did, for the engine's stats."""

    tokens: int = 0
    batch_size: int = 0


@dataclass(eq=False)
class Batch:
    """The active rows and their KV cache.

    It holds a left-padded attention mask ``[B, L]`` and a cache of
    :class:`~.kv_cache.GrowingLayer` s whose keys and values are ``[B, H, L, D]``. New rows are
    prefilled apart (:meth:`prefill`, at most ``chunk`` prompt tokens per step, identical prompts
    once), starting from the keys and values the prefix cache holds for their prompt's start,
    and merged in between decode steps by left-padding the shorter cache. Position ids come from
    each row's real token count, so padding never changes a row's result. Finished rows are
    dropped (their keys and values kept in the prefix cache for a later turn) and fully padded
    columns trimmed.

    With ``share_prefixes`` (the model must run :mod:`.shared_prefix`'s attention) the leading
    tokens every row has in common, under the same weights, are held once (:attr:`shared`) and the
    cache keeps only each row's keys and values after them: a decode step reads the shared part
    once for the whole batch. A row that joins with less in common shortens the shared part (what
    it no longer covers is copied into every row's own keys and values) or ends the sharing.
    """

    model: PreTrainedModel
    eos_token_ids: set[int]
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    prefix_cache: PrefixCache = field(default_factory=lambda: PrefixCache(0))
    rows: list[Row] = field(default_factory=list)
    cache: Any = None
    mask: torch.Tensor | None = None  # [B, L] long, 1 = real token
    prompt_tokens: int = 0  # counters for the engine's stats: prompt tokens of new rows
    prefill_tokens: int = 0  # tokens run through the model in prefills
    max_step_tokens: int = 0  # the most tokens one forward pass processed
    share_prefixes: bool = False  # decode attention over a shared prefix (the model must run it)
    merge_prefills: bool = False  # prefill prompts' common start once
    shared: SharedPrefix | None = None  # the rows' common leading tokens, held once
    shared_steps: int = 0  # decode steps that read a shared prefix
    shared_reads_saved: int = 0  # key/value positions those steps did not read again (prefix x (rows - 1))

    # ---- model calls -------------------------------------------------------------------

    @property
    def num_layers(self) -> int:
        """Decoder layers of the model (one KV pair each)."""
        config = self.model.config
        return int(getattr(config, "num_hidden_layers", None) or config.get_text_config().num_hidden_layers)

    def _forward(self, rows: list[Row], **kwargs: Any) -> torch.Tensor:
        """Run the model for ``rows`` (mixed adapters via PEFT's ``adapter_names``) -> logits [B, V]."""
        if hasattr(self.model, "peft_config"):
            kwargs["adapter_names"] = [row.adapter for row in rows]
        out = self.model(use_cache=True, logits_to_keep=1, **kwargs)
        return out.logits[:, -1, :].float().cpu()  # sampling runs on the CPU with per-row generators

    def look_up(self, rows: list[Row]) -> None:
        """Start each new row from the longest prefix of its prompt the prefix cache holds."""
        for row in rows:
            if row.looked_up:
                continue
            row.looked_up = True
            prompt = row.job.request.prompt_token_ids
            self.prompt_tokens += len(prompt)
            hit = self.prefix_cache.lookup(row.scope, prompt)
            if hit is not None:
                row.past, row.computed, row.cached_tokens = hit.layers, hit.length, hit.length
                row.ready_logits = hit.logits

    # shape: the engine's hot prefill step (plan, pad, one forward, keep each row's KV) in one frame
    def prefill(self, rows: list[Row], chunk: int) -> tuple[list[Row], list[Row]]:
        """Compute up to ``chunk`` tokens of the rows' contexts (first rows first) in one forward pass.

        Rows whose context is then complete sample their first token and join the batch.
        Returns ``(joined, finished)``: the rows that joined, and those that finished at once.
        """
        self.look_up(rows)
        ready = [row for row in rows if row.ready_logits is not None and row.computed == len(row.context())]
        if ready:  # a repeated prompt: nothing to compute
            logits = torch.stack([row.ready_logits for row in ready])  # type: ignore[misc]
            for row in ready:
                row.position, row.ready_logits = row.computed, None
            return ready, self._join(ready, list(logits))
        plan: list[tuple[list[Row], int]] = []
        budget = max(1, chunk)
        for members, end in _prefill_groups(rows, merge=self.merge_prefills):
            if budget <= 0:
                break
            take = min(end - members[0].computed, budget)
            budget -= take
            plan.append((members, take))
        heads = [members[0] for members, _ in plan]
        self.prefill_tokens += sum(take for _, take in plan)
        self.max_step_tokens = max(self.max_step_tokens, sum(take for _, take in plan) + len(self.rows))
        past_len = max(row.computed for row in heads)
        width = max(take for _, take in plan)
        input_ids = torch.zeros((len(plan), width), dtype=torch.long)
        positions = torch.zeros((len(plan), width), dtype=torch.long)
        mask = torch.zeros((len(plan), past_len + width), dtype=torch.long)
        for i, (row, (_, take)) in enumerate(zip(heads, plan, strict=True)):
            tokens = row.context()[row.computed : row.computed + take]
            input_ids[i, width - take :] = torch.tensor(tokens, dtype=torch.long)
            positions[i, width - take :] = torch.arange(row.computed, row.computed + take)
            mask[i, past_len - row.computed : past_len] = 1
            mask[i, past_len + width - take :] = 1
        past = None
        if past_len:
            empty = [(k.new_zeros((k.shape[0], 0, k.shape[2])), k.new_zeros((k.shape[0], 0, k.shape[2])))
                     for k, _ in next(r.past for r in heads if r.past is not None)]  # fmt: skip
            past = stack_left_padded([row.past or empty for row in heads], past_len)
        cache = growing_cache(past, self.num_layers)
        logits = self._forward(
            heads, input_ids=input_ids.to(self.device), attention_mask=mask.to(self.device),
            position_ids=positions.to(self.device), past_key_values=cache,
        )  # fmt: skip
        joined: list[Row] = []
        joined_logits: list[torch.Tensor] = []
        for i, (members, take) in enumerate(plan):
            head = members[0]
            keep = mask[i].nonzero().squeeze(1).to(self.device)
            layers = [(layer.keys[i].index_select(1, keep), layer.values[i].index_select(1, keep))
                      for layer in cache.layers]  # fmt: skip
            computed = head.computed + take
            for row in members:
                row.past, row.computed = layers, computed
            if computed < len(head.context()):
                continue  # more chunks to go
            if not head.generated:  # a whole prompt: a later request may start the same way
                self.prefix_cache.store(head.scope, head.job.request.prompt_token_ids, layers, logits[i].clone())
            for row in members:
                row.position = computed
                joined.append(row)
                joined_logits.append(logits[i])
        if not joined:
            return [], []
        return joined, self._join(joined, joined_logits)

    def _join(self, joined: list[Row], logits: list[torch.Tensor]) -> list[Row]:
        """Sample prefilled rows' first token and merge those still going into the batch.

        Returns the rows that finished at once (a one-token request): they never enter the
        batch, so serving them copies none of its keys and values.
        """
        finished = self._sample(joined, torch.stack(logits))
        gone = {id(row) for row in finished}
        for row in finished:
            if self.prefix_cache.enabled and row.past is not None and row.generated[:-1] and not row.job.cancelled:
                # a resumed row that ended: its conversation so far, for a later turn (as drop() does)
                self.prefix_cache.store(row.scope, row.context()[: row.position], row.past)
            row.past = None
        going = [row for row in joined if id(row) not in gone]
        if not going:
            return finished
        cut = self._share(going)
        width = max(row.computed - cut for row in going)
        own = [[(k[:, cut:], v[:, cut:]) for k, v in row.past] for row in going if row.past is not None]
        stacked = stack_left_padded(own, width)
        new_mask = torch.zeros((len(going), width), dtype=torch.long, device=self.device)
        for i, row in enumerate(going):
            new_mask[i, width - (row.computed - cut) :] = 1
            row.past = None
        self._merge(going, stacked, new_mask)
        return finished

    def decode(self) -> list[Row]:
        """One decode step for every active row. Returns the rows that finished."""
        assert self.mask is not None
        input_ids = torch.tensor([[row.last_token] for row in self.rows], dtype=torch.long, device=self.device)
        positions = torch.tensor([[row.position] for row in self.rows], dtype=torch.long, device=self.device)
        for row in self.rows:
            row.position += 1
            row.ran += 1
        self.mask = torch.cat([self.mask, self.mask.new_ones((len(self.rows), 1))], dim=1)
        shared: dict[str, Any] = {}
        if self.shared is not None:
            shared["shared_prefix"] = self.shared.layers
            self.shared_steps += 1
            self.shared_reads_saved += self.shared.length * (len(self.rows) - 1)
        logits = self._forward(
            self.rows,
            input_ids=input_ids,
            attention_mask=self.mask,
            position_ids=positions,
            past_key_values=self.cache,
            **shared,
        )
        return self._sample(list(self.rows), logits)

    # ---- sampling and bookkeeping ------------------------------------------------------

    def _sample(self, rows: list[Row], logits: torch.Tensor) -> list[Row]:
        """Sample one token per row from ``logits`` [len(rows), V]; report it; return finished rows.

        Rows without adjustments, constraint or truncation are sampled together
        (:func:`~.sampling.sample_plain`: the same numbers as :func:`~.sampling.sample_next`, one
        pass over the batch); the others one by one.
        """
        finished: list[Row] = []
        live = [i for i, row in enumerate(rows) if not (row.job.done or row.job.cancelled)]
        plain = [i for i in live if _is_plain(rows[i])]
        presampled: dict[int, SampledToken] = {}
        if len(plain) > 1:
            try:
                drawn = sample_plain(
                    logits.index_select(0, torch.tensor(plain)),
                    temperatures=[rows[i].job.request.params.temperature for i in plain],
                    generators=[rows[i].generator for i in plain],
                    top_logprobs=[rows[i].job.request.params.top_logprobs for i in plain],
                )
                presampled = dict(zip(plain, drawn, strict=True))
            except Exception:  # fall back to one by one, where a failure ends one request only
                logger.exception("batched sampling failed; sampling row by row")
        for i, row in enumerate(rows):
            if row.job.done or row.job.cancelled:  # nobody listens: sample nothing, drop it
                row.finish = row.finish or "stop"
                finished.append(row)
                continue
            try:
                self._advance(row, logits[i], presampled.get(i))
            except Exception as exc:  # one row's failure ends its request only
                logger.exception("sampling failed for a request")
                row.job.fail(exc)
                row.finish = "stop"
            if row.finish is not None:
                finished.append(row)
        return finished

    def _advance(self, row: Row, logits: torch.Tensor, sampled: SampledToken | None = None) -> None:
        """Sample (unless ``sampled`` already), record and report one token of ``row``."""
        if sampled is None:
            sampled = self._sample_one(row, logits)
        self._record(row, sampled)

    def _sample_one(self, row: Row, logits: torch.Tensor) -> SampledToken:
        """One row's token with its constraint, adjustments and truncations (:func:`~.sampling.sample_next`)."""
        allowed = row.decoder.allowed() if row.decoder is not None else None
        forced = row.decoder.forced_token() if row.decoder is not None else None
        return sample_next(
            logits, row.job.request.params, generator=row.generator, allowed=allowed, forced=forced,
            adjuster=row.adjuster,
        )

    def _record(self, row: Row, sampled: SampledToken) -> None:
        """Keep and report ``row``'s new token; set its finish reason when it ended."""
        params = row.job.request.params
        token = sampled.token_id
        if row.adjuster is not None:
            row.adjuster.accept(token)
        row.last_token = token
        row.generated.append(token)
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
                cached_tokens=row.cached_tokens if row.n_tokens == 1 else 0,
            )
        )
        if final:
            row.job.finish_choice()

    # ---- cache surgery -----------------------------------------------------------------

    def _share(self, joining: list[Row]) -> int:
        """Settle the batch's shared prefix for ``joining`` rows (keys and values in ``row.past``).

        Returns how many leading tokens of each joining row the shared prefix covers (0: none).
        Sharing starts once the batch would hold two rows or more with at least
        :data:`MIN_SHARED_TOKENS` leading tokens in common under the same weights (at most all but
        each row's last computed token, so every row keeps keys of its own): the rows already in the
        batch then give up their copy of those tokens.
        """
        if not self.share_prefixes:
            return 0
        if self.shared is None:
            first = joining[0]
            if len(self.rows) + len(joining) < 2 or first.past is None:
                return 0
            tokens = first.context()[: first.position]
            length = self._common_length([*self.rows, *joining], first.scope, tokens)
            if length < MIN_SHARED_TOKENS:
                return 0
            if self.rows:
                self._drop_leading(length)
            layers = [(k[:, :length], v[:, :length]) for k, v in first.past]
            self.shared = SharedPrefix(first.scope, tokens[:length], layers)
            logger.debug("%d rows share their first %d tokens", len(self.rows) + len(joining), length)
            return length
        length = self._common_length(joining, self.shared.scope, self.shared.tokens)
        if length < self.shared.length:
            self._unshare(keep=length if length >= MIN_SHARED_TOKENS else 0)
        return self.shared.length if self.shared is not None else 0

    @staticmethod
    def _common_length(rows: list[Row], scope: str, tokens: list[int]) -> int:
        """How many of ``tokens`` lead every row's computed context (``row.position`` tokens) under
        the weights ``scope``, leaving each row at least one token of its own."""
        length = len(tokens)
        for row in rows:
            if row.scope != scope:
                return 0
            length = min(length, row.position - 1)
            length = common_prefix_length(tokens[:length], row.context()[:length])
        return max(length, 0)

    def _drop_leading(self, length: int) -> None:
        """Remove the first ``length`` real columns of every row in the batch (they become shared)."""
        assert self.shared is None  # row_layers would put a shared prefix first
        own = [[(k[:, length:], v[:, length:]) for k, v in self.row_layers(i)] for i in range(len(self.rows))]
        lengths = [layers[0][0].shape[1] for layers in own]
        width = max(lengths)
        self.cache = growing_cache(stack_left_padded(own, width), self.num_layers)
        self.mask = torch.zeros((len(self.rows), width), dtype=torch.long, device=self.device)
        for i, own_length in enumerate(lengths):
            self.mask[i, width - own_length :] = 1

    def _unshare(self, keep: int) -> None:
        """Share only the first ``keep`` tokens (0: none): the rest goes into every row's own keys and values."""
        assert self.shared is not None and self.mask is not None
        moved = self.shared.length - keep
        for layer, (keys, values) in zip(self.cache.layers, self.shared.layers, strict=True):
            layer.prepend(keys[:, keep:], values[:, keep:])
        self.mask = torch.cat([self.mask.new_ones((self.mask.shape[0], moved)), self.mask], dim=1)
        self.shared = self.shared.truncated(keep) if keep else None
        logger.debug("a joining row shares %d tokens: %d moved into every row's own", keep, moved)

    def _merge(self, new_rows: list[Row], layers: KVLayers, mask: torch.Tensor) -> None:
        """Append rows with their own keys and values, left-padding whichever side is shorter."""
        if not self.rows:
            self.rows, self.cache, self.mask = list(new_rows), growing_cache(layers, self.num_layers), mask
            return
        assert self.mask is not None
        width = max(self.mask.shape[1], mask.shape[1])
        for old, (keys, values) in zip(self.cache.layers, layers, strict=True):
            old.append_rows(keys, values)
        self.mask = torch.cat([_pad_left_mask(self.mask, width), _pad_left_mask(mask, width)], dim=0)
        self.rows.extend(new_rows)

    def row_layers(self, position: int) -> KVLayers:
        """The keys and values of the row at ``position`` in the batch, its real columns only (copies),
        after the shared prefix's if the batch has one."""
        assert self.mask is not None
        keep = self.mask[position].nonzero().squeeze(1)
        own = [(layer.keys[position].index_select(1, keep), layer.values[position].index_select(1, keep))
               for layer in self.cache.layers]  # fmt: skip
        if self.shared is None:
            return own
        return [(torch.cat([sk, k], dim=1), torch.cat([sv, v], dim=1))
                for (sk, sv), (k, v) in zip(self.shared.layers, own, strict=True)]  # fmt: skip

    def drop(self, gone: list[Row], *, keep_kv: bool = False) -> None:
        """Remove rows (finished, failed, cancelled or preempted) and trim columns no row uses.

        The keys and values of a finished row (its prompt and completion) go to the prefix cache,
        so the next turn of the conversation starts from them; with ``keep_kv`` (preemption) a
        row keeps them itself and can resume.
        """
        if not gone:
            return
        gone_ids = {id(row) for row in gone}
        for i, row in enumerate(self.rows):
            if id(row) not in gone_ids:
                continue
            if keep_kv:
                row.past, row.computed = self.row_layers(i), row.position
            elif self.prefix_cache.enabled and row.finish is not None and not row.job.cancelled:
                tokens = row.context()[: row.position]
                self.prefix_cache.store(row.scope, tokens, self.row_layers(i))
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
                layer.trim_left(start)

    def clear(self) -> None:
        """Forget every row and the cache."""
        self.rows, self.cache, self.mask, self.shared = [], None, None, None


def _prefill_groups(rows: list[Row], *, merge: bool) -> list[tuple[list[Row], int]]:
    """The work of a prefill: groups of rows computed as one, and up to which context position.

    Identical contexts are computed once (a request's ``n`` choices, a group's equal prompts). With
    ``merge``, groups under the same weights, at the same point, whose contexts go on alike for at
    least :data:`MIN_SHARED_TOKENS` more tokens (a batch of rollouts' shared system prompt and tools,
    each group with its own question) are first computed as one up to where they part (all but one
    token of the shortest, so none completes there); the next prefill continues each from there.
    """
    groups: dict[tuple[str, int, tuple[int, ...]], list[Row]] = {}
    for row in rows:
        groups.setdefault((row.scope, row.computed, tuple(row.context())), []).append(row)
    alike: dict[tuple[str, int], list[list[Row]]] = {}
    for (scope, computed, _), members in groups.items():
        alike.setdefault((scope, computed), []).append(members)
    work: list[tuple[list[Row], int]] = []
    for (_, computed), parts in alike.items():
        if merge and len(parts) > 1:
            contexts = [members[0].context() for members in parts]
            end = min(len(context) for context in contexts) - 1
            for context in contexts[1:]:
                end = computed + common_prefix_length(contexts[0][computed:end], context[computed:end])
            if end - computed >= MIN_SHARED_TOKENS:
                work.append(([row for members in parts for row in members], end))
                continue
        work.extend((members, len(members[0].context())) for members in parts)
    return work


def _is_plain(row: Row) -> bool:
    """Whether ``row`` samples from its temperature alone (no constraint, adjustment or truncation)."""
    params = row.job.request.params
    return (
        row.decoder is None and row.adjuster is None and params.top_p >= 1.0 and params.top_k == 0
        and params.min_p == 0.0
    )  # fmt: skip


def _pad_left_mask(mask: torch.Tensor, width: int) -> torch.Tensor:
    """Left-pad a [B, L] attention mask with zeros to length ``width``."""
    missing = width - mask.shape[1]
    if missing <= 0:
        return mask
    return torch.cat([mask.new_zeros((mask.shape[0], missing)), mask], dim=1)
