"""Real ``TorchEngine``s in tests: loaded, started, then closed with torch's thread count restored.

The callers pass ``TorchEngine.load`` themselves, so the slow-marker check still sees it in the test file.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import torch
from art_adapters_backend.serving.engine.torch_engine import TorchEngine

__all__ = ["started_engines"]


@asynccontextmanager
async def started_engines(*loads: Callable[[], TorchEngine]) -> AsyncIterator[list[TorchEngine]]:
    """Each ``load()`` run in a thread and started, in order; after: closed, and torch's intra-op
    thread count (which loading with ``num_threads`` sets) put back as it was."""
    threads = torch.get_num_threads()
    engines = [await asyncio.to_thread(load) for load in loads]
    for engine in engines:
        await engine.start()
    try:
        yield engines
    finally:
        for engine in engines:
            await engine.close()
        torch.set_num_threads(threads)
