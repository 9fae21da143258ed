"""``gather_or_cancel``: wait for tasks together; the first failure cancels the others.

``asyncio.gather`` leaves the other tasks running when one fails, and ``asyncio.TaskGroup``
raises an ``ExceptionGroup``. The runner and RULER want the first failure itself, raised
only once every other task is cancelled and has unwound (its ``finally`` blocks ran), so
nothing keeps calling a model or a judge after the caller has given up.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import TypeVar

__all__ = ["gather_or_cancel"]

T = TypeVar("T")


async def gather_or_cancel(
    tasks: Sequence[asyncio.Task[T]], *, check: Callable[[], None] | None = None
) -> list[T]:
    """Wait for every task in ``tasks``; returns their results in order.

    The first task to raise, or ``check`` raising (it is called each time tasks finish, e.g.
    to stop at a failure budget), cancels the other tasks; the exception propagates once they
    have unwound. Cancelling the caller cancels them the same way.
    """
    try:
        pending: set[asyncio.Task[T]] = set(tasks)
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()  # the first failure propagates; the finally cancels the rest
            if check is not None:
                check()
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return [task.result() for task in tasks]
