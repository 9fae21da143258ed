"""The embedded backend never outlives the process that started it, however that process ends."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals and /proc")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    with contextlib.suppress(OSError):
        return stat.read_text().rpartition(")")[2].split()[0] != "Z"  # a zombie has exited
    return True


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.1)
    return False


def _start_parent(script: str, *args: str) -> tuple[subprocess.Popen[str], int]:
    """Run ``script`` as a parent process; it prints its child's pid on its first stdout line."""
    parent = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    line = parent.stdout.readline() if parent.stdout else ""
    if not line.strip().isdigit():
        parent.kill()
        _, err = parent.communicate(timeout=30)
        pytest.fail(f"the parent did not start its child: {line!r}\n{err[-3000:]}")
    return parent, int(line)


PARENT_WITH_LOCAL_BACKEND = """
    import asyncio, logging, sys
    from art_adapters import LocalBackend

    logging.basicConfig(level=logging.INFO, stream=sys.stderr)

    async def main():
        backend = LocalBackend(run_dir=sys.argv[1], api_key="s3cret-key-123", startup_timeout=240)
        await backend.start()
        import httpx  # the key reached the child (by its environment): it is required, and ours works
        assert httpx.get(backend.base_url + "/art/models").status_code == 401
        await backend.request("GET", "/art/models")
        print(backend.process.pid, flush=True)
        await asyncio.sleep(3600)

    asyncio.run(main())
"""


def test_sigkill_of_the_parent_stops_the_local_backend(tmp_path: Path) -> None:
    """SIGKILL gives the parent no chance to clean up: the child must notice on its own."""
    parent, child = _start_parent(PARENT_WITH_LOCAL_BACKEND, str(tmp_path / "run"))
    try:
        cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=30)
        assert _wait_gone(child, timeout=20), "the backend kept running after its parent was killed"
        assert "parent process" in (tmp_path / "run" / "server.log").read_text()
        # Created private whatever the umask (issue 12 item 10): the run dir holds every prompt.
        assert (tmp_path / "run").stat().st_mode & 0o777 == 0o700
        assert (tmp_path / "run" / "server.log").stat().st_mode & 0o777 == 0o600
        # The API key is in neither the child's command line (anyone's `ps`) nor the parent's INFO log.
        _, err = parent.communicate(timeout=30)
        assert b"s3cret-key-123" not in cmdline and "s3cret-key-123" not in err
    finally:
        if _alive(child):
            os.kill(child, signal.SIGKILL)
        if parent.poll() is None:
            parent.kill()


PARENT_WITH_WATCHER_CHILD = """
    import subprocess, sys, time

    child = subprocess.Popen([sys.executable, "-c", sys.argv[1]], stdin=subprocess.DEVNULL)
    print(child.pid, flush=True)
    time.sleep(3600)
"""

WATCHER_CHILD = """
import os, time
from art_adapters_backend.parent_watch import stdin_is_pipe, watch_parent

assert not stdin_is_pipe()
watch_parent(os.getppid(), interval_s=0.1, on_gone=lambda reason: os._exit(0))
time.sleep(3600)
"""


def test_without_a_pipe_the_child_polls_its_parent(tmp_path: Path) -> None:
    """The portable fallback: no pipe to read (stdin is /dev/null), the re-parenting is noticed."""
    parent, child = _start_parent(PARENT_WITH_WATCHER_CHILD, WATCHER_CHILD)
    try:
        time.sleep(0.5)
        assert _alive(child)
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=30)
        assert _wait_gone(child, timeout=10)
    finally:
        if _alive(child):
            os.kill(child, signal.SIGKILL)
        if parent.poll() is None:
            parent.kill()
