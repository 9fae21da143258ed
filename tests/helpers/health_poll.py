"""Run work against a backend while polling its ``/health``, to show the server stays responsive."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import Protocol, TypeVar

import httpx

T = TypeVar("T")


class _Served(Protocol):
    base_url: str


async def while_polling_health(backend: _Served, work: Awaitable[T]) -> tuple[T, float, float]:
    """Run ``work`` while polling ``/health`` (each answer must be 200).

    Returns ``(its result, its seconds, the slowest /health in seconds)``.
    """
    task = asyncio.ensure_future(work)
    worst = 0.0
    started = time.perf_counter()
    async with httpx.AsyncClient(base_url=backend.base_url, timeout=120) as http:
        while not task.done():
            sent = time.perf_counter()
            assert (await http.get("/health")).status_code == 200
            worst = max(worst, time.perf_counter() - sent)
            await asyncio.sleep(0.05)
    result = await task
    return result, time.perf_counter() - started, worst


__all__ = ["while_polling_health"]
