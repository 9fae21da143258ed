"""``AdmissionGate``: how many chat completions the server takes on at once.

A full server refuses a request at once (429 with ``Retry-After``) instead of queueing it without bound.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ..errors import BadRequestError, ServerBusyError
from ..limits import ServeLimits

__all__ = ["Admission", "AdmissionGate"]

logger = logging.getLogger(__name__)

#: Seconds a refused client is asked to wait (``Retry-After``).
RETRY_AFTER_S = 1


@dataclass(eq=False)
class Admission:
    """One admitted request's place; :meth:`AdmissionGate.release` it once (more is harmless)."""

    sequences: int
    released: bool = False


class AdmissionGate:
    """Admits chat completions within ``limits``.

    Every chat completion holds an :class:`Admission` from its start to the end of its response
    (prompt rendering, waiting for a batch slot, decoding, streaming). Two bounds (see
    :class:`~..limits.ServeLimits`):

    - ``max_concurrent_requests``: completions in progress;
    - ``max_queued_sequences``: their choices beyond what the engine decodes at once
      (``max_batch_size``), i.e. the engine's waiting queue.

    A request that would pass either is refused at once with :class:`~..errors.ServerBusyError`
    (429 with ``Retry-After``), before any work is done for it; one whose ``n`` could never fit
    is a 400. The gate lives on the event loop: no locks.

    Args:
        limits: the server's limits (``max_concurrent_requests``, ``max_queued_sequences``).
        max_batch_size: the sequences the engine decodes at once (they do not queue).
    """

    def __init__(self, limits: ServeLimits, max_batch_size: int) -> None:
        self.max_requests = limits.max_concurrent_requests
        self.max_sequences = max_batch_size + limits.max_queued_sequences
        self.requests = 0
        self.sequences = 0
        self.refused = 0

    def admit(self, n: int) -> Admission:
        """A place for a request of ``n`` choices.

        Raises:
            BadRequestError: ``n`` alone is more than the server ever takes on (400).
            ServerBusyError: the server is full right now (429, ``Retry-After``).
        """
        if n > self.max_sequences:
            raise BadRequestError(
                f"n is {n}, more choices than this server ever has in progress ({self.max_sequences}: "
                "serve --max-batch-size plus --max-queued-sequences): lower n",
                param="n",
            )
        if self.requests >= self.max_requests:
            self.refused += 1
            raise ServerBusyError(
                f"the server is busy: {self.requests} chat completions are in progress, the most it takes on "
                f"(serve --max-concurrent-requests); send the request again in {RETRY_AFTER_S} s",
                retry_after=RETRY_AFTER_S,
            )
        if self.sequences + n > self.max_sequences:
            self.refused += 1
            raise ServerBusyError(
                f"the server is busy: {self.sequences} choices are in progress and {n} more would queue past "
                f"its limit of {self.max_sequences} (serve --max-batch-size plus --max-queued-sequences); "
                f"send the request again in {RETRY_AFTER_S} s",
                retry_after=RETRY_AFTER_S,
            )
        self.requests += 1
        self.sequences += n
        return Admission(sequences=n)

    def release(self, admission: Admission) -> None:
        """Give ``admission``'s place back (idempotent)."""
        if admission.released:
            return
        admission.released = True
        self.requests -= 1
        self.sequences -= admission.sequences

    def stats(self) -> dict[str, int]:
        """In progress now and refused so far (for ``/art/stats``)."""
        return {"requests": self.requests, "sequences": self.sequences, "refused": self.refused,
                "max_requests": self.max_requests, "max_sequences": self.max_sequences}  # fmt: skip
