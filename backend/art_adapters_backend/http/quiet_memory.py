"""``QuietMemoryMiddleware``: hand freed memory back to the OS once the server has gone quiet.

A burst of requests (large bodies, many completions) leaves glibc holding the freed heap: after a
64-client soak the server stayed 12% above where it started, and a ``malloc_trim`` brought it back
to 1%. Trimming while requests run held the allocator and slowed them (see :mod:`..freed_memory`),
so it is done only once no request (probes aside) has run for ``quiet_s`` seconds.
"""

from __future__ import annotations

import asyncio
import gc
import logging

from starlette.types import ASGIApp, Receive, Scope, Send

from ..freed_memory import FREED_MEMORY, FreedMemory

__all__ = ["QuietMemoryMiddleware"]

logger = logging.getLogger(__name__)

#: Paths whose requests neither count as work nor delay a return: a prober's, a monitor's.
_IGNORED_PATHS = frozenset({"/health", "/art/stats"})


class QuietMemoryMiddleware:
    """Pure ASGI middleware: return freed memory ``quiet_s`` seconds after the last request ended.

    Only when no request is in progress then and none started since, and only after requests
    ran (an idle server is not trimmed again and again); ``/health`` and ``/art/stats`` do not
    count. A full garbage collection comes first (cycles freed too); both run in a worker thread.

    Args:
        app: the wrapped application.
        quiet_s: seconds without requests before memory is returned; 0 turns it off.
        freed: the counter the returns are made through (``/art/stats`` "memory").
    """

    def __init__(self, app: ASGIApp, *, quiet_s: float, freed: FreedMemory = FREED_MEMORY) -> None:
        self.app = app
        self.quiet_s = quiet_s
        self.freed = freed
        self._active = 0
        self._started = 0  # requests started so far: a later check sees whether any came since
        self._returning = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on, counting it while it runs."""
        if self.quiet_s <= 0 or scope["type"] != "http" or scope.get("path") in _IGNORED_PATHS:
            await self.app(scope, receive, send)
            return
        self._active += 1
        self._started += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self._active -= 1
            if self._active == 0:
                asyncio.get_running_loop().call_later(self.quiet_s, self._return_if_quiet, self._started)

    def _return_if_quiet(self, started: int) -> None:
        if self._active or self._started != started or self._returning:
            return  # work came since (its own end schedules a check), or a return is running
        self._returning = True
        task = asyncio.ensure_future(asyncio.to_thread(self._collect_and_return))
        task.add_done_callback(self._returned)

    def _collect_and_return(self) -> bool:
        gc.collect()  # cyclic garbage first, so its pages go back too
        return self.freed.now()

    def _returned(self, task: asyncio.Future[bool]) -> None:
        self._returning = False
        if not task.cancelled() and task.exception() is not None:
            logger.warning("returning freed memory failed: %s", task.exception())
