"""``gather_or_cancel``: results in order; the first failure (or a failing check) cancels the rest."""

from __future__ import annotations

import asyncio

import pytest

from art_adapters._gather import gather_or_cancel


async def test_results_come_back_in_the_tasks_order() -> None:
    async def after(delay: float, value: int) -> int:
        await asyncio.sleep(delay)
        return value

    tasks = [asyncio.create_task(after(d, v)) for d, v in ((0.03, 1), (0.0, 2), (0.01, 3))]
    assert await gather_or_cancel(tasks) == [1, 2, 3]


async def test_the_first_failure_cancels_the_others_after_they_unwind() -> None:
    unwound: list[str] = []

    async def slow(name: str) -> None:
        try:
            await asyncio.sleep(60)
        finally:
            unwound.append(name)

    async def fail() -> None:
        await asyncio.sleep(0.01)
        raise ValueError("boom")

    tasks = [asyncio.create_task(slow("a")), asyncio.create_task(fail()), asyncio.create_task(slow("b"))]
    with pytest.raises(ValueError, match="boom"):  # the failure itself, not an ExceptionGroup
        await gather_or_cancel(tasks)
    assert sorted(unwound) == ["a", "b"]  # their finally blocks ran before the error reached us
    assert tasks[0].cancelled() and tasks[2].cancelled()


async def test_a_failing_check_stops_the_run() -> None:
    done: list[int] = []

    async def work(i: int) -> None:
        await asyncio.sleep(0.01 * i)
        done.append(i)

    def check() -> None:
        if len(done) >= 2:
            raise RuntimeError("budget")

    tasks = [asyncio.create_task(work(i)) for i in range(1, 50)]
    with pytest.raises(RuntimeError, match="budget"):
        await gather_or_cancel(tasks, check=check)
    assert len(done) < 49 and all(t.done() for t in tasks)


async def test_cancelling_the_caller_cancels_the_tasks() -> None:
    tasks = [asyncio.create_task(asyncio.sleep(60)) for _ in range(3)]
    waiter = asyncio.create_task(gather_or_cancel(tasks))
    await asyncio.sleep(0.01)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert all(t.cancelled() for t in tasks)
