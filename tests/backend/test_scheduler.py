"""The torch engine's admission policy (a pure function): fair shares, preemption, no starvation."""

from __future__ import annotations

from art_adapters_backend.serving.engine.base import GenerationRequest, SamplingParams
from art_adapters_backend.serving.engine.batch import Job, Row
from art_adapters_backend.serving.engine.scheduler import admit


def rows(n: int, max_tokens: int = 16, queued_at: float = 100.0) -> list[Row]:
    """The ``n`` rows of one request."""
    request = GenerationRequest([1, 2, 3], SamplingParams(max_tokens=max_tokens), n=n)
    job = Job(request=request, emit=lambda event: None, remaining=n, queued_at=queued_at)
    return [Row(job=job, index=i, tracker=None, generator=None, decoder=None) for i in range(n)]  # type: ignore[arg-type]


def test_a_request_holding_every_row_gives_one_up_to_a_newcomer() -> None:
    hog = rows(8, max_tokens=8000)
    probe = rows(1, max_tokens=2)  # (a one-token request needs no decode row at all: below)
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
    long, short = rows(1, max_tokens=500, queued_at=100), rows(1, max_tokens=2, queued_at=110)
    busy = rows(1)
    assert admit(long + short, [], busy, 2, max_wait_s=30, now=111)[0] == short
    assert admit(long + short, [], busy, 2, max_wait_s=30, now=131)[0] == long  # waited 31 s
    assert admit([], [], busy, 2, max_wait_s=30) == ([], [])


def test_with_every_share_taken_a_short_request_preempts_the_longest_row_after_its_quantum() -> None:
    """The soak's hang: eight one-row requests of 8,000 tokens each hold every row (each exactly
    at its share), so the old policy let a one-token request wait for one of them to end."""
    hogs = [rows(1, max_tokens=8000)[0] for _ in range(8)]
    probe = rows(1, max_tokens=2)
    assert admit(probe, [], hogs, 8, max_wait_s=30, now=101) == ([], [])  # just admitted: their quantum
    for steps, row in zip([4, 9, 5, 4, 4, 4, 4, 6], hogs, strict=True):
        row.ran, row.n_tokens = steps, steps
    chosen, victims = admit(probe, [], hogs, 8, max_wait_s=30, now=101)
    assert chosen == probe and victims == [hogs[0]]  # the most tokens left (4 decoded of 8,000)
    # a long request does not preempt another long one (no thrashing, no more rows holding memory),
    # even once it waited max_wait_s: it goes first when a row frees
    late = rows(1, max_tokens=8000, queued_at=100)
    assert admit(late, [], hogs, 8, max_wait_s=30, now=131) == ([], [])
    assert admit(late + probe, [], hogs[1:], 8, max_wait_s=30, now=131) == (late + probe, [hogs[3]])
    # nor a short one a row with about as little left as it asks for
    shorts = [rows(1, max_tokens=10)[0] for _ in range(8)]
    for row in shorts:
        row.ran, row.n_tokens = 4, 4
    assert admit(rows(1, max_tokens=4), [], shorts, 8, max_wait_s=30, now=101) == ([], [])
    assert admit(rows(1, max_tokens=2), [], shorts, 8, max_wait_s=30, now=101)[1] == [shorts[0]]


def test_a_row_with_one_token_left_needs_no_decode_row() -> None:
    """Its prefill gives its last token: it is admitted at once, however full the batch, and
    preempts nobody."""
    hogs = [rows(1, max_tokens=8000)[0] for _ in range(8)]
    probe, short = rows(1, max_tokens=1), rows(1, max_tokens=8)
    chosen, victims = admit(short + probe, [], hogs, 8, max_wait_s=30, now=101)
    assert chosen == probe and victims == []
    assert admit(probe, probe, hogs, 8, max_wait_s=30, now=101) == (probe, [])
    assert admit(probe, [], [], 8, max_wait_s=30, now=101) == (probe, [])  # an idle engine
    # and one prefilling takes no room from others
    assert admit(short, probe, hogs[:7], 8, max_wait_s=30, now=101) == (short, [])
