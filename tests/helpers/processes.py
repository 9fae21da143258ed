"""Subprocesses in tests: run a Python child to success, wait for a server to announce itself, stop one."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any


def run_python(
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 120,
    tail: int = 4000,
) -> subprocess.CompletedProcess[str]:
    """``python <args>`` with this interpreter, run to the end with its output captured (text).

    Asserts it exited 0, showing the last ``tail`` characters of its stderr otherwise.
    """
    result = subprocess.run(
        [sys.executable, *args],
        env=None if env is None else dict(env),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-tail:]
    return result


def wait_for_line(process: subprocess.Popen[str], stream: IO[str] | None, marker: str, what: str) -> str:
    """Read ``stream`` until a line holding ``marker`` (returned), within 30 s.

    Raises RuntimeError if ``process`` exits first and AssertionError if the time runs out,
    both with what was read, so a server that fails to start says why.
    """
    deadline = time.monotonic() + 30
    seen = ""
    while time.monotonic() < deadline:
        line = stream.readline() if stream is not None else ""
        if marker in line:
            return line
        if not line and process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}: {seen}")
        seen += line
    raise AssertionError(f"{what} did not announce itself within 30 s: {seen}")


def stop_process(process: subprocess.Popen[Any], grace_s: float = 10) -> None:
    """Terminate ``process``; kill it if it has not exited within ``grace_s``. Returns once it has exited."""
    process.terminate()
    try:
        process.wait(grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@contextmanager
def announced_url(process: subprocess.Popen[str], what: str) -> Iterator[str]:
    """The URL a server prints last on its ``listening on <url>`` stdout line; stops the server after."""
    try:
        line = wait_for_line(process, process.stdout, "listening on", what)
        yield line.rsplit(" ", 1)[-1].strip()
    finally:
        stop_process(process)
