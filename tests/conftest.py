"""Fixtures shared by every test folder: ONE real embedded backend, and one fake-engine backend.

``local_backend`` runs the bundled model: for tests whose subject is the model's output (engine,
template parity, families, training, learning, export, demo, end to end). ``fake_backend`` serves the
same app (routes, token records, registry, checkpoints) over a deterministic fake engine and trainer
(:mod:`tests.helpers.fake_backend`): for route, client and loop tests that do not need real weights.
Tests that need a server of their own (restart, kill, API key) start their own.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from art_adapters import LocalBackend
from tests.helpers.fake_backend import FakeBackend, FakeBackendServer


@pytest.fixture(scope="session")
async def local_backend(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[LocalBackend]:
    """The real backend with the bundled model, started as a subprocess on 127.0.0.1."""
    run_dir: Path = tmp_path_factory.mktemp("shared-backend")
    backend = LocalBackend(run_dir=run_dir)
    await backend.start()
    try:
        yield backend
    finally:
        await backend.close()


@pytest.fixture(scope="session")
async def fake_backend(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[FakeBackend]:
    """The real backend app over the fake engine and trainer, on a 127.0.0.1 port (a client to it)."""
    server = FakeBackendServer(tmp_path_factory.mktemp("fake-backend"))
    await asyncio.to_thread(server.start)
    backend = server.client()
    try:
        yield backend
    finally:
        await backend.aclose()
        await asyncio.to_thread(server.stop)
