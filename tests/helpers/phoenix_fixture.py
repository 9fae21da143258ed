"""Test helper: the body of a module's ``phoenix`` fixture, a started :class:`PhoenixServer` or a skip::

    @pytest.fixture(scope="module")
    def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PhoenixServer]:
        yield from started_phoenix(tmp_path_factory)
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.helpers.phoenix_server import PhoenixServer, ensure_venv


def started_phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PhoenixServer]:
    """Yield a healthy Phoenix in a fresh temporary folder and stop it afterwards; skip when the
    Phoenix venv cannot be had (``ART_ADAPTERS_PHOENIX=0``, or its build failed)."""
    python, note = ensure_venv()
    if python is None:
        pytest.skip(f"Phoenix unavailable: {note}")
    server = PhoenixServer(python, tmp_path_factory.mktemp("phoenix")).start()
    try:
        yield server
    finally:
        server.stop()
