"""Worker threads of the server's own: request work and schema checks never queue behind slow jobs.

``asyncio.to_thread``'s default pool is shared with slow work such as grammar compilation (six slow
compiles once held up prompt rendering). Short request work (rendering, tokenising, record writes,
body parsing) runs in :func:`run_request_work`'s pool, JSON-schema checks in :func:`run_schema_work`'s,
training steps in :func:`run_training_work`'s thread; each below the event loop's priority
(``serve --work-nice``, :func:`.threads.lower_thread_priority`).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from .threads import lower_thread_priority

__all__ = ["REQUEST_WORKERS", "SCHEMA_WORKERS", "run_request_work", "run_schema_work", "run_training_work"]

_T = TypeVar("_T")

#: Threads of the request-work pool: enough that one slow request does not hold up the others.
REQUEST_WORKERS = max(4, os.cpu_count() or 1)
#: Threads checking JSON schemas: at most this many schema compilations run at once.
SCHEMA_WORKERS = 2

_REQUEST_POOL = ThreadPoolExecutor(
    max_workers=REQUEST_WORKERS, thread_name_prefix="art-request", initializer=lower_thread_priority
)
_SCHEMA_POOL = ThreadPoolExecutor(
    max_workers=SCHEMA_WORKERS, thread_name_prefix="art-schema", initializer=lower_thread_priority
)
_TRAINING_POOL = ThreadPoolExecutor(
    max_workers=1, thread_name_prefix="art-train", initializer=lower_thread_priority
)


async def _run(pool: ThreadPoolExecutor, fn: Callable[..., _T], *args: Any) -> _T:
    loop = asyncio.get_running_loop()
    context = contextvars.copy_context()  # as asyncio.to_thread: logging context, etc.
    return await loop.run_in_executor(pool, functools.partial(context.run, fn, *args))


async def run_request_work(fn: Callable[..., _T], *args: Any) -> _T:
    """``fn(*args)`` in the request-work pool (short CPU or disk work of one request)."""
    return await _run(_REQUEST_POOL, fn, *args)


async def run_schema_work(fn: Callable[..., _T], *args: Any) -> _T:
    """``fn(*args)`` in the schema pool (at most :data:`SCHEMA_WORKERS` at once; the others queue)."""
    return await _run(_SCHEMA_POOL, fn, *args)


async def run_training_work(fn: Callable[..., _T], *args: Any) -> _T:
    """``fn(*args)`` in the training thread (one: steps run one at a time anyway)."""
    return await _run(_TRAINING_POOL, fn, *args)
