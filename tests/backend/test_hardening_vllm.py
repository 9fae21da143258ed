"""The vLLM engine's child server: it needs our generated key, and sleep/wake failures never strand requests.

No GPU or vLLM here: a stand-in for vLLM's HTTP server on 127.0.0.1 checks the bearer key on the
``/v1`` routes as ``vllm serve --api-key`` does and can be told to fail or stall ``/sleep`` and
``/wake_up``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from art_adapters_backend.errors import EngineUnavailableError
from art_adapters_backend.serving.engine.base import GenerationRequest, SamplingParams
from art_adapters_backend.serving.engine.vllm_engine import VllmEngine, vllm_environment

from tests.helpers.json_server import QuietHandler, serve_in_thread

KEY = "generated-key"


class StandIn:
    """vLLM's routes used by the engine; ``fail`` maps a path to how many times it answers 500."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.fail: dict[str, int] = {}
        self.stall_s: dict[str, float] = {}
        stand_in = self

        class Handler(QuietHandler):
            def do_POST(self) -> None:
                path = self.path.split("?")[0]
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                stand_in.calls.append(path)
                time.sleep(stand_in.stall_s.get(path, 0.0))
                status, body = 200, {}
                if path.startswith("/v1/") and self.headers.get("Authorization") != f"Bearer {KEY}":
                    status, body = 401, {"error": "Unauthorized"}
                elif stand_in.fail.get(path, 0) > 0:
                    stand_in.fail[path] -= 1
                    status, body = 500, {"error": {"message": "boom"}}
                elif path == "/v1/completions":
                    body = {"choices": [{"index": 0, "finish_reason": "length", "token_ids": [5],
                                         "logprobs": {"token_logprobs": [-0.5]}}]}  # fmt: skip
                self.send_json(status, body)  # a stalled answer's client may have given up: no error

        self.server = serve_in_thread(Handler, "vllm-stand-in")
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


class Tokenizer:
    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return "x" * len(ids)


@pytest.fixture
def stand_in() -> Iterator[StandIn]:
    server = StandIn()
    yield server
    server.server.shutdown()
    server.server.server_close()


def _engine(url: str, api_key: str | None = KEY, **kwargs: Any) -> VllmEngine:
    return VllmEngine(Path("."), Tokenizer(), None, url, 4096, {0}, api_key=api_key, **kwargs)  # type: ignore[arg-type]


def _request() -> GenerationRequest:
    return GenerationRequest([1, 2, 3], SamplingParams(max_tokens=1))


def test_the_child_gets_a_key_by_environment() -> None:
    env = vllm_environment("k1", {"PATH": "/bin", "VLLM_API_KEY": "old"})
    assert env["VLLM_API_KEY"] == "k1" and env["PATH"] == "/bin"
    assert env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True" and env["VLLM_SERVER_DEV_MODE"] == "1"


async def test_requests_carry_the_key(stand_in: StandIn) -> None:
    engine = _engine(stand_in.url)
    try:
        await engine.load_adapter("m@1", Path("/ckpt/1"))
        (seq,) = await engine.generate(_request())
        assert seq.token_ids == [5]
    finally:
        await engine.close()
    keyless = _engine(stand_in.url, api_key=None)
    try:
        with pytest.raises(RuntimeError, match="401"):
            await keyless.load_adapter("m@1", Path("/ckpt/1"))
    finally:
        await keyless.close()


async def test_a_failed_sleep_wakes_the_engine_and_releases_requests(stand_in: StandIn) -> None:
    stand_in.fail["/sleep"] = 1
    engine = _engine(stand_in.url)
    try:
        with pytest.raises(RuntimeError, match="500"):
            async with engine.paused():
                pytest.fail("the step must not run without the GPU memory")
        async with asyncio.timeout(10):  # before: waited forever
            (seq,) = await engine.generate(_request())
        assert seq.token_ids == [5] and stand_in.calls[:2] == ["/sleep", "/wake_up"]
    finally:
        await engine.close()


async def test_a_stalled_sleep_times_out(stand_in: StandIn) -> None:
    stand_in.stall_s["/sleep"] = 3.0
    engine = _engine(stand_in.url, sleep_timeout_s=0.3)
    try:
        with pytest.raises(httpx.TimeoutException):
            async with asyncio.timeout(10), engine.paused():
                pass
        async with asyncio.timeout(10):
            await engine.generate(_request())
        assert "/wake_up" in stand_in.calls
    finally:
        await engine.close()


async def test_an_engine_that_cannot_wake_answers_503_and_recovers(stand_in: StandIn) -> None:
    stand_in.fail["/wake_up"] = 3  # two attempts after the step, one more on the first request
    engine = _engine(stand_in.url, wake_attempts=2)
    try:
        waiting = None
        async with asyncio.timeout(10), engine.paused():
            waiting = asyncio.create_task(engine.generate(_request()))  # arrives during the step
            await asyncio.sleep(0.05)
            assert not waiting.done()
        with pytest.raises(EngineUnavailableError) as raised:
            async with asyncio.timeout(10):
                await waiting
        assert raised.value.status_code == 503 and raised.value.code == "engine_unavailable"
        async with asyncio.timeout(10):  # the next request tries again, and vLLM wakes
            (seq,) = await engine.generate(_request())
        assert seq.token_ids == [5] and stand_in.calls.count("/wake_up") == 4
    finally:
        await engine.close()
