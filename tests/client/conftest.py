"""Fixtures for client tests: one real embedded backend (LocalBackend) for the session."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from art_adapters import LocalBackend


@pytest.fixture(scope="session")
async def local_backend(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[LocalBackend]:
    """The real backend with the bundled model, started as a subprocess on 127.0.0.1."""
    run_dir: Path = tmp_path_factory.mktemp("client-backend")
    backend = LocalBackend(run_dir=run_dir)
    await backend.start()
    try:
        yield backend
    finally:
        await backend.close()
