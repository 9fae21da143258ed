"""What a burst of requests freed goes back to the OS once the server is quiet, once, never mid-request.

After a 64-client soak the server stayed 12% above its starting memory (glibc keeps freed heap pages);
a return once quiet brought it back to 1%. Over HTTP on the real app (fake engine: this is about the
server, not the model), counted in ``/art/stats`` "memory".
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from tests.helpers.fake_backend import FakeBackendServer

MODEL = "smollm2-135m-instruct"
QUIET_S = 1.0


def _returns(http: httpx.Client) -> int:
    return int(http.get("/art/stats").json()["memory"]["returns"])


def _returns_after_quiet(http: httpx.Client, at_least: int, deadline_s: float = 20.0) -> int:
    """The return count once it reaches ``at_least`` (polled: a loaded machine runs the return's
    thread late), or what it is at the deadline. Polling ``/art/stats`` is not work."""
    deadline = time.monotonic() + deadline_s
    while (returns := _returns(http)) < at_least and time.monotonic() < deadline:
        time.sleep(0.1)
    return returns


def _burst(http: httpx.Client, count: int = 4) -> None:
    for _ in range(count):
        body = {"model": MODEL, "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 4}
        assert http.post("/v1/chat/completions", json=body).status_code == 200


def test_a_burst_is_followed_by_one_return_once_quiet(tmp_path: Path) -> None:
    with FakeBackendServer(tmp_path / "run", quiet_memory_return_s=QUIET_S) as server, \
            httpx.Client(base_url=server.url, timeout=60) as http:  # fmt: skip
        before = _returns(http)
        _burst(http)
        assert _returns(http) == before  # not quiet yet (a stats read is not work)
        time.sleep(QUIET_S)
        assert _returns_after_quiet(http, before + 1) == before + 1  # one for the burst, not one per request
        time.sleep(QUIET_S + 0.5)
        assert _returns(http) == before + 1  # idle, probed: nothing more to return


def _slow_body(seconds: float, done: threading.Event) -> Iterator[bytes]:
    """A chat request's body sent over ``seconds``: the request is in progress all that time."""
    yield b'{"model": "' + MODEL.encode() + b'", "messages": [{"role": "user", "content": "'
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.1)
        yield b"hi "
    yield b'"}], "max_tokens": 2}'
    done.set()


def test_no_return_while_a_request_is_in_progress(tmp_path: Path) -> None:
    with FakeBackendServer(tmp_path / "run", quiet_memory_return_s=QUIET_S) as server, \
            httpx.Client(base_url=server.url, timeout=60) as http:  # fmt: skip
        before = _returns(http)
        _burst(http)
        sent = threading.Event()
        answers: list[int] = []
        slow = threading.Thread(target=lambda: answers.append(httpx.post(
            f"{server.url}/v1/chat/completions", content=_slow_body(3 * QUIET_S, sent),
            headers={"content-type": "application/json"}, timeout=60,
        ).status_code))  # fmt: skip
        slow.start()
        time.sleep(2 * QUIET_S)  # the burst's quiet time has passed, the slow request still runs
        assert not sent.is_set() and _returns(http) == before
        slow.join(30)
        assert answers == [200]
        assert _returns_after_quiet(http, before + 1) == before + 1


def test_zero_turns_it_off(tmp_path: Path) -> None:
    with FakeBackendServer(tmp_path / "run", quiet_memory_return_s=0) as server, \
            httpx.Client(base_url=server.url, timeout=60) as http:  # fmt: skip
        before = _returns(http)
        _burst(http)
        time.sleep(QUIET_S + 1.0)
        assert _returns(http) == before
