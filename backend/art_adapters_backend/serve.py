"""``run_server(config)``: load the engine, serve the app with uvicorn, stop cleanly on SIGTERM.

The bound port is written to ``config.port_file`` (atomically) only once the server
accepts connections, so a parent process (``LocalBackend``) can wait for it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import sys
from pathlib import Path

import uvicorn

from art_adapters.files import PRIVATE_FILE_MODE, write_atomic

from .config import ServeConfig
from .gc_pauses import tune_pauses
from .http.app import create_app
from .state import EngineFactory, ServerState, TrainerFactory
from .threads import set_work_nice

__all__ = ["run_server", "serve"]

logger = logging.getLogger(__name__)


def _bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (``port`` 0: any free one).

    Its protocol is named (``IPPROTO_TCP``), not left 0: asyncio turns Nagle's algorithm off
    (``TCP_NODELAY``) only on connections whose socket says it is TCP. Without that, a response written
    as headers then body waited for the client's delayed ACK: 40 ms on Linux, on every request sent
    right after the last one (``/health`` took 44 ms instead of 2).
    """
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def _write_port_file(path: Path, port: int) -> None:
    write_atomic(path, f"{port}\n".encode(), mode=PRIVATE_FILE_MODE)


async def _announce_when_serving(server: uvicorn.Server, config: ServeConfig, port: int) -> None:
    while not server.started:
        if server.should_exit:
            return
        await asyncio.sleep(0.05)
    logger.info(
        "serving %s on http://%s:%d (run dir %s)", config.base_model, config.host, port, config.run_dir
    )
    if config.port_file is not None:
        _write_port_file(config.port_file, port)


def _absorb_signal(signum: int, frame: object) -> None:
    logger.info("received %s; shutting down", signal.Signals(signum).name)


def _watch_parent(config: ServeConfig) -> None:
    if config.parent_pid is None:
        return
    from .parent_watch import stdin_is_pipe, watch_parent

    # the unbuffered stdin: a thread blocked in a BufferedReader's read holds its lock, and the
    # interpreter aborts (SIGABRT) when it cannot take that lock at exit
    pipe = sys.stdin.buffer.raw if stdin_is_pipe() else None
    watch_parent(config.parent_pid, pipe=pipe, grace_s=config.graceful_shutdown_s + 30.0)
    logger.info("stopping when process %d ends%s", config.parent_pid, " (or closes our stdin)" if pipe else "")


async def serve(
    config: ServeConfig,
    *,
    engine_factory: EngineFactory | None = None,
    trainer_factory: TrainerFactory | None = None,
) -> None:
    """Serve until SIGTERM/SIGINT (or until ``config.parent_pid`` ends), then close the engine and the stores.

    ``engine_factory``/``trainer_factory``: see :meth:`ServerState.create` (a seam for tests).
    """
    _watch_parent(config)
    set_work_nice(config.work_nice)  # before the engine's and the pools' threads start
    sock = _bind(config.host, config.port)
    port = sock.getsockname()[1]
    try:
        state = await ServerState.create(
            config, engine_factory=engine_factory, trainer_factory=trainer_factory
        )
    except BaseException:
        sock.close()
        raise
    try:
        app = create_app(state)
        tune_pauses()  # collections no longer walk the model and libraries; 1 ms GIL hand-overs (/health)
        uv_config = uvicorn.Config(
            app,
            log_level=config.log_level,
            timeout_graceful_shutdown=config.graceful_shutdown_s,
            access_log=False,
        )
        server = uvicorn.Server(uv_config)
        announcer = asyncio.create_task(_announce_when_serving(server, config, port))
        # uvicorn handles SIGTERM/SIGINT while serving, then re-raises them once it has stopped;
        # these handlers absorb that re-raise so the engine and the stores are closed below.
        previous = {sig: signal.signal(sig, _absorb_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            await server.serve(sockets=[sock])
        finally:
            announcer.cancel()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    finally:
        sock.close()
        await state.close()
        logger.info("server stopped")


#: The server process's umask: whatever the user's, every file it writes (records, groups,
#: checkpoints, logs, exports) is the owner's only (files 0o600, folders 0o700).
PRIVATE_UMASK = 0o077


def run_server(config: ServeConfig) -> None:
    """Run the backend in this process until it is stopped (exit code 1 if it cannot start).

    The process's umask becomes :data:`PRIVATE_UMASK` first: the run directory holds every prompt served.
    """
    os.umask(PRIVATE_UMASK)
    try:
        asyncio.run(serve(config))
    except KeyboardInterrupt:
        pass
    except (FileNotFoundError, OSError, ValueError, RuntimeError, ImportError) as exc:
        logger.error("the backend could not start: %s", exc, exc_info=logger.isEnabledFor(logging.DEBUG))
        sys.exit(1)
