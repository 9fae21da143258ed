"""Stop the server when the process that started it is gone (``serve --parent-pid PID``).

:class:`~art_adapters.LocalBackend` runs the server as its child. If the parent ends without
closing it (``kill`` of a running ``art-adapters demo``, a killed notebook kernel, SIGKILL, a crash),
nothing else would stop the child: it would keep its port, its memory and any decoding going.
"""

from __future__ import annotations

import logging
import os
import signal
import stat
import sys
import threading
import time
from collections.abc import Callable
from typing import BinaryIO

__all__ = ["stdin_is_pipe", "watch_parent"]

logger = logging.getLogger(__name__)


def stdin_is_pipe(stream: BinaryIO | None = None) -> bool:
    """Whether ``stream`` (default: this process's stdin) is a pipe (not a terminal, file or /dev/null)."""
    stream = stream if stream is not None else getattr(sys.stdin, "buffer", None)
    if stream is None:
        return False
    try:
        return stat.S_ISFIFO(os.fstat(stream.fileno()).st_mode)
    except (OSError, ValueError):
        return False


def _stop_self(grace_s: float) -> None:
    """Stop as on SIGTERM; exit hard if that has not ended the process after ``grace_s``."""
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(grace_s)
    logger.error("still running %.0f s after the parent went; exiting now", grace_s)
    os._exit(1)


def watch_parent(
    parent_pid: int,
    *,
    pipe: BinaryIO | None = None,
    interval_s: float = 0.5,
    grace_s: float = 30.0,
    on_gone: Callable[[str], None] | None = None,
) -> threading.Event:
    """Start daemon threads that call ``on_gone(reason)`` once, when ``parent_pid`` is no longer our parent.

    The parent is watched two ways:

    * **a pipe**: ``LocalBackend`` gives the child a pipe as its stdin and never writes to it;
      when the parent ends, however it ends, the kernel closes the parent's end and the child
      reads EOF at once;
    * **polling** ``os.getppid()`` (portable; the fallback when stdin is not a pipe, or when a
      process forked from the parent still holds the pipe open): a child whose parent is gone
      is re-parented, so its parent pid changes.

    Linux's ``PR_SET_PDEATHSIG`` is not used: it fires when the *thread* that started the child
    ends, which in a program that starts the backend from a worker thread's event loop is long
    before the process ends.

    Either way the default ``on_gone`` stops the server as on SIGTERM (in-flight requests get the
    graceful shutdown time, the engine and the stores are closed); if it has not exited ``grace_s``
    later, it exits hard.

    Args:
        parent_pid: the parent's pid, as the parent passed it (``os.getpid()`` there).
        pipe: a pipe the parent holds open and never writes (read until EOF); ``None``: poll only.
        interval_s: seconds between ``os.getppid()`` checks.
        grace_s: with the default ``on_gone``, seconds between SIGTERM to ourselves and a hard exit.
        on_gone: what to do; default: log it and stop the server (SIGTERM, then ``os._exit``).

    Returns:
        An event set once the parent was found gone.
    """
    gone = threading.Event()
    lock = threading.Lock()

    def fire(reason: str) -> None:
        with lock:
            if gone.is_set():
                return
            gone.set()
        logger.warning("parent process %d is gone (%s); shutting down", parent_pid, reason)
        if on_gone is not None:
            on_gone(reason)
        else:
            _stop_self(grace_s)

    def poll() -> None:
        while not gone.is_set():
            if os.getppid() != parent_pid:
                fire(f"re-parented to {os.getppid()}")
                return
            time.sleep(interval_s)

    def read_pipe(stream: BinaryIO) -> None:
        try:
            while stream.read(65536):
                pass  # the parent never writes; anything it does write is ignored
        except (OSError, ValueError):
            pass
        fire("its pipe closed")

    threading.Thread(target=poll, name="parent-watch-poll", daemon=True).start()
    if pipe is not None:
        threading.Thread(target=read_pipe, args=(pipe,), name="parent-watch-pipe", daemon=True).start()
    return gone
