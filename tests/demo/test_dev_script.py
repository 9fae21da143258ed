"""``./dev demo`` never waits on npm: only ``./dev test`` (and ``./dev setup``) install the Node MCP servers.

The real ``dev`` script runs in a copy of the project's root with stand-ins for the environment
(an installed ``.venv`` whose commands only record their calls) and for ``npm`` on ``PATH``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _recorder(path: Path, log: Path, then: str = "") -> None:
    path.write_text(f'#!/bin/sh\necho "$(basename "$0") $*" >> "{log}"\n{then}\n')
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


@pytest.fixture()
def project(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    """A copy of ``dev`` and ``pyproject.toml`` with a stand-in ``.venv`` already installed, and npm."""
    root = tmp_path / "project"
    (root / ".venv" / "bin").mkdir(parents=True)
    for name in ("dev", "pyproject.toml"):
        shutil.copy2(ROOT / name, root / name)
    log = tmp_path / "calls.log"
    for command in ("python", "art-adapters"):
        _recorder(root / ".venv" / "bin" / command, log)
    stamp = hashlib.sha1((root / "pyproject.toml").read_bytes() + (root / "dev").read_bytes()).hexdigest()[:12]
    (root / ".venv" / f".installed-{stamp}").touch()  # `cat pyproject.toml dev | sha1sum`: installed
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _recorder(bin_dir / "npm", log, then="mkdir -p .venv/node")  # where npm install --prefix writes
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    return root, log, env


def test_the_demo_does_not_install_the_node_mcp_servers(project: tuple[Path, Path, dict[str, str]]) -> None:
    root, log, env = project
    subprocess.run([str(root / "dev"), "demo", "--help"], env=env, check=True, timeout=60, capture_output=True)
    calls = log.read_text().splitlines()
    assert calls == ["art-adapters demo --help"], calls  # was: npm install ... first


def test_the_tests_install_the_node_mcp_servers(project: tuple[Path, Path, dict[str, str]]) -> None:
    root, log, env = project
    subprocess.run([str(root / "dev"), "test", "-k", "x"], env=env, check=True, timeout=60, capture_output=True)
    calls = log.read_text().splitlines()
    assert calls[0].startswith("npm install --prefix .venv/node") and calls[1].startswith("python -m pytest"), calls
