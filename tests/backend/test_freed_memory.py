"""Freed memory goes back to the OS: after a training step (its activations) and after large request bodies.

Without it glibc keeps freed heap pages mapped: a backend that peaked at 9.9 GB in a training step still
held 9.9 GB ten minutes later (and CI's out-of-memory killer stopped one), and the soak's hostile bodies
left the server 16% larger at the end of the attack.
"""

from __future__ import annotations

import asyncio
import ctypes.util
import sys

import httpx
import pytest
from art_adapters_backend.freed_memory import FREED_MEMORY, LARGE_BODY_BYTES, FreedMemory, return_freed_memory

from art_adapters import LocalBackend

GLIBC = sys.platform.startswith("linux") and ctypes.util.find_library("c") is not None


def _rss() -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS:"))


@pytest.mark.skipif(not GLIBC, reason="malloc_trim is glibc's; elsewhere return_freed_memory is a no-op")
def test_freed_heap_pages_go_back_to_the_os() -> None:
    chunks = [bytearray(b"x" * 60_000) for _ in range(3_000)]  # 180 MB of heap (each under the mmap threshold)
    pin = bytearray(b"y" * 60_000)  # allocated last: the freed chunks are not the top of the heap
    del chunks[::2]  # freed, but every other chunk still in use: glibc's free() cannot trim them itself
    held = _rss()
    assert return_freed_memory() is True
    after = _rss()
    assert held - after > 50_000_000, (held, after)  # ~90 MB freed; most of its pages go back
    assert len(pin) == 60_000 and len(chunks) == 1_500


async def test_bursts_of_large_bodies_are_followed_by_one_trailing_return() -> None:
    freed = FreedMemory(large_body_bytes=1_000, min_interval_s=0.2)
    freed.after_body(999)  # small: nothing
    await asyncio.sleep(0.05)
    assert freed.calls == 0
    for _ in range(5):  # a burst before the return starts: one return covers it
        freed.after_body(5_000)
    await asyncio.sleep(0.1)
    assert freed.calls == 1, freed.stats()
    freed.after_body(5_000)  # inside the interval: a trailing return once it has passed, not sooner
    await asyncio.sleep(0.02)
    assert freed.calls == 1
    await asyncio.sleep(0.4)
    assert freed.calls == 2, freed.stats()
    await asyncio.sleep(0.3)
    assert freed.calls == 2  # nothing new: no more returns
    assert freed.stats()["rss_bytes"] is None or freed.stats()["rss_bytes"] > 0


@pytest.mark.slow
async def test_the_server_returns_memory_after_a_large_body_and_says_so(local_backend: LocalBackend) -> None:
    content = "word " * (LARGE_BODY_BYTES // 4)  # a 1.25 MiB message for a model that does not exist
    async with httpx.AsyncClient(base_url=local_backend.base_url, timeout=60) as http:
        before = (await http.get("/art/stats")).json()["memory"]
        response = await http.post(
            "/v1/chat/completions", json={"model": "nobody", "messages": [{"role": "user", "content": content}]}
        )
        assert response.status_code == 404
        for _ in range(50):  # the return runs in a worker thread, at most once a second
            after = (await http.get("/art/stats")).json()["memory"]
            if after["returns"] > before["returns"]:
                break
            await asyncio.sleep(0.1)
    assert after["returns"] > before["returns"], (before, after)
    assert after["rss_bytes"] is None or after["rss_bytes"] > 100_000_000  # the served model is resident
    assert FREED_MEMORY.large_body_bytes == LARGE_BODY_BYTES
