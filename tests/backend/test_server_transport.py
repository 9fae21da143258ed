"""The served socket: responses go out as soon as they are written, not after the client's delayed ACK.

Starlette writes a response as two parts (headers, then body). With Nagle's algorithm on, the body
waits until the client acknowledges the headers, and Linux delays that ACK by 40 ms: every request a
client sent right after the previous one's answer took 44 ms (a ``/health`` that answers in 2 ms,
a one-token completion that takes ~12 ms). asyncio turns Nagle off (``TCP_NODELAY``) only on
connections whose listening socket was created as ``IPPROTO_TCP``; ``serve`` binds its own socket,
so it must say so. Measured through ``serve``'s real command line and socket (the fake engine: the
subject is the transport, not the model).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.helpers.fake_serve import FakeLocalBackend

MODEL = "smollm2-135m-instruct"


def _back_to_back(send: Callable[[], httpx.Response], rounds: int = 25) -> float:
    """Median seconds of *rounds* requests, each sent as soon as the previous answer arrived."""
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        response = send()
        times.append(time.perf_counter() - started)
        assert response.status_code == 200, response.text
    return statistics.median(times)


@pytest.mark.slow
async def test_back_to_back_requests_do_not_wait_for_a_delayed_ack(tmp_path: Path) -> None:
    async with FakeLocalBackend(run_dir=tmp_path / "run") as backend:
        with httpx.Client(base_url=backend.base_url, timeout=30) as http:  # one kept-alive connection
            http.get("/health")
            health = _back_to_back(lambda: http.get("/health"))
            chat = _back_to_back(lambda: http.post("/v1/chat/completions", json={
                "model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}))  # fmt: skip
    # with Nagle on, each is at least the 40 ms delayed-ACK timer; without, a few milliseconds (the
    # median of 25 under the suite's load stays far below 40)
    assert health < 0.025, f"/health median {health * 1e3:.1f} ms back to back"
    assert chat < 0.025, f"one-token completion (fake engine) median {chat * 1e3:.1f} ms back to back"
