"""Adapter leases survive a failing eviction, and a missing checkpoint does not reveal the server's paths."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from art_adapters_backend.errors import CheckpointUnavailableError
from art_adapters_backend.serving.adapters import AdapterCache
from art_adapters_backend.serving.registry import ServedModel


class Engine:
    """Loads anything under an existing folder; ``unload_error`` makes every unload fail."""

    def __init__(self, unload_error: BaseException | None = None) -> None:
        self.unload_error = unload_error
        self.loaded: set[str] = set()

    def load_adapter(self, name: str, path: Path) -> None:
        if not path.is_dir():
            raise FileNotFoundError(f"[Errno 2] No such file or directory: '{path}/adapter_config.json'")
        self.loaded.add(name)

    async def unload_adapter(self, name: str) -> None:
        if self.unload_error is not None:
            raise self.unload_error
        self.loaded.discard(name)


def _served(tmp_path: Path, step: int, *, exists: bool = True) -> ServedModel:
    folder = tmp_path / "ckpt" / f"{step:06d}"
    if exists:
        folder.mkdir(parents=True, exist_ok=True)
    return ServedModel(f"agent@{step}", "agent", step, str(folder))


async def test_a_failing_eviction_neither_fails_the_request_nor_leaks_its_lease(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cache = AdapterCache(Engine(unload_error=RuntimeError("engine refused the unload")), max_loaded=1)
    await cache.preload(_served(tmp_path, 1))
    with caplog.at_level(logging.ERROR):
        key = await cache.acquire(_served(tmp_path, 2))  # over the limit: evicting agent@1 fails
    assert key == "agent@2" and "could not unload idle adapters" in caplog.text
    cache.release(key)
    await asyncio.sleep(0)  # the later shrink (fails again, logged)
    assert not +cache._leases


async def test_a_cancelled_eviction_gives_the_lease_back(tmp_path: Path) -> None:
    cache = AdapterCache(Engine(unload_error=asyncio.CancelledError()), max_loaded=1)
    await cache.preload(_served(tmp_path, 1))
    with pytest.raises(asyncio.CancelledError):
        await cache.acquire(_served(tmp_path, 2))
    assert not +cache._leases  # nobody holds the key, so nobody could release it


async def test_checkpoint_unavailable_hides_the_path_and_logs_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cache = AdapterCache(Engine(), max_loaded=2)
    served = _served(tmp_path, 3, exists=False)
    with caplog.at_level(logging.WARNING), pytest.raises(CheckpointUnavailableError) as raised:
        await cache.acquire(served)
    body = raised.value.body()["error"]
    assert body["code"] == "checkpoint_unavailable" and "agent@3" in body["message"]
    assert str(tmp_path) not in body["message"] and "/ckpt/" not in body["message"]
    assert str(tmp_path / "ckpt" / "000003") in caplog.text  # the operator still finds it
    assert not +cache._leases
