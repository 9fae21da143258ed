"""Keys and values of token prefixes computed before, reused by later prompts that start the same way.

:class:`PrefixCache` holds per-layer key/value tensors of whole token sequences under a *scope* (the
weights that computed them: base model or ``adapter@step`` plus its load generation), bounded in bytes
with least-recently-used eviction. A lookup finds the longest stored prefix of a prompt.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

__all__ = ["KVLayers", "PrefixCache", "PrefixCacheStats", "PrefixHit"]

logger = logging.getLogger(__name__)

KVLayers = list[tuple[torch.Tensor, torch.Tensor]]
"""Per model layer, the keys and values of one sequence: two ``[H, L, D]`` tensors."""

#: Tokens per hashed block: a prefix is found block by block, then extended token by token.
BLOCK = 16


@dataclass(eq=False)
class _Entry:
    scope: str
    tokens: tuple[int, ...]
    layers: KVLayers
    nbytes: int
    hashes: list[int] = field(default_factory=list)
    logits: dict[int, torch.Tensor] = field(default_factory=dict)  # length -> next-token logits [V]


@dataclass(frozen=True)
class PrefixHit:
    """A cached prefix of a prompt: its first ``length`` tokens' keys and values (``[H, length, D]`` views),
    and when the whole prompt was found, the next-token logits computed with it (``[V]``) if stored."""

    length: int
    layers: KVLayers
    logits: torch.Tensor | None = None


@dataclass
class PrefixCacheStats:
    """Counters of a :class:`PrefixCache` since it was made.

    Attributes:
        lookups: prompts looked up.
        hits: lookups that reused at least one token.
        hit_tokens: prompt tokens whose keys and values were reused (prefill saved).
        looked_up_tokens: prompt tokens looked up (``hit_tokens / looked_up_tokens`` is the token hit rate).
        stores: sequences stored.
        evictions: sequences evicted to stay within the byte budget.
        invalidations: sequences dropped because their weights changed (an adapter reloaded).
        entries: sequences held now.
        bytes: bytes held now.
        max_bytes: the byte budget.
    """

    lookups: int = 0
    hits: int = 0
    hit_tokens: int = 0
    looked_up_tokens: int = 0
    stores: int = 0
    evictions: int = 0
    invalidations: int = 0
    entries: int = 0
    bytes: int = 0
    max_bytes: int = 0


class PrefixCache:
    """Least-recently-used store of token sequences' keys and values, at most ``max_bytes`` in all.

    Entries are indexed by a chained hash of each :data:`BLOCK`-token block of their tokens, per
    scope, so a lookup walks the prompt's blocks while some entry shares them, then compares tokens
    one by one past the last shared block. A stored sequence that extends an entry replaces it (the
    longer one serves every prefix the shorter did). Not thread-safe: the engine's worker owns it.
    """

    def __init__(self, max_bytes: int) -> None:
        """An empty cache of at most ``max_bytes`` bytes (0 disables it: nothing is stored)."""
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        self.max_bytes = max_bytes
        self._entries: OrderedDict[int, _Entry] = OrderedDict()  # id -> entry, least recently used first
        self._index: dict[tuple[str, int], OrderedDict[int, _Entry]] = {}
        self._bytes = 0
        self._stats = PrefixCacheStats(max_bytes=max_bytes)

    @property
    def enabled(self) -> bool:
        """Whether anything can be stored."""
        return self.max_bytes > 0

    @property
    def stats(self) -> PrefixCacheStats:
        """A copy of the counters."""
        s = self._stats
        return PrefixCacheStats(**{**vars(s), "entries": len(self._entries), "bytes": self._bytes})

    def lookup(self, scope: str, tokens: Sequence[int]) -> PrefixHit | None:
        """The longest stored prefix of ``tokens`` computed under ``scope``.

        All of ``tokens`` when they were stored with their next-token logits (a repeated prompt:
        the same numbers as the first time, bit for bit); otherwise at most ``len(tokens) - 1``,
        the model then computes the rest.
        """
        if not self.enabled:
            return None
        self._stats.lookups += 1
        self._stats.looked_up_tokens += len(tokens)
        entry, length = self._longest(scope, tokens, len(tokens), want_logits=True)
        logits = entry.logits.get(length) if entry is not None and length == len(tokens) else None
        if logits is None:
            entry, length = self._longest(scope, tokens, len(tokens) - 1)
        if entry is None or length == 0:
            return None
        self._entries.move_to_end(id(entry))
        self._stats.hits += 1
        self._stats.hit_tokens += length
        layers = [(k[:, :length], v[:, :length]) for k, v in entry.layers]
        return PrefixHit(length=length, layers=layers, logits=logits)

    def _longest(
        self, scope: str, tokens: Sequence[int], limit: int, *, want_logits: bool = False
    ) -> tuple[_Entry | None, int]:
        """The entry sharing the most leading tokens with ``tokens`` (capped at ``limit``) and that count.

        With ``want_logits`` an entry holding logits for exactly ``limit`` tokens is preferred.
        """
        best: _Entry | None = None
        depth = 0
        chain = 0
        for start in range(0, min(limit, len(tokens)) - BLOCK + 1, BLOCK):
            chain = hash((chain, tuple(tokens[start : start + BLOCK])))
            holders = self._index.get((scope, chain))
            if not holders:
                break
            best, depth = next(reversed(holders.values())), start + BLOCK
            if want_logits:
                best = next((e for e in reversed(holders.values()) if limit in e.logits), best)
        if best is None:
            return None, 0
        if tuple(tokens[:depth]) != best.tokens[:depth]:  # a hash collision: no reuse
            return None, 0
        end = min(limit, len(tokens), len(best.tokens))
        while depth < end and tokens[depth] == best.tokens[depth]:
            depth += 1
        return best, depth

    def store(
        self, scope: str, tokens: Sequence[int], layers: KVLayers, logits: torch.Tensor | None = None
    ) -> None:
        """Keep ``layers`` (``[H, len(tokens), D]`` each, not aliased elsewhere) as the KV of ``tokens``,
        with the next-token ``logits`` computed from them if given."""
        if not self.enabled or not tokens:
            return
        tokens = tuple(tokens)
        nbytes = sum(k.nbytes + v.nbytes for k, v in layers) + (logits.nbytes if logits is not None else 0)
        if nbytes > self.max_bytes:
            return
        covering, shared = self._longest(scope, tokens, len(tokens))
        if covering is not None and shared == len(tokens):  # already held (as it or a longer one)
            if logits is not None and len(tokens) not in covering.logits:
                covering.logits[len(tokens)] = logits
                covering.nbytes += logits.nbytes
                self._bytes += logits.nbytes
            self._entries.move_to_end(id(covering))
            self._evict()
            return
        carried: dict[int, torch.Tensor] = {}
        if covering is not None and shared == len(covering.tokens):  # this one extends it: replace
            carried = covering.logits
            nbytes += sum(t.nbytes for t in carried.values())
            self._remove(covering)
        entry = _Entry(scope=scope, tokens=tokens, layers=layers, nbytes=nbytes, logits=carried)
        if logits is not None:
            entry.logits[len(tokens)] = logits
        chain = 0
        for start in range(0, len(tokens) - BLOCK + 1, BLOCK):
            chain = hash((chain, tokens[start : start + BLOCK]))
            entry.hashes.append(chain)
            self._index.setdefault((scope, chain), OrderedDict())[id(entry)] = entry
        if not entry.hashes:  # shorter than a block: never found, not worth keeping
            return
        self._entries[id(entry)] = entry
        self._bytes += nbytes
        self._stats.stores += 1
        self._evict()

    def _evict(self) -> None:
        """Drop least recently used entries until the cache fits its budget."""
        while self._bytes > self.max_bytes and self._entries:
            _, oldest = next(iter(self._entries.items()))
            self._remove(oldest)
            self._stats.evictions += 1

    def invalidate(self, owner: str) -> None:
        """Drop every entry of the weights named ``owner`` (scopes ``owner#<generation>``), e.g. an
        adapter reloaded or unloaded."""
        gone = [e for e in self._entries.values() if e.scope.rpartition("#")[0] == owner]
        for entry in gone:
            self._remove(entry)
        self._stats.invalidations += len(gone)

    def clear(self) -> None:
        """Drop everything."""
        for entry in list(self._entries.values()):
            self._remove(entry)

    def _remove(self, entry: _Entry) -> None:
        if self._entries.pop(id(entry), None) is None:
            return
        self._bytes -= entry.nbytes
        for chain in entry.hashes:
            holders = self._index.get((entry.scope, chain))
            if holders is not None:
                holders.pop(id(entry), None)
                if not holders:
                    del self._index[(entry.scope, chain)]
