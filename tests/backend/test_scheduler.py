"""The torch engine's admission policy (a pure function): fair shares, preemption, no starvation."""

from __future__ import annotations

from art_adapters_backend.engine.base import GenerationRequest, SamplingParams
from art_adapters_backend.engine.batch import Job, Row
from art_adapters_backend.engine.scheduler import admit


def rows(n: int, max_tokens: int = 16, queued_at: float = 100.0) -> list[Row]:
    """The ``n`` rows of one request."""
    request = GenerationRequest([1, 2, 3], SamplingParams(max_tokens=max_tokens), n=n)
    job = Job(request=request, emit=lambda event: None, remaining=n, queued_at=queued_at)
    return [Row(job=job, index=i, tracker=None, generator=None, decoder=None) for i in range(n)]  # type: ignore[arg-type]


def test_a_request_holding_every_row_gives_one_up_to_a_newcomer() -> None:
    hog = rows(8, max_tokens=8000)
    probe = rows(1, max_tokens=1)
    chosen, victims = admit(probe, [], hog, 8, max_wait_s=30, now=101)
    assert chosen == probe and victims == [hog[-1]]  # the hog's newest row steps aside
    # three requests: shares of 2; the newcomer takes a row from the one most over its share
    other = rows(2)
    chosen, victims = admit(rows(1), [], hog[:6] + other, 8, max_wait_s=30, now=101)
    assert len(chosen) == 1 and victims == [hog[5]]
    # eight requests of one row each: nobody is over a share, a ninth waits for room
    singles = [row for _ in range(8) for row in rows(1)]
    assert admit(rows(1), [], singles, 8, max_wait_s=30, now=101) == ([], [])


def test_shares_first_then_any_room_left() -> None:
    a, b = rows(6), rows(6)
    chosen, victims = admit(a + b, [], [], 8, max_wait_s=30, now=101)
    assert victims == [] and len(chosen) == 8
    assert sum(row.job is a[0].job for row in chosen) == 4 and sum(row.job is b[0].job for row in chosen) == 4
    alone = rows(6)
    chosen, _ = admit(alone, [], [], 8, max_wait_s=30, now=101)
    assert chosen == alone  # no one else waits: a request may use every free row


def test_short_requests_first_unless_a_long_one_waited_too_long() -> None:
    long, short = rows(1, max_tokens=500, queued_at=100), rows(1, max_tokens=1, queued_at=110)
    busy = rows(1)
    assert admit(long + short, [], busy, 2, max_wait_s=30, now=111)[0] == short
    assert admit(long + short, [], busy, 2, max_wait_s=30, now=131)[0] == long  # waited 31 s
    assert admit([], [], busy, 2, max_wait_s=30) == ([], [])
