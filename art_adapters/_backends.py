"""Clients for the backend service: :class:`RemoteBackend` and :class:`LocalBackend`.

:class:`LocalBackend` starts the embedded backend as a subprocess on 127.0.0.1 and stops it cleanly;
:class:`RemoteBackend` connects to one that is already running.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self
from urllib.parse import quote

import httpx

from ._errors import BackendRequestError, BackendUnavailableError
from .files import open_private, private_dir

__all__ = ["Backend", "LocalBackend", "RemoteBackend", "path_segment"]

logger = logging.getLogger(__name__)

#: Default timeout of control requests (registration, records); training has its own.
DEFAULT_TIMEOUT_S = 60.0


def path_segment(value: str) -> str:
    """``value`` quoted as one URL path segment (``/``, ``?``, ``#``, ``%``, ``..`` cannot change the route)."""
    text = quote(str(value), safe="")
    return text.replace(".", "%2E") if text in (".", "..") else text


class Backend:
    """Shared HTTP client logic of every backend (async first).

    Every backend speaks HTTP to the same service (see ``docs/backend-api.md``): the OpenAI API for
    inference and a small JSON API under ``/art`` for registration, token records and training.

    Args:
        base_url: the service's root URL, e.g. ``http://127.0.0.1:8000``.
        api_key: sent as ``Authorization: Bearer`` when set.
        timeout: seconds for control requests.
        http_client: an ``httpx.AsyncClient`` to use instead of creating one
            (inject a transport for tests or proxies); it is not closed by us.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout
        self._http = http_client
        self._owns_http = http_client is None
        self._http_loop: asyncio.AbstractEventLoop | None = None  # the loop our own client was made in

    @property
    def openai_base_url(self) -> str:
        """The OpenAI-compatible base URL (``.../v1``)."""
        return f"{self.base_url}/v1"

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def _client(self) -> httpx.AsyncClient:
        """Our HTTP client for the running event loop.

        An ``httpx.AsyncClient``'s pooled connections belong to the loop that opened them, so a
        script that calls ``asyncio.run`` more than once gets a fresh client in each loop (the
        old one's loop is gone and cannot close it; its sockets are freed with it). A client
        passed in by the caller is always used as is.
        """
        loop = asyncio.get_running_loop()
        if self._http is not None and self._owns_http and self._http_loop is not loop:
            logger.debug("new event loop: opening a new HTTP client for %s", self.base_url)
            self._http = None
        if self._http is None:
            self._http = httpx.AsyncClient(timeout=self.timeout)
            self._owns_http = True
            self._http_loop = loop
        return self._http

    async def request(
        self,
        method: str,
        path: str,
        *,
        timeout: float | None = None,
        headers: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> Any:
        """Send one request to the backend and return its decoded JSON body.

        ``headers`` are sent besides the API key's.

        Raises:
            BackendUnavailableError: the backend could not be reached (or did not answer in time).
            BackendRequestError: the backend answered with an error status.
        """
        url = f"{self.base_url}{path}"
        try:
            response = await self._client().request(
                method, url, headers={**self._headers(), **(headers or {})}, timeout=timeout or self.timeout,
                **kwargs,
            )  # fmt: skip
        except httpx.TransportError as exc:
            raise BackendUnavailableError(
                f"could not reach the backend at {self.base_url} ({type(exc).__name__}: {exc}); "
                "is it running? Start one with `art-adapters serve` or use LocalBackend()."
            ) from exc
        if response.is_error:
            raise _request_error(response)
        return response.json()

    async def health(self) -> bool:
        """Whether the backend answers ``GET /health``."""
        try:
            await self.request("GET", "/health", timeout=5.0)
        except (BackendUnavailableError, BackendRequestError):
            return False
        return True

    async def register_model(self, *, name: str, project: str, base_model: str) -> dict[str, Any]:
        """Register a trainable model; returns its record (idempotent for the same base model)."""
        body = {"name": name, "project": project, "base_model": base_model}
        return await self.request("POST", "/art/models", json=body)

    async def get_model(self, name: str) -> dict[str, Any]:
        """The registry record of a model: ``name``, ``base_model``, ``latest_step``, ``steps``."""
        return await self.request("GET", f"/art/models/{path_segment(name)}")

    async def get_token_record(self, completion_id: str) -> dict[str, Any]:
        """The exact-token record of a completion the backend served."""
        return await self.request("GET", f"/art/completions/{path_segment(completion_id)}")

    async def export_model(
        self,
        name: str,
        *,
        out: str,
        step: int | None = None,
        merged: bool = False,
        force: bool = False,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Export checkpoint ``name@step`` into the folder ``out`` on the backend's machine.

        ``POST /art/models/{name}/export`` (see ``docs/export.md``); returns the export's
        manifest: ``path``, ``step``, ``merged``, ``vllm_command``, ...
        """
        body = {"out": out, "step": step, "merged": merged, "force": force}
        return await self.request(
            "POST", f"/art/models/{path_segment(name)}/export", json=body, timeout=timeout
        )

    async def aclose(self) -> None:
        """Close the HTTP client if we created it (in this event loop; one from a finished loop is dropped)."""
        if self._http is not None and self._owns_http and self._http_loop is asyncio.get_running_loop():
            await self._http.aclose()
        self._http = None
        self._http_loop = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._leave()

    async def _leave(self) -> None:
        """Leaving ``async with``: close the client (a :class:`LocalBackend` also stops its server)."""
        await self.aclose()


def _request_error(response: httpx.Response) -> BackendRequestError:
    message = response.text
    error_type = None
    with contextlib.suppress(ValueError, AttributeError, TypeError):
        error = response.json()["error"]
        message = error.get("message", message)
        error_type = error.get("type")
    return BackendRequestError(
        f"backend answered {response.status_code} to {response.request.method} "
        f"{response.request.url.path}: {message}",
        status_code=response.status_code,
        error_type=error_type,
    )


class RemoteBackend(Backend):
    """A backend that is already running somewhere: ``RemoteBackend(url, api_key)``."""


class LocalBackend(Backend):
    """The embedded backend, started as a subprocess on 127.0.0.1 and stopped by :meth:`close`.

    Use it as ``async with LocalBackend() as backend:`` or call :meth:`start` and
    :meth:`close` yourself. Needs the ``backend`` extra
    (``pip install 'art-adapters[backend]'``).

    The subprocess never outlives this process: it is started with ``--parent-pid`` and a
    pipe as its stdin, and stops when the pipe closes or its parent changes, so a killed
    script or notebook kernel (SIGTERM, SIGKILL, a crash) does not leave it serving (see
    ``art_adapters_backend.parent_watch``). The API key reaches it through the environment
    (``ART_ADAPTERS_API_KEY``), never its command line, and is never logged.

    Args:
        run_dir: the backend's run directory (registry, token records, checkpoints);
            it survives restarts. Default: ``./.art/backend``.
        base_model: the base model the service loads (default: the bundled SmolLM2).
        port: port to bind; 0 picks a free one.
        startup_timeout: seconds to wait for the service to answer ``/health``
            (the first start converts the bundled model, about a minute).
        extra_args: further ``serve`` flags.
        log_path: where the subprocess writes its log; default ``run_dir/server.log``.
        export_roots: the folders :meth:`TrainableModel.export` may write under besides
            ``run_dir/exports`` (``serve --export-root``); default this process's working directory
            and the temporary folder (``tempfile.gettempdir()``).
    """

    def __init__(
        self,
        run_dir: str | os.PathLike[str] = ".art/backend",
        *,
        base_model: str = "smollm2-135m-instruct",
        port: int = 0,
        startup_timeout: float = 300.0,
        extra_args: list[str] | None = None,
        log_path: str | os.PathLike[str] | None = None,
        api_key: str | None = None,
        export_roots: Sequence[str | os.PathLike[str]] | None = None,
    ) -> None:
        super().__init__("http://127.0.0.1:0", api_key)
        self.run_dir = Path(run_dir)
        roots = (Path.cwd(), Path(tempfile.gettempdir())) if export_roots is None else export_roots
        self.export_roots = [Path(root).absolute() for root in roots]
        self.base_model = base_model
        self.port = port
        self.startup_timeout = startup_timeout
        self.extra_args = list(extra_args or [])
        self.log_path = Path(log_path) if log_path else self.run_dir / "server.log"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        """The server subprocess while it runs."""
        return self._process

    async def start(self) -> Self:
        """Start the subprocess and wait until it serves; idempotent."""
        if self._process is not None and self._process.poll() is None:
            return self
        if importlib.util.find_spec("art_adapters_backend") is None:
            raise ImportError(
                "LocalBackend needs the embedded backend: pip install 'art-adapters[backend]'"
            )
        private_dir(self.run_dir)  # the server's records hold every prompt: owner only (0o700)
        port_file = Path(tempfile.mkdtemp(prefix="art-port-")) / "port"
        command = self._command(port_file)
        logger.info("starting local backend: %s", " ".join(redact_command(command)))
        private_dir(self.log_path.parent)
        with os.fdopen(open_private(self.log_path), "ab") as log:  # 0o600: it may quote prompts
            # Popen returns once the child is forked; the waiting below is async. stdin is a pipe we
            # never write to: it closes when this process ends, however it ends, and the child stops.
            self._process = subprocess.Popen(  # noqa: ASYNC220
                command, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, env=self._environment()
            )
        try:
            port = await self._wait_for_port(port_file)
        finally:  # the port is read (or never will be): its folder goes, one per start otherwise
            shutil.rmtree(port_file.parent, ignore_errors=True)
        self.base_url = f"http://127.0.0.1:{port}"
        await self._wait_for_health()
        logger.info("local backend serving at %s (log: %s)", self.base_url, self.log_path)
        return self

    def _command(self, port_file: Path) -> list[str]:
        """The ``serve`` command line (no secret on it: the key goes by :meth:`_environment`)."""
        return [
            sys.executable, "-m", "art_adapters_backend", "serve",
            "--host", "127.0.0.1", "--port", str(self.port), "--port-file", str(port_file),
            "--run-dir", str(self.run_dir), "--base-model", self.base_model,
            "--parent-pid", str(os.getpid()),
            *(arg for root in self.export_roots for arg in ("--export-root", str(root))), *self.extra_args,
        ]  # fmt: skip

    def _environment(self) -> dict[str, str]:
        """This process's environment with ``ART_ADAPTERS_API_KEY`` set to our key (removed without one)."""
        env = {k: v for k, v in os.environ.items() if k != _API_KEY_ENV}
        if self.api_key:
            env[_API_KEY_ENV] = self.api_key
        return env

    async def _wait_for_port(self, port_file: Path) -> int:
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            self._raise_if_exited()
            if port_file.exists() and (text := port_file.read_text().strip()):
                return int(text)
            await asyncio.sleep(0.1)
        await self.close()
        raise BackendUnavailableError(
            f"the local backend did not bind a port within {self.startup_timeout:.0f} s; see {self.log_path}"
        )

    async def _wait_for_health(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            self._raise_if_exited()
            if await self.health():
                return
            await asyncio.sleep(0.2)
        await self.close()
        raise BackendUnavailableError(
            f"the local backend did not become healthy within {self.startup_timeout:.0f} s; "
            f"see {self.log_path}"
        )

    def _raise_if_exited(self) -> None:
        if self._process is not None and (code := self._process.poll()) is not None:
            _close_stdin(self._process)
            self._process = None
            tail = _tail(self.log_path)
            raise BackendUnavailableError(
                f"the local backend exited with code {code} while starting; last log lines "
                f"({self.log_path}):\n{tail}"
            )

    async def close(self, timeout: float = 20.0) -> None:
        """Stop the subprocess (SIGTERM, then SIGKILL after ``timeout``) and close the client."""
        await self.aclose()
        process, self._process = self._process, None
        if process is None:
            return
        try:
            if process.poll() is not None:
                return
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(process.wait, timeout)
            except subprocess.TimeoutExpired:
                logger.warning("local backend did not stop within %.0f s; killing it", timeout)
                process.kill()
                await asyncio.to_thread(process.wait)
        finally:
            _close_stdin(process)

    async def __aenter__(self) -> Self:
        return await self.start()

    async def _leave(self) -> None:
        await self.close()


#: The environment variable ``serve`` reads its API key from.
_API_KEY_ENV = "ART_ADAPTERS_API_KEY"
#: Flags whose value is a secret (hidden when a command line is logged).
_SECRET_FLAGS = frozenset({"--api-key"})


def redact_command(command: list[str]) -> list[str]:
    """``command`` with the values of secret flags (``--api-key K``, ``--api-key=K``) replaced by ``***``."""
    out: list[str] = []
    hide_next = False
    for arg in command:
        name, eq, _ = arg.partition("=")
        if hide_next:
            out.append("***")
        elif eq and name in _SECRET_FLAGS:
            out.append(f"{name}=***")
        else:
            out.append(arg)
        hide_next = arg in _SECRET_FLAGS
    return out


def _close_stdin(process: subprocess.Popen[bytes]) -> None:
    if process.stdin is not None:
        with contextlib.suppress(OSError):
            process.stdin.close()


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"

