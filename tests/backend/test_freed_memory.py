"""A training step's freed memory goes back to the OS (glibc's ``malloc_trim``), counted in ``/art/stats``.

Without it glibc keeps freed heap pages mapped: a backend that peaked at 9.9 GB in a training step still
held 9.9 GB ten minutes later, and CI's out-of-memory killer stopped one beside other tests' processes.
"""

from __future__ import annotations

import ctypes.util
import sys

import pytest
from art_adapters_backend.freed_memory import FreedMemory, return_freed_memory

from art_adapters import LocalBackend
from tests.helpers.tiny_step import train_tiny_step

GLIBC = sys.platform.startswith("linux") and ctypes.util.find_library("c") is not None


@pytest.mark.skipif(not GLIBC, reason="malloc_trim is glibc's; elsewhere return_freed_memory is a no-op")
def test_freed_heap_pages_go_back_to_the_os() -> None:
    chunks = [
        bytearray(b"x" * 60_000) for _ in range(3_000)
    ]  # 180 MB of heap (each under the mmap threshold)
    pin = bytearray(b"y" * 60_000)  # allocated last: the freed chunks are not the top of the heap
    del chunks[::2]  # freed, but every other chunk still in use: glibc's free() cannot trim them itself
    held = FreedMemory().stats()["rss_bytes"]
    assert return_freed_memory() is True
    after = FreedMemory().stats()["rss_bytes"]
    assert held - after > 50_000_000, (held, after)  # ~90 MB freed; most of its pages go back
    assert len(pin) == 60_000 and len(chunks) == 1_500


@pytest.mark.slow
async def test_the_server_returns_a_training_steps_memory_and_says_so(local_backend: LocalBackend) -> None:
    before = (await train_tiny_step(local_backend, "freed", "memory"))["memory"]
    after = (await local_backend.request("GET", "/art/stats"))["memory"]
    assert after["returns"] == before["returns"] + 1, (before, after)
    assert after["returns_that_released"] >= before["returns_that_released"] + int(GLIBC), (before, after)
    assert after["rss_bytes"] is None or after["rss_bytes"] > 100_000_000  # the served model is resident
