"""The real backend app over the fake engine and trainer, served on a real 127.0.0.1 port.

:class:`FakeBackendServer` builds the server's state the way ``serve`` does (``ServerState.create``:
run directory, registry, token records, chat template, tool parser), with
:class:`~tests.helpers.fake_engine.FakeEngine` and :class:`~tests.helpers.fake_trainer.FakeTrainer`
through its ``engine_factory``/``trainer_factory`` seam, and serves ``create_app`` with uvicorn in a
thread with its own event loop. Clients talk to it over HTTP like to any backend:
``RemoteBackend(server.url)``, ``TrainableModel.register``, ``chat_model()``, the OpenAI client. Being
in a thread of its own, it answers tests that run their own event loops (``asyncio.run``) too.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from art_adapters import RemoteBackend

__all__ = ["FakeBackend", "FakeBackendServer"]

logger = logging.getLogger(__name__)


class FakeBackend(RemoteBackend):
    """A client of a :class:`FakeBackendServer` with the run directory, as ``LocalBackend`` has."""

    def __init__(self, base_url: str, run_dir: Path) -> None:
        super().__init__(base_url)
        self.run_dir = run_dir


class FakeBackendServer:
    """The real app on the fake engine, in a background thread (see the module docstring).

    Args:
        run_dir: the server's run directory.
        settings: further ``ServeConfig`` fields (``base_model``, ``api_key``, limits...).
    """

    def __init__(self, run_dir: str | Path, **settings: Any) -> None:
        self.run_dir = Path(run_dir)
        self.settings = settings
        self.url = ""
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._server: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self, timeout: float = 300.0) -> Self:
        """Start serving; returns once the server accepts connections."""
        self._thread = threading.Thread(target=self._run, name="fake-backend", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError(f"the fake backend did not start within {timeout:.0f} s")
        if self._error is not None:
            raise RuntimeError(f"the fake backend could not start: {self._error}") from self._error
        return self

    def client(self) -> FakeBackend:
        """A new HTTP client of this server (close it with ``aclose``)."""
        return FakeBackend(self.url, self.run_dir)

    def stop(self) -> None:
        """Stop serving (in-flight requests end first) and close the state."""
        if self._server is not None and self._loop is not None:
            self._loop.call_soon_threadsafe(setattr, self._server, "should_exit", True)
        if self._thread is not None:
            self._thread.join(30)
            self._thread = None

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # reported by start() when it happens before serving
            self._error = exc
            self._ready.set()

    async def _serve(self) -> None:
        import uvicorn
        from art_adapters_backend.config import ServeConfig
        from art_adapters_backend.http.app import create_app
        from art_adapters_backend.state import ServerState

        from .fake_engine import FakeEngine
        from .fake_trainer import FakeTrainer

        config = ServeConfig(run_dir=self.run_dir, port=0, log_level="warning", **self.settings)
        state = await ServerState.create(
            config, engine_factory=FakeEngine.for_model, trainer_factory=FakeTrainer
        )
        # IPPROTO_TCP, as serve's socket: asyncio then sets TCP_NODELAY on its connections
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        self._loop = asyncio.get_running_loop()
        app = create_app(state)
        self._server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
        watcher = asyncio.create_task(self._announce())
        try:
            await self._server.serve(sockets=[sock])
        finally:
            watcher.cancel()
            sock.close()
            await state.close()

    async def _announce(self) -> None:
        while not self._server.started:
            await asyncio.sleep(0.02)
        logger.info("fake backend serving at %s (run dir %s)", self.url, self.run_dir)
        self._ready.set()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
