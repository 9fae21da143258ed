"""Micro-batches: the right-padded tensors a training step forwards, and the checks on its sequences."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

import torch

from .data import TrainingSequence

__all__ = [
    "MIN_SHARED_PREFIX", "Batch", "check_sequences", "forwarded_tokens", "micro_batches", "shared_prefix_length", "split_mini_batches",
]  # fmt: skip

logger = logging.getLogger(__name__)


#: The least number of shared leading tokens worth forwarding once per micro-batch.
MIN_SHARED_PREFIX = 32


def shared_prefix_length(sequences: Sequence[TrainingSequence]) -> int:
    """Leading tokens all ``sequences`` share and none carries loss on, leaving each row >= 1 token."""
    first = sequences[0].token_ids
    n = min(len(s.token_ids) for s in sequences) - 1
    for seq in sequences:
        n = min(n, seq.loss_mask.index(1) if 1 in seq.loss_mask else n)
        i = 0
        while i < n and seq.token_ids[i] == first[i]:
            i += 1
        n = i
    return max(n, 0)


def _token_advantages(seq: TrainingSequence) -> list[float] | None:
    """The sequence's per-token advantages (per-turn credit), or ``None`` when it has one advantage."""
    return seq.token_advantages


def _suffix(seq: TrainingSequence, start: int) -> TrainingSequence:
    update: dict[str, Any] = {
        "token_ids": seq.token_ids[start:],
        "loss_mask": seq.loss_mask[start:],
        "old_logprobs": seq.old_logprobs[start:],
    }
    per_token = _token_advantages(seq)
    if per_token is not None:
        update["token_advantages"] = per_token[start:]
    return seq.model_copy(update=update)


class Batch:
    """Right-padded tensors of one micro-batch.

    With ``prefix_len`` L > 0 the rows share their first L tokens: ``prefix_ids`` (1, L) holds
    them once, and ``input_ids``, ``loss_mask``, ``old_logprobs`` hold only the rest (B, T - L);
    ``attention_mask`` covers prefix and rest (B, T). ``advantages`` is (B,), or (B, T - L) when a
    sequence carries per-token advantages (per-turn credit).
    """

    def __init__(
        self, sequences: Sequence[TrainingSequence], pad_id: int, device: torch.device, prefix_len: int = 0
    ) -> None:
        self.prefix_len = prefix_len
        self.prefix_ids = torch.tensor([sequences[0].token_ids[:prefix_len]], dtype=torch.long).to(
            device
        )  # (1, L)
        if prefix_len:
            sequences = [_suffix(s, prefix_len) for s in sequences]
        width = max(len(s.token_ids) for s in sequences)
        n = len(sequences)
        self.input_ids = torch.full((n, width), pad_id, dtype=torch.long)  # (B, T)
        self.attention_mask = torch.zeros((n, width), dtype=torch.long)  # (B, T)
        self.loss_mask = torch.zeros((n, width), dtype=torch.float32)  # (B, T)
        self.old_logprobs = torch.full((n, width), float("nan"), dtype=torch.float32)  # (B, T), NaN = unknown
        for row, seq in enumerate(sequences):
            length = len(seq.token_ids)
            self.input_ids[row, :length] = torch.tensor(seq.token_ids, dtype=torch.long)
            self.attention_mask[row, :length] = 1
            self.loss_mask[row, :length] = torch.tensor(seq.loss_mask, dtype=torch.float32)
            self.old_logprobs[row, :length] = torch.tensor(
                [math.nan if x is None else x for x in seq.old_logprobs], dtype=torch.float32
            )
        if prefix_len:  # the shared prefix is attended by every row
            self.attention_mask = torch.cat(
                [torch.ones((n, prefix_len), dtype=torch.long), self.attention_mask], dim=1
            )  # (B, L + T')
        self.advantages = torch.tensor([s.advantage for s in sequences], dtype=torch.float32)  # (B,)
        if any(_token_advantages(s) is not None for s in sequences):  # per-turn credit: (B, T)
            per_token = self.advantages.reshape(-1, 1).repeat(1, width)  # rows without: their one value
            for row, seq in enumerate(sequences):
                values = _token_advantages(seq)
                if values is not None:
                    per_token[row, : len(values)] = torch.tensor(values, dtype=torch.float32)
            self.advantages = per_token  # (B, T)
        self.temperatures = torch.tensor([s.temperature for s in sequences], dtype=torch.float32)  # (B,)
        for name in (
            "input_ids",
            "attention_mask",
            "loss_mask",
            "old_logprobs",
            "advantages",
            "temperatures",
        ):
            setattr(self, name, getattr(self, name).to(device))


