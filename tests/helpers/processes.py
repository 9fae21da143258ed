"""Server subprocesses in tests: wait for one to announce itself, and stop it (kill if it lingers)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any


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
