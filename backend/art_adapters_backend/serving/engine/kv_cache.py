"""A KV cache whose layers grow in place (no copy of the whole cache per decoded token).

Transformers' ``DynamicLayer`` concatenates each new token onto its keys and values, copying the
whole batch's cache at every step and layer. :class:`GrowingLayer` writes into a buffer with room to
spare and hands the model views of it; :func:`growing_cache` builds a ``transformers.Cache`` of them.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.cache_utils import Cache, DynamicLayer

from .prefix_cache import KVLayers

__all__ = ["GrowingLayer", "growing_cache", "pad_left", "stack_left_padded"]

#: Spare positions allocated beyond what a layer holds (then half again as it grows).
HEADROOM = 64


class GrowingLayer(DynamicLayer):
    """A ``DynamicLayer`` that appends into a preallocated ``[B, H, capacity, D]`` buffer.

    ``keys`` and ``values`` are views of the first ``length`` positions of the buffers; they are
    replaced (not written) by :meth:`assign`, so a view handed out earlier is never changed.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._kbuf: torch.Tensor | None = None
        self._vbuf: torch.Tensor | None = None

    def assign(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Hold a copy of ``keys`` and ``values`` ``[B, H, L, D]``, with room to append."""
        b, h, length, d = keys.shape
        capacity = length + max(HEADROOM, length // 2)
        self._kbuf = keys.new_empty((b, h, capacity, d))
        self._vbuf = values.new_empty((b, h, capacity, d))
        self._kbuf[:, :, :length] = keys
        self._vbuf[:, :, :length] = values
        self.keys, self.values = self._kbuf[:, :, :length], self._vbuf[:, :, :length]
        self.device = keys.device
        self.is_initialized = True

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Append ``[B, H, n, D]`` states; returns all keys and values held (views)."""
        if self._kbuf is None or self.keys is None or self.keys.numel() == 0:
            self.assign(key_states, value_states)
            return self.keys, self.values
        assert self._vbuf is not None
        length, n = self.keys.shape[2], key_states.shape[2]
        if length + n > self._kbuf.shape[2]:
            self.assign(self.keys, self.values)
            if length + n > self._kbuf.shape[2]:  # a long chunk: make room for it too
                self.assign(torch.cat([self.keys, key_states], dim=2), torch.cat([self.values, value_states], dim=2))
                return self.keys, self.values
        self._kbuf[:, :, length : length + n] = key_states
        self._vbuf[:, :, length : length + n] = value_states
        self.keys, self.values = self._kbuf[:, :, : length + n], self._vbuf[:, :, : length + n]
        return self.keys, self.values

    def trim_left(self, start: int) -> None:
        """Forget the first ``start`` positions (columns no row uses any more)."""
        if start <= 0 or self._kbuf is None or self._vbuf is None or self.keys is None:
            return
        length = self.keys.shape[2]
        self._kbuf, self._vbuf = self._kbuf[:, :, start:], self._vbuf[:, :, start:]
        self.keys, self.values = self._kbuf[:, :, : length - start], self._vbuf[:, :, : length - start]

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep only the rows ``indices`` (one copy of their buffers, room to append kept)."""
        if self._kbuf is None or self._vbuf is None or self.keys is None or not self.keys.numel():
            return
        length = self.keys.shape[2]
        self._kbuf, self._vbuf = self._kbuf.index_select(0, indices), self._vbuf.index_select(0, indices)
        self.keys, self.values = self._kbuf[:, :, :length], self._vbuf[:, :, :length]

    def append_rows(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Add rows ``[b, H, l, D]`` after the held ones, left-padding whichever side is shorter with zeros.

        Each side is copied once, into a new buffer with room to append.
        """
        if self._kbuf is None or self.keys is None or self.values is None or not self.keys.numel():
            self.assign(keys, values)
            return
        old_rows, heads, old_length, dim = self.keys.shape
        width = max(old_length, keys.shape[2])
        capacity = width + max(HEADROOM, width // 2)
        kbuf = self.keys.new_empty((old_rows + keys.shape[0], heads, capacity, dim))
        vbuf = torch.empty_like(kbuf)
        for buf, old, new in ((kbuf, self.keys, keys), (vbuf, self.values, values)):
            for part, states in ((buf[:old_rows], old), (buf[old_rows:], new)):
                start = width - states.shape[2]
                part[:, :, :start] = 0  # padding: masked, but must be finite (0 x NaN is NaN)
                part[:, :, start:width] = states
        self._kbuf, self._vbuf = kbuf, vbuf
        self.keys, self.values = kbuf[:, :, :width], vbuf[:, :, :width]

    def prepend(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Put ``[H, n, D]`` keys and values, the same for every row, before each row's own.

        One copy into a new buffer with room to append; used when a batch stops sharing (part of)
        a prefix (:mod:`.shared_prefix`).
        """
        assert self.keys is not None and self.values is not None
        rows, heads, length, dim = self.keys.shape
        width = keys.shape[1] + length
        capacity = width + max(HEADROOM, width // 2)
        kbuf = self.keys.new_empty((rows, heads, capacity, dim))
        vbuf = torch.empty_like(kbuf)
        for buf, shared, own in ((kbuf, keys, self.keys), (vbuf, values, self.values)):
            buf[:, :, : keys.shape[1]] = shared  # broadcast over the rows
            buf[:, :, keys.shape[1] : width] = own
        self._kbuf, self._vbuf = kbuf, vbuf
        self.keys, self.values = kbuf[:, :, :width], vbuf[:, :, :width]


def growing_cache(layers: KVLayers | None, num_layers: int) -> Cache:
    """A ``Cache`` of :class:`GrowingLayer` s, holding ``layers`` (``[B, H, L, D]`` pairs) if given."""
    cache = Cache(layers=[GrowingLayer() for _ in range(num_layers)])
    if layers is not None:
        for layer, (keys, values) in zip(cache.layers, layers, strict=True):
            layer.assign(keys, values)
    return cache


def pad_left(states: torch.Tensor, width: int) -> torch.Tensor:
    """Left-pad a ``[B, H, L, D]`` key/value tensor with zeros to length ``width``."""
    missing = width - states.shape[2]
    if missing <= 0:
        return states
    pad = states.new_zeros((states.shape[0], states.shape[1], missing, states.shape[3]))
    return torch.cat([pad, states], dim=2)


def stack_left_padded(sequences: list[KVLayers], width: int) -> KVLayers:
    """Per layer, ``[len(sequences), H, width, D]``: each sequence's ``[H, L, D]`` right-aligned, zeros before."""
    out: KVLayers = []
    for per_layer in zip(*sequences, strict=True):
        k0 = per_layer[0][0]
        keys = k0.new_zeros((len(sequences), k0.shape[0], width, k0.shape[2]))
        values = torch.zeros_like(keys)
        for i, (k, v) in enumerate(per_layer):
            if k.shape[1]:
                keys[i, :, width - k.shape[1] :] = k
                values[i, :, width - v.shape[1] :] = v
        out.append((keys, values))
    return out
