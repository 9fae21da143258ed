"""A training step's freed memory goes back to the OS (glibc's ``malloc_trim``), counted in ``/art/stats``.

Without it glibc keeps freed heap pages mapped: a backend that peaked at 9.9 GB in a training step still
held 9.9 GB ten minutes later, and CI's out-of-memory killer stopped one beside other tests' processes.
"""

from __future__ import annotations

import ctypes.util
import sys

import httpx
import pytest
from art_adapters_backend.freed_memory import FreedMemory, return_freed_memory

from art_adapters import LocalBackend, TrainableModel, TrainConfig, Trajectory, TrajectoryGroup

GLIBC = sys.platform.startswith("linux") and ctypes.util.find_library("c") is not None


@pytest.mark.skipif(not GLIBC, reason="malloc_trim is glibc's; elsewhere return_freed_memory is a no-op")
def test_freed_heap_pages_go_back_to_the_os() -> None:
    chunks = [bytearray(b"x" * 60_000) for _ in range(3_000)]  # 180 MB of heap (each under the mmap threshold)
    pin = bytearray(b"y" * 60_000)  # allocated last: the freed chunks are not the top of the heap
    del chunks[::2]  # freed, but every other chunk still in use: glibc's free() cannot trim them itself
    held = FreedMemory().stats()["rss_bytes"]
    assert return_freed_memory() is True
    after = FreedMemory().stats()["rss_bytes"]
    assert held - after > 50_000_000, (held, after)  # ~90 MB freed; most of its pages go back
    assert len(pin) == 60_000 and len(chunks) == 1_500


@pytest.mark.slow
async def test_the_server_returns_a_training_steps_memory_and_says_so(local_backend: LocalBackend) -> None:
    model = TrainableModel(name="freed", project="memory", base_model="smollm2-135m-instruct")
    await model.register(local_backend)
    async with httpx.AsyncClient(base_url=local_backend.base_url, timeout=60) as http:
        before = (await http.get("/art/stats")).json()["memory"]
    group = TrajectoryGroup(trajectories=[
        Trajectory(messages=[{"role": "user", "content": "Say yes."}, {"role": "assistant", "content": answer}],
                   reward=reward)
        for answer, reward in (("Yes.", 1.0), ("No.", 0.0))
    ])  # fmt: skip
    result = await model.train([group], config=TrainConfig(learning_rate=1e-5, lora_rank=4, lora_alpha=8))
    assert result.trained, result
    async with httpx.AsyncClient(base_url=local_backend.base_url, timeout=60) as http:
        after = (await http.get("/art/stats")).json()["memory"]
    assert after["returns"] == before["returns"] + 1, (before, after)
    assert after["returns_that_released"] >= before["returns_that_released"] + int(GLIBC), (before, after)
    assert after["rss_bytes"] is None or after["rss_bytes"] > 100_000_000  # the served model is resident
