"""Exact-token records of every completion served, keyed by the completion id.

Training reads the token ids the model sampled from here instead of re-tokenising text;
:class:`RecordStore` keeps them durably in ``completions.jsonl`` in the run directory.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import fields
from pathlib import Path
from typing import Any, get_type_hints

from pydantic import BaseModel, Field, create_model

from art_adapters.files import PRIVATE_FILE_MODE, append_durably, cut_torn_line

from ..errors import StorageUnavailableError
from ..workers import run_request_work
from .engine.base import SamplingParams

__all__ = ["ChoiceRecord", "CompletionRecord", "RecordStore"]

logger = logging.getLogger(__name__)


class ChoiceRecord(BaseModel):
    """One choice of a completion, token-exact.

    Attributes:
        index: the choice's index in the response.
        completion_token_ids: the sampled token ids, ending with the EOS (``<|im_end|>``)
            when the choice stopped by sampling it (so training covers ending the turn).
        logprobs: one log-probability per sampled token, as the engine computed it.
        top_logprobs: per token, the most likely ``[token_id, logprob]`` pairs (when asked for).
        finish_reason: ``stop``, ``length`` or ``tool_calls``.
        text: the decoded text as the engine returned it (before tool-call parsing).
        tool_call_ids: the ids of the tool calls parsed from ``text`` and returned to the client;
            a later request that sends them back is rendered with these exact tokens.
        cached_prompt_tokens: leading prompt tokens whose keys and values the engine reused from
            its prefix cache for this choice (saved prefill; 0 without a hit or a cache).
    """

    index: int
    completion_token_ids: list[int]
    logprobs: list[float]
    top_logprobs: list[list[tuple[int, float]]] | None = None
    finish_reason: str
    text: str
    tool_call_ids: list[str] = Field(default_factory=list)
    cached_prompt_tokens: int = 0


def _stored_sampling_fields() -> dict[str, Any]:
    """:class:`SamplingParams`' fields as a record stores them: ``stop`` a list, ``logit_bias`` an object."""
    stored = {
        "stop": (list[str], Field(default_factory=list)),
        "logit_bias": (dict[int, float], Field(default_factory=dict)),
    }
    hints = get_type_hints(SamplingParams)
    return {f.name: stored.get(f.name, (hints[f.name], f.default)) for f in fields(SamplingParams)}


#: The sampling settings of a record: one field per :class:`SamplingParams` field, same defaults.
_SamplingRecord: type[BaseModel] = create_model(
    "_SamplingRecord", __module__=__name__, **_stored_sampling_fields()
)


class CompletionRecord(_SamplingRecord):  # type: ignore[misc, valid-type]
    """What the backend served for one completion id: prompt token ids, each choice's sampled
    token ids and their logprobs, the sampling settings and the model served.

    Attributes:
        id: the response ``id`` (``chatcmpl-<hex>``; ``resp_<hex>`` for ``/v1/responses``).
        model: the model string the request named (``base``, ``name`` or ``name@step``).
        base_model: the base model id the server serves.
        trained_model: the registered model name, when ``model`` named one.
        step: the checkpoint step that answered (``None`` for the plain base model).
        created: Unix time of the response.
        prompt_token_ids: the rendered prompt's token ids.
        temperature, top_p, max_tokens, seed, stop, top_logprobs, top_k, min_p, presence_penalty,
            frequency_penalty, repetition_penalty, min_tokens, logit_bias: the sampling settings
            used, one per :class:`~.engine.base.SamplingParams` field (``logit_bias`` as an object).
            With a penalty, a bias or ``min_tokens`` the choices' ``logprobs`` are of the adjusted
            distribution the tokens were drawn from, not of the model alone (see
            ``GeneratedSequence.logprobs``).
        n: how many choices were asked for.
        constrained: whether decoding was constrained (forced tool call, JSON response format).
        stream: whether the response was streamed.
        choices: one record per choice.
    """

    id: str
    model: str
    base_model: str
    trained_model: str | None = None
    step: int | None = None
    created: int = Field(default_factory=lambda: int(time.time()))
    prompt_token_ids: list[int]
    n: int = 1
    constrained: bool = False
    stream: bool = False
    choices: list[ChoiceRecord]


