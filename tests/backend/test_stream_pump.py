"""``pump_events``: the one loop behind the chat and Responses streams, and how it ends a stream on an error."""

from __future__ import annotations

from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import pytest
from art_adapters_backend.errors import APIError, EngineUnavailableError
from art_adapters_backend.http.streaming import pump_events


class _Source:
    """Names each event after what made it."""

    def start(self) -> list[str]:
        return ["start"]

    def on_delta(self, delta: Any) -> list[str]:
        return [f"delta {delta}"]

    async def finish(self) -> list[str]:
        return ["finish"]

    def error(self, exc: APIError) -> str:
        return f"error {exc.status_code} {exc}"

    def failure(self, message: str) -> str:
        return f"failure {message}"


def _state(deltas: list[Any], fail: BaseException | None = None) -> Any:
    async def stream(generation: Any) -> AsyncIterator[Any]:
        for delta in deltas:
            yield delta
        if fail is not None:
            raise fail

    return SimpleNamespace(engine=SimpleNamespace(stream=stream))


async def _events(state: Any) -> tuple[list[str], list[str]]:
    closed: list[str] = []
    prepared: Any = SimpleNamespace(generation=None, completion_id="chatcmpl-1")
    events = await pump_events(_Source(), prepared, state, lambda: closed.append("closed"), "completion")
    return [event async for event in events], closed


async def test_events_in_order_then_on_close() -> None:
    events, closed = await _events(_state([1, 2]))
    assert events == ["start", "delta 1", "delta 2", "finish"]
    assert closed == ["closed"]


async def test_no_delta_still_starts_and_finishes() -> None:
    assert (await _events(_state([]))) == (["start", "finish"], ["closed"])


async def test_api_error_is_the_last_event() -> None:
    events, closed = await _events(_state([1], EngineUnavailableError("engine asleep")))
    assert events == ["start", "delta 1", "error 503 engine asleep"]
    assert closed == ["closed"]


async def test_unexpected_error_is_logged_and_reported(caplog: pytest.LogCaptureFixture) -> None:
    events, _ = await _events(_state([1], KeyError("x")))
    assert events[-1] == (
        "failure the completion failed while streaming (KeyError); the server logged the details"
    )
    assert "streamed completion chatcmpl-1 failed" in caplog.text
