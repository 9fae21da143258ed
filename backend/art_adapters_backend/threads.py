"""The server's worker threads: torch's intra-op thread count (set once per process by the engine and the
trainers alike) and the priority of the threads doing model and request work."""

from __future__ import annotations

import os
import sys
import threading

__all__ = ["THREADS_ENV", "lower_thread_priority", "set_torch_threads", "set_work_nice"]

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


#: The nice increment :func:`lower_thread_priority` applies by default (``serve --work-nice``).
_work_nice = 0


def set_work_nice(increment: int) -> None:
    """Make :func:`lower_thread_priority` raise nice values by ``increment`` from now on (0: not at all)."""
    global _work_nice
    if not 0 <= increment <= 19:
        raise ValueError(f"a nice increment is between 0 and 19, got {increment}")
    _work_nice = increment


def lower_thread_priority(increment: int | None = None) -> int:
    """Raise the calling OS thread's nice value by ``increment`` (default: :func:`set_work_nice`'s).

    The server's model and request work runs in threads of its own; at a lower priority than the
    event loop's thread, the event loop gets a busy CPU as soon as it has something to do (answer
    ``/health``, admit a request). Linux keeps a nice value per thread (``setpriority(2)`` on a
    thread id), and the threads a thread starts (torch's intra-op workers) inherit it; a raised
    value cannot be lowered again without privileges, so call this only in threads that keep
    doing such work. Elsewhere, and where the OS refuses, nothing changes.

    Returns the increment applied (0 when none was).
    """
    if increment is None:
        increment = _work_nice
    if increment <= 0 or not sys.platform.startswith("linux"):
        return 0
    tid = threading.get_native_id()
    try:
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + increment))
    except OSError:
        return 0
    return increment
