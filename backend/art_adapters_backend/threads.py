"""torch's intra-op thread count, set once per process by the engine and the trainers alike."""

from __future__ import annotations

import os

__all__ = ["THREADS_ENV", "set_torch_threads"]

THREADS_ENV = "ART_ADAPTERS_TORCH_THREADS"
"""Environment variable: torch's intra-op thread count when none is given explicitly."""


def set_torch_threads(num_threads: int | None = None) -> int | None:
    """Set torch's intra-op threads to ``num_threads``, else to ``$ART_ADAPTERS_TORCH_THREADS``.

    With neither, torch's default (one per core) is kept. On a CPU shared with other busy
    processes, 1 can be ten times faster: torch's spinning worker threads then wait on each
    other. Returns the count set, or ``None`` when the default was kept.

    Raises:
        ValueError: the variable is not an integer, or the count is below 1.
    """
    import torch

    if num_threads is None:
        raw = os.environ.get(THREADS_ENV)
        if not raw:
            return None
        try:
            num_threads = int(raw)
        except ValueError:
            raise ValueError(f"${THREADS_ENV} must be an integer, got {raw!r}") from None
    if num_threads < 1:
        raise ValueError(f"torch thread count must be at least 1, got {num_threads}")
    torch.set_num_threads(num_threads)
    return num_threads
