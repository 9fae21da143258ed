"""Run directories, logs and caches hold prompts: they are created private, whatever the umask."""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from art_adapters_backend.serving.registry import Registry

from art_adapters.files import open_private, private_dir
from art_adapters.ruler._answer import JudgeScore
from art_adapters.ruler._cache import RulerCache

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX modes")


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def open_umask() -> Iterator[None]:
    """The most permissive umask: nothing we create may rely on the user's umask."""
    previous = os.umask(0)
    try:
        yield
    finally:
        os.umask(previous)


def test_private_dir_and_file_ignore_the_umask(tmp_path: Path, open_umask: None) -> None:
    folder = private_dir(tmp_path / "a" / "b")
    assert _mode(folder) == 0o700 and _mode(tmp_path / "a") == 0o700
    (tmp_path / "old.log").write_text("x")
    os.chmod(tmp_path / "old.log", 0o644)
    for name in ("new.log", "old.log"):
        os.close(open_private(tmp_path / name))
        assert _mode(tmp_path / name) == 0o600


def test_an_existing_open_folder_is_left_alone_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    os.chmod(shared, 0o755)
    with caplog.at_level(logging.WARNING):
        private_dir(shared)
    assert _mode(shared) == 0o755 and "chmod 700" in caplog.text


def test_the_backend_run_dir_is_private(tmp_path: Path, open_umask: None) -> None:
    registry = Registry(tmp_path / "run", "base")
    registry.register("agent", "p", "base")
    assert _mode(tmp_path / "run") == 0o700


def test_the_ruler_cache_is_private(tmp_path: Path, open_umask: None) -> None:
    cache = RulerCache(tmp_path / "ruler")
    score = JudgeScore(trajectory_id="t1", explanation="ok", score=0.5)
    cache.put("ab" * 32, "judge", {"t1": score})
    assert _mode(tmp_path / "ruler") == 0o700
    assert cache.get("ab" * 32, ["t1"]) is not None


def test_the_server_process_writes_private_files(tmp_path: Path) -> None:
    """run_server sets the umask 077 first: whatever the server writes (records, groups, checkpoints)."""
    code = (
        "import os, sys\n"
        "from art_adapters_backend import serve\n"
        "os.umask(0)\n"
        "serve.asyncio.run = lambda coro: (coro.close(), open(sys.argv[1], 'w').write('x'))\n"
        "serve.run_server(serve.ServeConfig(run_dir=sys.argv[2]))\n"
    )
    written = tmp_path / "written.txt"
    subprocess.run([sys.executable, "-c", code, str(written), str(tmp_path / "run")], check=True, timeout=120)
    assert _mode(written) == 0o600, oct(_mode(written))
