"""The interpreter's pauses: objects alive once the server is up frozen, collections timed, GIL hand-overs.

A full collection walks every tracked object holding the GIL: with the model, tokenizer and libraries
loaded (~420,000 objects) 370-400 ms on a 2-core machine, which the soak's hostile bodies triggered
(stalling ``/health``). :func:`tune_pauses` takes those objects out of the collector's sight
(``gc.freeze``) and sets a 1 ms GIL switch interval (the engine thread runs Python between torch
calls); :data:`PAUSES` times each collection for ``/art/stats``. :func:`refreeze` does the same for
what a training step or an adapter load leaves alive, so later full collections stay short.
"""

from __future__ import annotations

import gc
import logging
import sys
import time
from typing import Any

__all__ = ["FULL_COLLECTION_EVERY", "PAUSES", "SWITCH_INTERVAL_S", "GcPauses", "refreeze", "tune_pauses"]

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
        self.refreezes = 0
        #: Objects frozen by :func:`tune_pauses` and :func:`refreeze`, counted when they froze them:
        #: ``gc.get_freeze_count()`` walks the whole frozen list (500,000 objects: 4 ms idle, 45 ms
        #: measured under a soak) holding the GIL, too slow to call per ``/art/stats`` request.
        self.frozen = 0

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

    @property
    def installed(self) -> bool:
        """Whether :meth:`install` ran in this process (the server's, via :func:`tune_pauses`)."""
        return self in gc.callbacks

    def stats(self) -> dict[str, Any]:
        """Frozen objects, the GIL switch interval, and per generation since install: collections,
        longest and total pause (ms)."""
        return {
            "frozen_objects": self.frozen,
            "refreezes": self.refreezes,
            "switch_interval_ms": round(sys.getswitchinterval() * 1000, 3),
            "full_collection_every": gc.get_threshold()[2],
            "collections": list(self.collections),
            "longest_pause_ms": [round(ms, 2) for ms in self.longest_ms],
            "total_pause_ms": [round(ms, 1) for ms in self.total_ms],
        }


#: The server process's pause counters.
PAUSES = GcPauses()


#: Seconds a thread may hold the GIL while another waits (Python's default: 5 ms). A thread running
#: small torch ops in a loop made a waking thread wait 2.0 ms for the GIL at p50 (0.17 ms at 1 ms).
SWITCH_INTERVAL_S = 0.001
#: Collections of the middle generation between two full ones (Python's default: 10). Once the
#: startup objects are frozen, what survives is little, so the default ran a full collection every
#: ~70,000 allocations: 37 in a 60 s soak, the longest 229 ms (walking bodies being parsed).
FULL_COLLECTION_EVERY = 100


def tune_pauses() -> int:
    """Collect once, freeze every object alive (modules, model, tokenizer), time pauses, 1 ms GIL hand-overs.

    Frozen objects are never scanned again: a full collection then walks only what was allocated
    while serving. Objects that are not garbage at startup rarely become cyclic garbage later; the
    few that might stay in memory. Also sets :data:`SWITCH_INTERVAL_S`, so the event loop gets the
    GIL back soon from the engine's thread, and :data:`FULL_COLLECTION_EVERY`. Returns the number
    of objects frozen.
    """
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_COLLECTION_EVERY)
    started = time.perf_counter()
    gc.collect()
    gc.freeze()
    frozen = PAUSES.frozen = gc.get_freeze_count()
    PAUSES.install()
    elapsed_ms = (time.perf_counter() - started) * 1000
    logger.info("froze %d objects for the garbage collector in %.0f ms", frozen, elapsed_ms)
    return frozen


def refreeze(reason: str) -> int:
    """Collect, then freeze what survived, after work that leaves many long-lived objects behind.

    A training step and an adapter load (PEFT modules, optimizer state, tokenizer caches) leave
    hundreds of thousands of objects that every later full collection would walk while holding the
    GIL (24-56 ms pauses in a soak, each stalling ``/health``). Called where the server pauses
    anyway (after a step, with inference paused; after an adapter load), this takes one collection
    there instead. Only in a process where :func:`tune_pauses` ran (the server's): elsewhere (a
    test or a library process) nothing is frozen. Returns the objects newly frozen.
    """
    if not PAUSES.installed:
        return 0
    before = PAUSES.frozen
    started = time.perf_counter()
    gc.collect()
    gc.freeze()
    PAUSES.refreezes += 1
    PAUSES.frozen = gc.get_freeze_count()
    frozen = PAUSES.frozen - before
    logger.debug(
        "froze %d more objects after %s in %.0f ms", frozen, reason, (time.perf_counter() - started) * 1000
    )
    return frozen
