"""The garbage collector's pauses: objects alive once the server is up are frozen, every pause timed.

A full collection walks every tracked object while holding the GIL. With the model, tokenizer and
libraries loaded (about 420,000 objects) one took 370-400 ms on a 2-core machine, and under the
soak's hostile mix (a 1 MB body of 30,000 tools allocates ~120,000 objects) such pauses stalled
``/health`` and every stream. :func:`freeze_startup_heap` takes those objects out of the collector's
sight (``gc.freeze``); :data:`PAUSES` times each collection for ``/art/stats``.
"""

from __future__ import annotations

import gc
import logging
import time
from typing import Any

__all__ = ["PAUSES", "GcPauses", "freeze_startup_heap"]

logger = logging.getLogger(__name__)


class GcPauses:
    """Counts and times garbage collections per generation (a ``gc.callbacks`` entry).

    The collector runs one collection at a time, in whichever thread allocated, holding the GIL.
    """

    def __init__(self) -> None:
        self.collections = [0, 0, 0]
        self.longest_ms = [0.0, 0.0, 0.0]
        self.total_ms = [0.0, 0.0, 0.0]
        self._started: float | None = None

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        """``gc.callbacks`` protocol: ``phase`` is ``"start"`` or ``"stop"``."""
        if phase == "start":
            self._started = time.perf_counter()
            return
        if self._started is None:
            return
        pause = (time.perf_counter() - self._started) * 1000
        self._started = None
        generation = int(info.get("generation", 2))
        self.collections[generation] += 1
        self.total_ms[generation] += pause
        self.longest_ms[generation] = max(self.longest_ms[generation], pause)

    def install(self) -> None:
        """Start timing (idempotent)."""
        if self not in gc.callbacks:
            gc.callbacks.append(self)

    def stats(self) -> dict[str, Any]:
        """Frozen objects, and collections, longest and total pause (ms) per generation since install."""
        return {
            "frozen_objects": gc.get_freeze_count(),
            "collections": list(self.collections),
            "longest_pause_ms": [round(ms, 2) for ms in self.longest_ms],
            "total_pause_ms": [round(ms, 1) for ms in self.total_ms],
        }


#: The server process's pause counters.
PAUSES = GcPauses()


def freeze_startup_heap() -> int:
    """Collect once, then freeze every object alive (modules, model, tokenizer); start timing pauses.

    Frozen objects are never scanned again: a full collection then walks only what was allocated
    while serving. Objects that are not garbage at startup rarely become cyclic garbage later; the
    few that might stay in memory. Returns the number of objects frozen.
    """
    started = time.perf_counter()
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    PAUSES.install()
    elapsed_ms = (time.perf_counter() - started) * 1000
    logger.info("froze %d objects for the garbage collector in %.0f ms", frozen, elapsed_ms)
    return frozen
