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

#: The files that take minutes (``--durations`` of full runs, under load on 2 cores), longest first.
#: ``./dev test`` hands files to the workers in collection order (``--no-loadscope-reorder``), so
#: these start first and the workers end together, instead of one running a 6-minute file while
#: the other is done (xdist's default order puts the files with the most tests first). A scheduling
#: hint only: a file missing here is still run, after these.
LONGEST_FILES_FIRST = (
    "tests/demo/test_demo_learns.py",
    "tests/mcp/test_train_mcp_defaults.py",
    "tests/demo/test_demo_sft_learns.py",
    "tests/demo/test_demo_observed.py",
    "tests/training/test_learning.py",
    "tests/observe/test_import_phoenix_live.py",
    "tests/mcp/test_train_mcp.py",
    "tests/demo/test_demo.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Put the items of :data:`LONGEST_FILES_FIRST` first, in that order; the rest keep theirs."""
    rank = {path: number for number, path in enumerate(LONGEST_FILES_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


@pytest.fixture(scope="session")
async def local_backend(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[LocalBackend]:
    """The real backend with the bundled model, started as a subprocess on 127.0.0.1."""
    run_dir: Path = tmp_path_factory.mktemp("shared-backend")
    async with LocalBackend(run_dir=run_dir) as backend:
        yield backend


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
