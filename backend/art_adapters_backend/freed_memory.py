"""Hand the memory a training step freed back to the OS (glibc's ``malloc_trim``).

glibc keeps freed heap pages mapped for reuse: a backend that peaked at 9.9 GB in a training step still held
9.9 GB ten minutes later (serving needs about 2 GB), and resident memory is what the out-of-memory killer
sees. Not done after large request bodies: in the soak it held the allocator while the event loop waited
(`/health` p99 5.7-7.3x idle against 3.1x without) and did not lower the memory at the attack's end.
Where the C library is not glibc (musl, macOS, Windows) this is a no-op.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys
from collections.abc import Callable
from functools import cache
from typing import Any

__all__ = ["FREED_MEMORY", "FreedMemory", "return_freed_memory"]

logger = logging.getLogger(__name__)


@cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or ``None`` where the C library has none."""
    if not sys.platform.startswith("linux"):
        return None
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        function = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_size_t]
    function.restype = ctypes.c_int
    return function  # type: ignore[no-any-return]


def return_freed_memory() -> bool:
    """Release the C heap's free pages to the OS; ``True`` when glibc released any."""
    trim = _malloc_trim()
    if trim is None:
        return False
    released = bool(trim(0))
    logger.debug("malloc_trim(0): %s", "released memory" if released else "nothing to release")
    return released


class FreedMemory:
    """Returns freed memory to the OS when asked, and counts every return (``/art/stats`` "memory")."""

    def __init__(self) -> None:
        self.calls = 0
        self.released = 0

    def now(self) -> bool:
        """Return freed memory at once, in this thread (a training step's, or the quiet return's worker)."""
        released = return_freed_memory()
        self.calls += 1
        self.released += int(released)
        return released

    def stats(self) -> dict[str, Any]:
        """``/art/stats`` "memory": returns made and released, and the resident set now."""
        return {"returns": self.calls, "returns_that_released": self.released, "rss_bytes": _rss_bytes()}


def _rss_bytes() -> int | None:
    """This process's resident memory in bytes (Linux ``/proc``), else ``None``."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


#: The server's one :class:`FreedMemory` (like :data:`.gc_pauses.PAUSES`, process-wide).
FREED_MEMORY = FreedMemory()