class RecordStore:
    """Durable append-only store of :class:`CompletionRecord` s (``completions.jsonl``).

    Each record is appended with :func:`art_adapters.files.append_durably` (fsynced before
    :meth:`put` returns, so a response is only sent once its record is durable; a line torn by a
    crash, or by an append that failed part-way, is cut off). An index (id -> byte offset) is
    rebuilt when the store opens. After a failed append every write is refused with
    :class:`~..errors.StorageUnavailableError` (503) until the file is whole again.

    Safe to use from several threads and from the event loop (writes run in a thread).
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._index: dict[str, tuple[int, int]] = {}
        cut_torn_line(self.path)  # torn by a crash mid-write: never acknowledged
        self._load()
        os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT, PRIVATE_FILE_MODE))
        self._read_fd: int | None = os.open(self.path, os.O_RDONLY)
        self._suspect = False  # a failed append may be left in the file

    def _load(self) -> None:
        if not self.path.exists():
            return
        offset = 0
        with self.path.open("rb") as file:
            for line in file:
                try:
                    record = CompletionRecord.model_validate_json(line)
                except ValueError:
                    logger.warning("skipping an unreadable line at byte %d of %s", offset, self.path)
                else:
                    self._index[record.id] = (offset, len(line))
                offset += len(line)
        logger.info("record store %s: %d completion records", self.path, len(self._index))

    def put_sync(self, record: CompletionRecord) -> None:
        """Append ``record`` and fsync; returns once it is on disk."""
        line = record.model_dump_json().encode() + b"\n"
        with self._lock:
            self._check_open()
            try:
                offset = append_durably(self.path, line)
            except OSError as exc:
                self._suspect = True
                raise StorageUnavailableError(
                    f"could not store the token record of completion {record.id} in {self.path} "
                    f"({exc.strerror or exc}); the completion was not served. Free space in the run "
                    "directory and send the request again"
                ) from exc
            self._suspect = False
            self._index[record.id] = (offset, len(line))

    async def check_writable(self) -> None:
        """Raise :class:`StorageUnavailableError` (503) while a failed append cannot be cut off.

        Free when the store is healthy; otherwise it retries the cut (in a thread).
        """
        if self._suspect or self._read_fd is None:
            await run_request_work(self._check_writable_sync)

    def _check_writable_sync(self) -> None:
        with self._lock:
            self._check_open()
            try:
                cut_torn_line(self.path)
            except OSError as exc:
                raise StorageUnavailableError(
                    f"the record store {self.path} holds a partly written record that cannot be removed "
                    f"({exc.strerror or exc}); completions are refused until it can. Check the disk of the "
                    "run directory"
                ) from exc
            self._suspect = False

    def _check_open(self) -> None:
        if self._read_fd is None:
            raise StorageUnavailableError(f"the record store {self.path} is closed (the server is stopping)")

    async def put(self, record: CompletionRecord) -> None:
        """Append ``record`` durably without blocking the event loop."""
        await run_request_work(self.put_sync, record)

    def get(self, completion_id: str) -> CompletionRecord | None:
        """The record of ``completion_id``, or ``None`` if this store never saw it."""
        with self._lock:
            where = self._index.get(completion_id)
        if where is None:
            return None
        offset, length = where
        if self._read_fd is None:
            raise StorageUnavailableError(f"the record store {self.path} is closed (the server is stopping)")
        return CompletionRecord.model_validate_json(os.pread(self._read_fd, length, offset))

    def __contains__(self, completion_id: object) -> bool:
        return completion_id in self._index

    def __len__(self) -> int:
        return len(self._index)

    def close(self) -> None:
        """Close the file handles (idempotent)."""
        with self._lock:
            if self._read_fd is not None:
                os.close(self._read_fd)
                self._read_fd = None
