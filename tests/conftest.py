"""Fixtures shared by every test folder: ONE real embedded backend for the whole session.

Tests that need a server of their own (restart, kill, API key) start their own LocalBackend.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from art_adapters import LocalBackend


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
