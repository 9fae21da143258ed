"""Which waiting choices join the batch, and which running ones step aside for them.

:func:`admit` is the torch engine's admission policy, a pure function of the rows waiting and
running, so it reads (and is tested) apart from the decode loop.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence

from .batch import Row

__all__ = ["admit"]


def admit(
    waiting: Sequence[Row],
    prefilling: Sequence[Row],
    decoding: Sequence[Row],
    max_batch_size: int,
    *,
    max_wait_s: float,
    now: float | None = None,
) -> tuple[list[Row], list[Row]]:
    """Choose waiting rows to admit and decoding rows to preempt for them.

    Order: rows whose request waited ``max_wait_s`` or more first, oldest first, so nothing
    starves; the others by their request's ``max_tokens`` (then arrival), so a short request
    (a one-token probe, a tool call) is not stuck behind long generations. Each request with
    rows running or waiting has a fair share of ``max_batch_size`` (divided equally, at least one
    row): rows within their request's share are admitted first, then any others while room is
    left. A request below its share with no room left takes a row from the request most over its
    share (that request's newest row), which is preempted: it keeps its keys and values and waits
    to resume. So one request with ``n = max_batch_size`` and long outputs cannot hold every row.

    Args:
        waiting: rows not admitted yet, in arrival order (none done or cancelled).
        prefilling: admitted rows whose prompt is still being prefilled.
        decoding: the rows of the decode batch.
        max_batch_size: the most rows admitted at once.
        max_wait_s: seconds after which a waiting request goes before shorter ones.
        now: ``time.monotonic()`` (for tests).

    Returns:
        ``(admitted, preempted)``: admitted rows in arrival order, and decoding rows to take out.
    """
    if not waiting:
        return [], []
    now = time.monotonic() if now is None else now
    running = [*prefilling, *decoding]
    room = max_batch_size - len(running)

    def order(position: int) -> tuple[int, float, int]:
        job = waiting[position].job
        aged = now - job.queued_at >= max_wait_s
        return (0 if aged else 1, job.queued_at if aged else job.request.params.max_tokens, position)

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
    for i in ordered:  # below their share with no room: take rows from the most over theirs
        job = id(waiting[i].job)
        if i in chosen or held[job] >= share:
            continue
        candidates = [row for row in decoding if row not in victims and held[id(row.job)] > share]
        if not candidates:
            break
        most = max(held[id(row.job)] for row in candidates)
        victim = [row for row in candidates if held[id(row.job)] == most][-1]
        victims.append(victim)
        held[id(victim.job)] -= 1
        chosen.add(i)
        held[job] += 1
    return [waiting[i] for i in sorted(chosen)], victims
