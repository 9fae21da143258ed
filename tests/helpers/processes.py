"""Waiting for a server subprocess to announce itself on one of its output streams."""

from __future__ import annotations

import subprocess
import time
from typing import IO


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
