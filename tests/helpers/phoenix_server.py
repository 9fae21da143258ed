"""A real Arize Phoenix trace server for the tests, from its own cached virtual environment.

``arize-phoenix`` pulls dependencies the project does not want in ``.venv``, so it lives in
``.venv-phoenix/`` at the repository root (git-ignored). :func:`ensure_venv` builds it once
(about 2.5 minutes on the 2-core machine; ~850 MB), under an exclusive file lock so two
pytest runs never build it twice, and marks it complete with a stamp file; a build that
died half-way is removed and redone. ``ART_ADAPTERS_PHOENIX=0`` turns the Phoenix tests
off; ``=1`` is the default behaviour (build when missing).

:class:`PhoenixServer` runs ``phoenix serve`` on a free 127.0.0.1 port with a temporary
working directory (its SQLite database) and stops it afterwards.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Self

import httpx

from tests.helpers.processes import stop_process
from tests.helpers.side_venv import ROOT, ensure_side_venv

VENV = ROOT / ".venv-phoenix"
REQUIREMENT = "arize-phoenix>=12"


def ensure_venv() -> tuple[Path | None, str]:
    """The venv's python and a note (built or cached), or ``(None, reason)`` when it cannot be had."""
    if os.environ.get("ART_ADAPTERS_PHOENIX") == "0":
        return None, "ART_ADAPTERS_PHOENIX=0"
    return ensure_side_venv(VENV.name, [REQUIREMENT])


def free_port() -> int:
    """A port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PhoenixServer:
    """``phoenix serve`` on 127.0.0.1; ``url`` is its HTTP root (OTLP at ``url/v1/traces``)."""

    def __init__(self, python: Path, workdir: Path) -> None:
        self.python = python
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / "phoenix.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.startup_s = 0.0
        self._launched = 0.0

    def start(self, timeout_s: float = 120.0) -> Self:
        """Start and wait until ``/healthz`` answers; raises with the log's tail if it does not."""
        return self.launch().wait(timeout_s)

    def launch(self) -> Self:
        """Start the process without waiting (so a slow start overlaps other setup)."""
        env = {
            **os.environ,
            "PHOENIX_WORKING_DIR": str(self.workdir),
            "PHOENIX_HOST": "127.0.0.1",
            "PHOENIX_PORT": str(self.port),
            "PHOENIX_GRPC_PORT": str(free_port()),
            "PHOENIX_TELEMETRY_ENABLED": "false",
        }
        self._launched = time.monotonic()
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [str(self.python), "-m", "phoenix.server.main", "serve"],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.workdir,
            )
        return self

    def wait(self, timeout_s: float = 120.0) -> Self:
        """Wait until ``/healthz`` answers (at once when it already did)."""
        if self.startup_s:
            return self
        if self.process is None:
            raise RuntimeError("phoenix serve was not launched")
        started = self._launched
        while time.monotonic() - started < timeout_s:
            if self.process.poll() is not None:
                break
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1.0).status_code == 200:
                    self.startup_s = time.monotonic() - started
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        tail = self.log_path.read_text(errors="replace")[-3000:]
        self.stop()
        raise RuntimeError(f"phoenix serve did not become healthy in {timeout_s:.0f}s:\n{tail}")

    def spans(self, project: str) -> list[dict]:
        """Every span of a project, via the REST API (paged)."""
        out: list[dict] = []
        cursor: str | None = None
        while True:
            params: dict[str, str | int] = {"limit": 1000}
            if cursor:
                params["cursor"] = cursor
            response = httpx.get(f"{self.url}/v1/projects/{project}/spans", params=params, timeout=10.0)
            if response.status_code == 404:
                return []
            response.raise_for_status()
            body = response.json()
            out.extend(body["data"])
            cursor = body.get("next_cursor")
            if not cursor:
                return out

    def stop(self) -> None:
        """Terminate the server (kill after 10 s)."""
        if self.process is not None and self.process.poll() is None:
            stop_process(self.process)
        self.process = None
