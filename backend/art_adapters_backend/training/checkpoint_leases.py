"""Leases on checkpoint folders that are being read, so deleting one waits for its readers.

An export reads a checkpoint's files for seconds to minutes, in a thread; retention or
``checkpoints/delete`` removing the same step meanwhile would make it fail half-way with a missing file.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator

__all__ = ["CheckpointLeases"]


class CheckpointLeases:
    """Counts readers per ``(model, step)``; deleters wait until a step has none.

    Readers hold a lease while they read (:meth:`reading`); :meth:`wait_released` lets a
    deleter wait for them. The deleter takes the step out of the registry first, so no new
    reader starts on a step that is going away.
    """

    def __init__(self) -> None:
        self._readers: Counter[tuple[str, int]] = Counter()
        self._changed = asyncio.Condition()

    @contextlib.asynccontextmanager
    async def reading(self, name: str, step: int) -> AsyncIterator[None]:
        """Hold a lease on ``name@step`` for the duration of the ``async with`` block."""
        async with self._changed:
            self._readers[(name, step)] += 1
        try:
            yield
        finally:
            async with self._changed:
                self._readers[(name, step)] -= 1
                if self._readers[(name, step)] <= 0:
                    del self._readers[(name, step)]
                self._changed.notify_all()

    def readers(self, name: str, step: int) -> int:
        """How many leases ``name@step`` has now."""
        return self._readers.get((name, step), 0)

    async def wait_released(self, name: str, step: int) -> None:
        """Return once ``name@step`` has no reader."""
        async with self._changed:
            await self._changed.wait_for(lambda: self.readers(name, step) == 0)