def check_sequences(sequences: Sequence[TrainingSequence]) -> None:
    """Raise ValueError naming the first malformed sequence (lengths, a loss on token 0, advantage)."""
    for i, seq in enumerate(sequences):
        n = len(seq.token_ids)
        if n == 0 or len(seq.loss_mask) != n or len(seq.old_logprobs) != n:
            raise ValueError(
                f"sequence {i} (trajectory {seq.trajectory_id}): token_ids, loss_mask and old_logprobs must have the "
                f"same non-zero length, got {n}, {len(seq.loss_mask)}, {len(seq.old_logprobs)}"
            )
        if seq.loss_mask[0]:
            raise ValueError(
                f"sequence {i}: the first token has no context and cannot carry loss (loss_mask[0] = 1)"
            )
        if not math.isfinite(seq.advantage):
            raise ValueError(f"sequence {i}: advantage is {seq.advantage}; it must be finite")


def split_mini_batches(
    sequences: Sequence[TrainingSequence], count: int
) -> list[list[TrainingSequence]]:
    """Cut ``sequences`` in their order into ``min(count, len(sequences))`` contiguous mini-batches
    whose sizes differ by at most one (larger ones first); logs when ``count`` is cut down."""
    if count > len(sequences):
        logger.warning(
            "mini_batches=%d but the step has only %d sequences: %d mini-batches of one sequence",
            count, len(sequences), len(sequences),
        )  # fmt: skip
    count = max(1, min(count, len(sequences)))
    size, extra = divmod(len(sequences), count)
    out, start = [], 0
    for i in range(count):
        end = start + size + (1 if i < extra else 0)
        out.append(list(sequences[start:end]))
        start = end
    return out


def micro_batches(
    sequences: Sequence[TrainingSequence],
    size: int,
    pad_id: int,
    device: torch.device,
    share_prefix: bool = False,
    max_tokens: int | None = None,
) -> list[Batch]:
    """``sequences`` cut into right-padded micro-batches, longest first; with ``share_prefix`` each
    group's rows forward their shared prefix once (when long enough).

    A micro-batch holds at most ``size`` sequences and, when ``max_tokens`` is set, forwards at most
    that many tokens (:func:`forwarded_tokens`: its rows padded to the longest, a shared prefix
    counted once); a sequence longer than ``max_tokens`` goes alone. What a backward pass keeps
    grows with the tokens forwarded (about 2 MB a token for the bundled model in fp32 on CPU), so the
    budget, not the row count, bounds a step's memory when sequences are long.
    """
    if not share_prefix:
        ordered = sorted(sequences, key=lambda s: len(s.token_ids), reverse=True)
        return [Batch(chunk, pad_id, device) for chunk in _packed(ordered, size, max_tokens, False)]
    by_group: dict[str, list[TrainingSequence]] = {}
    for seq in sequences:
        by_group.setdefault(seq.group_id, []).append(seq)
    batches = []
    for members in by_group.values():
        ordered = sorted(members, key=lambda s: len(s.token_ids), reverse=True)
        for chunk in _packed(ordered, size, max_tokens, True):
            batches.append(Batch(chunk, pad_id, device, _usable_prefix(chunk)))
    return batches


def _usable_prefix(chunk: Sequence[TrainingSequence]) -> int:
    """The shared prefix a micro-batch of ``chunk`` forwards once (0 when too short to be worth it)."""
    shared = shared_prefix_length(chunk) if len(chunk) > 1 else 0
    return shared if shared >= MIN_SHARED_PREFIX else 0


def forwarded_tokens(chunk: Sequence[TrainingSequence], share_prefix: bool) -> int:
    """Tokens one forward pass over ``chunk`` processes: ``prefix + rows x (longest - prefix)``."""
    prefix = _usable_prefix(chunk) if share_prefix else 0
    longest = max(len(s.token_ids) for s in chunk)
    return prefix + len(chunk) * (longest - prefix)


def _packed(
    ordered: Sequence[TrainingSequence], size: int, max_tokens: int | None, share_prefix: bool
) -> list[list[TrainingSequence]]:
    """``ordered`` (longest first) cut greedily, in order, into chunks within ``size`` rows and ``max_tokens``."""
    chunks: list[list[TrainingSequence]] = []
    chunk: list[TrainingSequence] = []
    for seq in ordered:
        candidate = [*chunk, seq]
        too_many = len(candidate) > size
        too_long = max_tokens is not None and forwarded_tokens(candidate, share_prefix) > max_tokens
        if chunk and (too_many or too_long):
            chunks.append(chunk)
            candidate = [seq]
        chunk = candidate
    if chunk:
        chunks.append(chunk)
    return chunks
