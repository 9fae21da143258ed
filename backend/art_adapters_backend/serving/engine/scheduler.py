"""Which waiting choices join the batch, and which running ones step aside for them.

:func:`admit` is the torch engine's admission policy, a pure function of the rows waiting and
running, so it reads (and is tested) apart from the decode loop.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence

from .batch import Row

__all__ = ["QUANTUM_STEPS", "admit"]

#: Decode steps a (re)admitted row runs before a shorter request may preempt it (no thrashing).
QUANTUM_STEPS = 4


# shape: one admission rule over one step's state (order, fair shares, rows held)
def admit(
    waiting: Sequence[Row],
    prefilling: Sequence[Row],
    decoding: Sequence[Row],
    max_batch_size: int,
    *,
    max_wait_s: float,
    quantum: int = QUANTUM_STEPS,
    now: float | None = None,
) -> tuple[list[Row], list[Row]]:
    """Choose waiting rows to admit and decoding rows to preempt for them.

    Order: rows whose request waited ``max_wait_s`` or more first, oldest first, so nothing
    starves; the others by their request's ``max_tokens``, so a short request (a tool call) is
    not stuck behind long generations; then preempted rows (holding keys and values) before
    fresh ones, then arrival. Each request with
    rows running or waiting has a fair share of ``max_batch_size`` (divided equally, at least one
    row; a request's ``n`` choices count as one request): rows within their request's share are
    admitted first, then any others while room is left. A request below its share with no room
    left takes a row from the request most over its share (that request's newest row). With more
    requests than rows (every share one row), it takes the row with the most tokens left to
    decode among those that decoded ``quantum`` steps since they were admitted, of a request
    holding more rows than its own, when that row has more than twice its ``max_tokens`` left:
    short requests are served between the steps of long ones (which resume when room frees). A
    preempted row keeps its keys and values and waits to resume. A row with one token left (a
    one-token request) is always admitted and counts against no share: the prefill that computes
    its prompt gives its last token, so it never takes a decode row.

    Args:
        waiting: rows not admitted yet, in arrival order (none done or cancelled).
        prefilling: admitted rows whose prompt is still being prefilled.
        decoding: the rows of the decode batch.
        max_batch_size: the most rows admitted at once.
        max_wait_s: seconds after which a waiting request goes before shorter ones.
        quantum: decode steps a row runs after its admission before a shorter request may preempt it.
        now: ``time.monotonic()`` (for tests).

    Returns:
        ``(admitted, preempted)``: admitted rows in arrival order, and decoding rows to take out.
    """
    if not waiting:
        return [], []
    arrival = list(waiting)
    now = time.monotonic() if now is None else now
    last = [row for row in waiting if _left(row) <= 1]  # a prefill gives their last token: no decode row
    waiting = [row for row in waiting if _left(row) > 1]
    if not waiting:
        return last, []
    running = [*(row for row in prefilling if _left(row) > 1), *decoding]  # a last token prefilled: no row
    room = max_batch_size - len(running)

    def order(position: int) -> tuple[int, float, int, int]:
        row = waiting[position]
        job = row.job
        aged = now - job.queued_at >= max_wait_s
        # then rows that hold keys and values (preempted) before fresh ones: fewer rows hold memory
        fresh = 1 if row.past is None else 0
        return (0 if aged else 1, job.queued_at if aged else job.request.params.max_tokens, fresh, position)

    jobs = {id(row.job) for row in running} | {id(row.job) for row in waiting}
    share = max(1, max_batch_size // len(jobs))
    held = Counter(id(row.job) for row in running)
    ordered = sorted(range(len(waiting)), key=order)
    chosen: set[int] = set()
    for fair in (True, False):
        for i in ordered:
            if len(chosen) >= room:
                break
            if i in chosen or (fair and held[id(waiting[i].job)] >= share):
                continue
            chosen.add(i)
            held[id(waiting[i].job)] += 1
    victims: list[Row] = []
    for i in ordered:  # below their share with no room: take rows from others
        row = waiting[i]
        job = id(row.job)
        if i in chosen or held[job] >= share:
            continue
        candidates = [other for other in decoding if other not in victims and held[id(other.job)] > share]
        if candidates:  # the request most over its share gives up its newest row
            most = max(held[id(other.job)] for other in candidates)
            victim = [other for other in candidates if held[id(other.job)] == most][-1]
        else:  # every share taken: a row that had its quantum and has far more left to decode
            limit = 2 * row.job.request.params.max_tokens
            candidates = [
                other for other in decoding
                if other not in victims and other.ran >= quantum and held[id(other.job)] > held[job]
                and _left(other) > limit
            ]  # fmt: skip
            if not candidates:
                continue
            victim = max(candidates, key=lambda other: (_left(other), held[id(other.job)]))
        victims.append(victim)
        held[id(victim.job)] -= 1
        chosen.add(i)
        held[job] += 1
    admitted = {id(row) for row in last} | {id(waiting[i]) for i in chosen}
    return [row for row in arrival if id(row) in admitted], victims


def _left(row: Row) -> int:
    """Tokens ``row`` may still decode."""
    return row.job.request.params.max_tokens - row.n_tokens
