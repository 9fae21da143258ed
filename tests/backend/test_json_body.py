"""Request bodies read a value at a time (``http/json_body.py``): same results and errors as one parse,
the tool count refused once counted, and the GIL free between elements for the event loop."""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
from functools import partial
from itertools import pairwise
from typing import Any

import pytest
from art_adapters_backend.errors import BadRequestError, validation_message
from art_adapters_backend.gc_pauses import SWITCH_INTERVAL_S
from art_adapters_backend.http.json_body import read_json_body
from art_adapters_backend.serving.chat import too_many_tools
from art_adapters_backend.serving.openai_types import ChatCompletionRequest
from fastapi.exceptions import RequestValidationError

RULES = {"messages": None, "tools": (128, partial(too_many_tools, limit=128, read_no_further=True))}
HI = [{"role": "user", "content": "Say hi."}]


def _tools(count: int) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": f"t{i}"}} for i in range(count)]


def _read(body: Any) -> ChatCompletionRequest:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return read_json_body(raw, ChatCompletionRequest, RULES)


def test_a_body_read_element_by_element_equals_one_parse() -> None:
    body = {"model": "m", "messages": HI * 3, "tools": _tools(5), "max_tokens": 3, "stop": ["\n"], "n": 2}
    assert _read(body) == ChatCompletionRequest.model_validate(body)
    spaced = json.dumps(body, indent=2).encode()  # white space anywhere between values
    assert _read(spaced) == ChatCompletionRequest.model_validate(body)


def test_more_tools_than_the_cap_are_refused_at_the_first_one_past_it_before_any_is_validated() -> None:
    with pytest.raises(BadRequestError) as caught:
        _read({"model": "m", "messages": HI, "tools": [*_tools(200), "not a tool"] + _tools(99_799)})
    assert caught.value.param == "tools"
    assert (
        str(caught.value)
        == "the request offers more than 128 tools; this server accepts at most 128 (serve --max-tools)"
    )


def test_nothing_after_the_first_tool_past_the_cap_is_decoded() -> None:
    """The read ends at the 129th tool: a body broken right after it, or with 100,000 more, gets the
    same 400 (decoding 30,000 tools past the cap held /health up in the soak)."""
    head = json.dumps({"model": "m", "messages": HI, "tools": _tools(129)})[:-2]  # open after the 129th
    for tail in (', {"type": broken', ", " + json.dumps(_tools(100_000))[1:-1] + "]}"):
        with pytest.raises(BadRequestError, match="offers more than 128 tools"):
            _read((head + tail).encode())
    assert len(_read({"model": "m", "messages": HI, "tools": _tools(128)}).tools or []) == 128


def _error(raw: bytes) -> str:
    """The message the app answers ``raw`` with: a ``BadRequestError``'s, or a validation error's."""
    try:
        _read(raw)
    except BadRequestError as exc:
        assert exc.code == "invalid_json", exc
        return str(exc)
    except RequestValidationError as exc:
        return validation_message(exc.errors())[0]
    raise AssertionError(f"{raw!r} was accepted")


@pytest.mark.parametrize(
    ("raw", "start"),
    [
        (b'{"model": "x", "messages": [', "invalid JSON body: Expecting value"),
        (b'{"model": "x"} {}', "invalid JSON body: Extra data (at character 15)"),
        (b'{"model": "x", 5: 1}', "invalid JSON body: Expecting property name enclosed in double quotes"),
        (b'{"model" "x"}', "invalid JSON body: Expecting ':'"),
        (b'{"model": "\xff"}', "invalid JSON body: not UTF-8"),
        (b"[1, 2]", "invalid request: the body must be a JSON object"),
        (b"", "invalid request: the body must be a JSON object"),
        (b'{"model": "x"}', "invalid request: messages: field required"),
    ],
)
def test_a_malformed_body_is_the_usual_400(raw: bytes, start: str) -> None:
    assert _error(raw).startswith(start), _error(raw)


def test_the_event_loop_thread_gets_the_gil_while_thirty_thousand_messages_are_read() -> None:
    # Messages have no bound, so a long list is read whole (tools past --max-tools end the read at the
    # first one past it; this body's 200 tools do, after the messages, before anything is validated).
    # One parse of this body holds the GIL throughout (40-80 ms here): a thread that wakes every
    # millisecond runs no Python code meanwhile, except perhaps once at each edge of the call. Read
    # element by element, the GIL is free between elements and the thread runs about once per sleep
    # plus switch interval (the server's 1 ms, set here as the server sets it). Counting the thread's
    # runs inside the call, not timing its waits, is the property: a loaded machine stretches the
    # waits of both (a timed version failed in a full suite run), but cannot let a thread into one parse.
    raw = json.dumps({"model": "m", "messages": HI * 30_000, "tools": _tools(200)}).encode()
    ticks: list[float] = []
    done = threading.Event()

    def ticker() -> None:
        while not done.is_set():
            time.sleep(0.001)
            ticks.append(time.perf_counter())

    def one_parse(body: bytes) -> None:
        json.loads(body)

    def runs_inside(work: Any) -> tuple[int, float]:
        """How often the ticker thread ran Python code while ``work`` read the body, and the longest
        stretch of the read it did not run, as a fraction of the read."""
        ticks.clear()
        done.clear()
        thread = threading.Thread(target=ticker, daemon=True)
        thread.start()
        try:
            time.sleep(0.01)
            started = time.perf_counter()
            with pytest.raises(BadRequestError) if work is _read else contextlib.nullcontext():
                work(raw)
            ended = time.perf_counter()
        finally:
            done.set()
            thread.join()
        inside = [tick for tick in ticks if started < tick < ended]
        edges = [started, *inside, ended]
        return len(inside), max(b - a for a, b in pairwise(edges)) / (ended - started)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    try:
        rounds = [(runs_inside(one_parse), runs_inside(_read)) for _ in range(3)]
    finally:
        sys.setswitchinterval(interval)
    print(f"ticker runs inside (count, longest stretch without): one parse and element by element {rounds}")
    # the premise: one parse shuts the thread out for most of it (it may run at either edge)
    assert all(whole_gap > 0.5 for (_, whole_gap), _ in rounds), rounds
    # read element by element, the thread runs throughout: about 20-40 times on an idle 2-core machine
    assert max(count for _, (count, _) in rounds) >= 10, rounds
