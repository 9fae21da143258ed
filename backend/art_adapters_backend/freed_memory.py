"""Hand freed memory back to the OS (glibc's ``malloc_trim``): after a training step and after large bodies.

glibc keeps freed heap pages mapped for reuse: a backend that peaked at 9.9 GB in a training step still held
9.9 GB ten minutes later (serving needs about 2 GB), and resident memory is what the out-of-memory killer
sees. Request bodies of 1 MiB or more leave the same kind of pages; :data:`FREED_MEMORY` returns them in a
worker thread after such a request, at most once a second, and counts it for ``/art/stats``. Where the C
library is not glibc (musl, macOS, Windows) this is a no-op.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
import math
import sys
import time
from functools import cache
from typing import Any

__all__ = ["FREED_MEMORY", "LARGE_BODY_BYTES", "FreedMemory", "return_freed_memory"]

#: A request body at least this large is followed by a return of freed memory.
LARGE_BODY_BYTES = 1 << 20

logger = logging.getLogger(__name__)


@cache
def _malloc_trim() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
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
    return function


def return_freed_memory() -> bool:
    """Release the C heap's free pages to the OS; ``True`` when glibc released any."""
    trim = _malloc_trim()
    if trim is None:
        return False
    released = bool(trim(0))
    logger.debug("malloc_trim(0): %s", "released memory" if released else "nothing to release")
    return released


class FreedMemory:
    """Returns freed memory to the OS after large request bodies, and counts every return.

    Args:
        large_body_bytes: bodies at least this large trigger a return.
        min_interval_s: the least time between two returns; bodies that end sooner are covered
            by one trailing return (so the last of a burst is never left out).
    """

    def __init__(self, large_body_bytes: int = LARGE_BODY_BYTES, min_interval_s: float = 1.0) -> None:
        self.large_body_bytes = large_body_bytes
        self.min_interval_s = min_interval_s
        self.calls = 0
        self.released = 0
        self._last = -math.inf
        self._pending = False
        self._task: asyncio.Task[None] | None = None

    def now(self) -> bool:
        """Return freed memory at once, in this thread (a training step's worker thread)."""
        released = return_freed_memory()
        self.calls += 1
        self.released += int(released)
        self._last = time.monotonic()
        return released

    def after_body(self, size: int) -> None:
        """A request with a ``size``-byte body ended: schedule a return when the body was large."""
        if size < self.large_body_bytes:
            return
        self._pending = True
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        while self._pending:
            wait = self._last + self.min_interval_s - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            self._pending = False
            self._last = time.monotonic()
            released = await asyncio.to_thread(return_freed_memory)
            self.calls += 1
            self.released += int(released)

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
