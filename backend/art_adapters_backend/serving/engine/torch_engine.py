"""The PyTorch inference engine (CPU default, CUDA when asked) with dynamic batching.

Usage::

    engine = TorchEngine.load(resolve_model_path("smollm2-135m-instruct"))
    await engine.start()
    [choice] = await engine.generate(GenerationRequest(prompt_token_ids=ids))
    await engine.close()
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import random
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import torch

from ...gc_pauses import refreeze
from ...threads import THREADS_ENV, lower_thread_priority, set_torch_threads
from .base import (
    EngineStats,
    GeneratedSequence,
    GenerationRequest,
    SequenceDelta,
    check_request,
)
from .batch import Batch, Job, Row
from .constraint import ConstrainedDecoder, GrammarCache
from .prefix_cache import PrefixCache
from .sampling import LogitAdjuster, validate_adjustments
from .scheduler import admit
from .shared_prefix import ATTENTION_NAME, register_attention, supports_shared_prefix
from .text import TextTracker

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = ["THREADS_ENV", "EngineClosedError", "TorchEngine"]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

#: Seconds after which a waiting request is admitted before shorter ones (no starvation).
MAX_WAIT_S = 30.0
#: Default byte budget of the prefix cache (``serve --prefix-cache-bytes``).
DEFAULT_PREFIX_CACHE_BYTES = 256 << 20
#: Default most prompt tokens prefilled per step, so a long prompt cannot hold the decode steps.
DEFAULT_PREFILL_CHUNK = 256


class EngineClosedError(RuntimeError):
    """The engine was closed before (or while) serving the request."""


class TorchEngine:
    """Serves a Hugging Face causal LM (plus PEFT LoRA adapters) with batched decoding.

    Build it with :meth:`load`, then ``await start()``. Implements
    :class:`~.base.InferenceEngine`.

    One worker thread owns the model and a :class:`~.batch.Batch` (:meth:`_run`). The asyncio side
    never blocks: it queues a request and receives :class:`~.base.SequenceDelta` events through
    ``loop.call_soon_threadsafe``. A constrained request (:class:`~.base.Constraint`) ends when its
    grammar is complete; its stop strings are not applied, since they could cut the JSON.
    """

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        *,
        device: str = "cpu",
        max_batch_size: int = 8,
        prefix_cache_bytes: int = DEFAULT_PREFIX_CACHE_BYTES,
        prefill_chunk: int = DEFAULT_PREFILL_CHUNK,
        share_prefixes: bool = True,
    ) -> None:
        """Wrap an already loaded model and tokenizer (see :meth:`load` for the settings)."""
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be at least 1, got {max_batch_size}")
        if prefix_cache_bytes < 0:
            raise ValueError(
                f"prefix_cache_bytes must be >= 0 (0 turns the cache off), got {prefix_cache_bytes}"
            )
        if prefill_chunk < 1:
            raise ValueError(f"prefill_chunk must be at least 1, got {prefill_chunk}")
        self.prefill_chunk = prefill_chunk
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.device = torch.device(device)
        self.max_batch_size = max_batch_size
        config = model.config
        self.context_length: int = int(
            getattr(config, "max_position_embeddings", 0) or tokenizer.model_max_length
        )
        self.vocab_size: int = int(config.vocab_size)
        self.eos_token_ids: set[int] = _eos_ids(model, tokenizer)
        self._grammars = GrammarCache(tokenizer, self.vocab_size, sorted(self.eos_token_ids))
        self._adapters: dict[str, Path] = {}
        # PEFT edits the module tree in place: one load or unload at a time, even for different names.
        self._adapter_edit_lock = asyncio.Lock()
        self._stats = EngineStats()
        self._cond = threading.Condition()
        self._pending: deque[Row] = deque()
        self._prefix_cache = PrefixCache(prefix_cache_bytes)
        self.share_prefixes = share_prefixes and _use_shared_prefix_attention(self.model)
        self._batch = Batch(
            model=self.model,
            eos_token_ids=self.eos_token_ids,
            device=self.device,
            prefix_cache=self._prefix_cache,
            share_prefixes=self.share_prefixes,
            merge_prefills=share_prefixes,
        )
        self._prefill_rows: list[Row] = []  # admitted, their prompt being prefilled (in chunks)
        self._generations: dict[str, int] = {}  # adapter name -> loads so far (the prefix-cache scope)
        self._pause_requests = 0
        self._in_step = False
        self._prefilling = 0  # rows admitted in the current step, not merged into the batch yet
        self._closed = False
        self._thread: threading.Thread | None = None
        # work run on the decode thread between steps (run_exclusive): (fn, args, its future)
        self._exclusive: deque[tuple[Callable[..., Any], tuple[Any, ...], concurrent.futures.Future[Any]]] = (
            deque()
        )

    @classmethod
    def load(
        cls,
        model_path: Path,
        *,
        device: str = "cpu",
        max_batch_size: int = 8,
        num_threads: int | None = None,
        prefix_cache_bytes: int = DEFAULT_PREFIX_CACHE_BYTES,
        prefill_chunk: int = DEFAULT_PREFILL_CHUNK,
        share_prefixes: bool = True,
    ) -> TorchEngine:
        """Load a Hugging Face model folder (e.g. from :func:`~...bundled.resolve_model_path`).

        Blocking (a few seconds for the bundled model): call it before serving or in a thread.

        Args:
            model_path: the model folder.
            device: ``"cpu"`` (fp32) or a CUDA device (bf16).
            max_batch_size: the most sequences decoded together.
            num_threads: torch's intra-op threads for this process. ``None`` reads
                ``$ART_ADAPTERS_TORCH_THREADS``, else keeps torch's default (one per core). On
                a CPU shared with other busy processes, 1 can be ten times faster: torch's
                spinning worker threads then wait on each other.
            prefix_cache_bytes: memory for keys and values of prompts (and finished
                conversations) kept for reuse by later prompts that start the same way, under
                the same weights (base or ``adapter@step``); least recently used evicted; 0: off.
            prefill_chunk: the most prompt tokens prefilled per step; the running rows decode
                between chunks, so a long prompt delays them by one chunk's time at most.
            share_prefixes: prefill the common start of prompts admitted together once, and
                hold the leading tokens all decoding rows share (a group's system prompt, tools
                and question) once, read once per decode step (:mod:`.shared_prefix`; models with
                sliding-window or soft-capped attention decode as before).
        """
        from transformers import AutoModelForCausalLM

        from ...bundled import load_tokenizer

        set_torch_threads(num_threads)
        started = time.monotonic()
        dtype = torch.float32 if device == "cpu" else torch.bfloat16
        model = AutoModelForCausalLM.from_pretrained(str(model_path), dtype=dtype, local_files_only=True)
        model.to(device)
        tokenizer = load_tokenizer(Path(model_path))
        logger.info("loaded %s on %s in %.1f s", model_path, device, time.monotonic() - started)
        return cls(
            model, tokenizer, device=device, max_batch_size=max_batch_size,
            prefix_cache_bytes=prefix_cache_bytes, prefill_chunk=prefill_chunk, share_prefixes=share_prefixes,
        )  # fmt: skip

    # ---- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        """Start the decode loop (idempotent)."""
        if self._closed:
            raise EngineClosedError("the engine is closed")
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="torch-engine", daemon=True)
            self._thread.start()

    async def close(self) -> None:
        """Stop the decode loop; waiting and running requests fail with :class:`EngineClosedError`."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)
            self._thread = None
        self._grammars.close()
        error = EngineClosedError("the engine was closed")
        while self._exclusive:
            self._exclusive.popleft()[2].set_exception(error)
        for row in list(self._pending) + self._prefill_rows + list(self._batch.rows):
            row.job.fail(error)
        self._pending.clear()
        self._prefill_rows = []
        self._batch.clear()
        self._prefix_cache.clear()

    @property
    def stats(self) -> EngineStats:
        """A copy of the engine's counters, with the choices running and waiting now."""
        with self._cond:
            waiting = sum(1 for row in self._pending if not (row.job.done or row.job.cancelled))
            running = len(self._batch.rows) + len(self._prefill_rows) + self._prefilling
            cache = self._prefix_cache.stats
            batch = self._batch
            return replace(
                self._stats, running_sequences=running, waiting_sequences=waiting,
                prompt_tokens=batch.prompt_tokens, prefill_tokens=batch.prefill_tokens,
                max_step_tokens=batch.max_step_tokens, prefix_cache_hits=cache.hits,
                prefix_cache_hit_tokens=cache.hit_tokens,
                prefix_cache_hit_rate=round(cache.hit_tokens / cache.looked_up_tokens, 4)
                if cache.looked_up_tokens else 0.0,
                prefix_cache_bytes=cache.bytes, prefix_cache_max_bytes=cache.max_bytes,
                prefix_cache_entries=cache.entries, prefix_cache_evictions=cache.evictions,
                shared_prefix_steps=batch.shared_steps, shared_prefix_reads_saved=batch.shared_reads_saved,
            )  # fmt: skip

    # ---- requests ----------------------------------------------------------------------

    async def generate(self, request: GenerationRequest) -> list[GeneratedSequence]:
        """Sample ``request.n`` choices together; raises ``ValueError`` for a bad request."""
        n = request.n
        token_ids: list[list[int]] = [[] for _ in range(n)]
        logprobs: list[list[float]] = [[] for _ in range(n)]
        tops: list[list[list[tuple[int, float]]]] = [[] for _ in range(n)]
        texts: list[list[str]] = [[] for _ in range(n)]
        finish: list[Any] = [None] * n
        eos = [False] * n
        cached = [0] * n
        async for delta in self.stream(request):
            i = delta.index
            cached[i] += delta.cached_tokens
            token_ids[i] += delta.token_ids
            logprobs[i] += delta.logprobs
            texts[i].append(delta.text)
            if delta.top_logprobs:
                tops[i] += delta.top_logprobs
            if delta.finish_reason is not None:
                finish[i] = delta.finish_reason
            eos[i] = eos[i] or delta.eos
        return [
            GeneratedSequence(
                index=i,
                token_ids=token_ids[i],
                logprobs=logprobs[i],
                text="".join(texts[i]),
                finish_reason=finish[i],
                top_logprobs=tops[i] if request.params.top_logprobs > 0 else None,
                eos=eos[i],
                cached_tokens=cached[i],
            )
            for i in range(n)
        ]

    async def stream(self, request: GenerationRequest) -> AsyncIterator[SequenceDelta]:
        """Yield the choices' output as it is decoded (deltas of all choices interleaved).

        Each choice's text deltas concatenate to its final text; its last delta carries the
        ``finish_reason``. Leaving the loop early cancels the request.
        """
        self._validate(request)
        compiled = None
        if request.constraint is not None:  # milliseconds to seconds: on the cache's own bounded pool
            compiled = await self._grammars.compile_async(request.constraint)
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[SequenceDelta | BaseException | None] = asyncio.Queue()

        def emit(event: SequenceDelta | BaseException | None) -> None:
            with contextlib.suppress(RuntimeError):  # the loop is gone: nobody is listening
                loop.call_soon_threadsafe(queue.put_nowait, event)

        job = Job(request=request, emit=emit, compiled_grammar=compiled, remaining=request.n)
        self._submit(job)
        try:
            while True:
                event = await queue.get()
                if event is None:
                    return
                if isinstance(event, BaseException):
                    raise event
                yield event
        finally:
            if not job.done:
                job.cancelled = True

    def _validate(self, request: GenerationRequest) -> None:
        """Check a request before it is queued (its constraint is compiled separately)."""
        if self._closed:
            raise EngineClosedError("the engine is closed")
        if self._thread is None:
            raise RuntimeError("the engine is not started: await engine.start() first")
        check_request(request, self.vocab_size, self.context_length, self._adapters)
        validate_adjustments(request.params, self.vocab_size)

    def _submit(self, job: Job) -> None:
        """Queue a validated request's choices for the decode loop."""
        request = job.request
        seed = request.params.seed
        rows = []
        for index in range(request.n):
            generator = None
            if request.params.temperature > 0:
                # Choice i of seed s gets its own stream, unrelated to choice 0 of seed s + 1.
                stream_seed = (
                    (seed * 1_000_003 + index) % 2**63 if seed is not None else random.getrandbits(63)
                )
                generator = torch.Generator().manual_seed(stream_seed)
            decoder = (
                ConstrainedDecoder(job.compiled_grammar, self.vocab_size, self.tokenizer)
                if job.compiled_grammar is not None
                else None
            )
            tracker = TextTracker(
                self.tokenizer,
                () if decoder is not None else request.params.stop,
                min_tokens=request.params.min_tokens,
            )
            adjuster = LogitAdjuster.for_params(request.params, request.prompt_token_ids, self.eos_token_ids)
            rows.append(
                Row(job=job, index=index, tracker=tracker, generator=generator, decoder=decoder,
                    adjuster=adjuster)
            )  # fmt: skip
        with self._cond:
            if self._closed:
                raise EngineClosedError("the engine is closed")
            self._pending.extend(rows)
            self._stats.requests += 1
            self._stats.sequences += len(rows)
            self._cond.notify_all()

    # ---- adapters ----------------------------------------------------------------------

    @property
    def adapters(self) -> set[str]:
        """The names of the loaded LoRA adapters."""
        return set(self._adapters)

    async def load_adapter(self, name: str, path: Path) -> None:
        """Load a PEFT LoRA adapter folder under ``name`` (replacing one of the same name)."""
        path = Path(path)
        if not name or name == "__base__":
            raise ValueError(f"invalid adapter name {name!r}")
        if not (path / "adapter_config.json").is_file():
            raise FileNotFoundError(f"{path} is not a PEFT adapter folder: it has no adapter_config.json")
        try:
            peft_type = json.loads((path / "adapter_config.json").read_text()).get("peft_type")
        except (OSError, ValueError) as exc:
            raise ValueError(f"cannot read {path / 'adapter_config.json'}: {exc}") from exc
        if peft_type != "LORA":
            raise ValueError(f"only LoRA adapters can be served; {path} holds a {peft_type} adapter")
        if name in self._adapters:
            await self.unload_adapter(name)
        async with self._adapter_edit_lock, self.paused():
            await self.run_exclusive(self._load_adapter_sync, name, path)
        self._adapters[name] = path
        logger.info("loaded adapter %s from %s", name, path)

    def _load_adapter_sync(self, name: str, path: Path) -> None:
        """Attach the adapter's LoRA weights to the model (decode loop paused)."""
        from peft import PeftModel

        self._generations[name] = self._generations.get(name, 0) + 1  # new weights: a new cache scope
        self._prefix_cache.invalidate(name)
        if hasattr(self.model, "peft_config"):
            self.model.load_adapter(str(path), adapter_name=name, is_trainable=False)
        else:
            self.model = PeftModel.from_pretrained(
                self.model, str(path), adapter_name=name, is_trainable=False
            )
        self.model.eval()
        self._batch.model = self.model
        # Requests for any adapters share batches (PEFT's adapter_names): make sure this one can,
        # so a later batch never fails because of it.
        try:
            with torch.inference_mode():
                ids = torch.tensor([[min(self.eos_token_ids)]] * 2, device=self.device)
                self.model(input_ids=ids, adapter_names=["__base__", name])
        except Exception as exc:
            self._unload_adapter_sync(name)
            raise ValueError(f"the adapter in {path} cannot be served in a mixed batch: {exc}") from exc
        refreeze(f"loading adapter {name}")  # its modules out of later full collections

    async def unload_adapter(self, name: str) -> None:
        """Unload an adapter once the requests already using it have finished."""
        if name not in self._adapters:
            raise ValueError(f"unknown adapter {name!r}; loaded: {sorted(self._adapters)}")
        del self._adapters[name]  # new requests for it are refused from now on
        while self._uses_adapter(name):
            await asyncio.sleep(0.05)
        async with self._adapter_edit_lock, self.paused():
            await self.run_exclusive(self._unload_adapter_sync, name)
        logger.info("unloaded adapter %s", name)

    def _uses_adapter(self, name: str) -> bool:
        with self._cond:
            rows = list(self._pending) + self._prefill_rows + list(self._batch.rows)
        return any(
            row.job.request.adapter == name and not row.job.done and not row.job.cancelled for row in rows
        )

    def _unload_adapter_sync(self, name: str) -> None:
        """Remove the adapter; with none left, give back the plain base model."""
        self._prefix_cache.invalidate(name)
        remaining = [a for a in self.model.peft_config if a != name]
        if remaining:
            self.model.set_adapter(remaining[0])
            self.model.delete_adapter(name)
        else:
            self.model = self.model.unload()
        self.model.eval()
        self._batch.model = self.model

    # ---- pausing -----------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def paused(self) -> AsyncIterator[None]:
        """Hold decoding: waits for the running step to end, then no step starts until exit.

        Requests keep queueing meanwhile and resume afterwards (training uses this to have
        the CPU to itself).
        """
        with self._cond:
            self._pause_requests += 1
        try:
            await asyncio.to_thread(self._wait_idle)
            yield
        finally:
            with self._cond:
                self._pause_requests -= 1
                self._cond.notify_all()

    def _wait_idle(self) -> None:
        with self._cond:
            while self._in_step:
                self._cond.wait()

    async def run_exclusive(self, fn: Callable[..., _T], *args: Any) -> _T:
        """Run ``fn(*args)`` on the decode loop's own thread, between two steps, and return its result.

        For heavy torch work that is not decoding: a training step, an adapter load. OpenMP keeps
        a team of worker threads per OS thread that has run parallel torch code, and once more of
        them exist than CPUs, every team stops spin-waiting between parallel regions: after one
        training step in another thread, each decode step here took 25% longer for the rest of
        the process (measured: 113 -> 138-144 ms for 32 rows). On this one thread there is one
        team. ``fn`` runs outside inference mode (so it may train) and at the decode thread's
        priority; decoding waits meanwhile (hold :meth:`paused` around it to keep it waiting
        after). Before :meth:`start`, ``fn`` runs in a worker thread instead.

        Raises:
            EngineClosedError: the engine was closed before ``fn`` ran.
            Exception: whatever ``fn`` raised.
        """
        if self._thread is None:
            if self._closed:
                raise EngineClosedError("the engine is closed")
            return await asyncio.to_thread(fn, *args)
        future: concurrent.futures.Future[_T] = concurrent.futures.Future()
        with self._cond:
            if self._closed:
                raise EngineClosedError("the engine is closed")
            self._exclusive.append((fn, args, future))
            self._cond.notify_all()
        return await asyncio.wrap_future(future)

    def _run_exclusive_work(self) -> None:
        """Run the queued :meth:`run_exclusive` work (decode thread), outside inference mode."""
        while True:
            with self._cond:
                if not self._exclusive:
                    return
                fn, args, future = self._exclusive.popleft()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                with torch.inference_mode(False):
                    result = fn(*args)
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting caller; the loop goes on
                future.set_exception(exc)
            else:
                future.set_result(result)

    # ---- the decode loop (worker thread) -----------------------------------------------

    def _run(self) -> None:
        """Admit, prefill, decode, report; until closed.

        Each loop admits waiting choices (:meth:`_admit`), prefills at most ``prefill_chunk``
        prompt tokens of the admitted ones (reusing the prefix cache; a longer prompt takes
        several loops), merges those whose prompt is done into the running batch and runs one
        decode step for every row. Requests for different LoRA adapters share a batch through
        PEFT's ``adapter_names``. A failure in a forward pass fails the requests in that pass
        (their awaiters get the exception) and the loop goes on; a failure while sampling one
        row fails only that row's request.
        """
        lower_thread_priority()
        with torch.inference_mode():
            while True:
                with self._cond:
                    while (
                        not self._closed
                        and not self._exclusive
                        and (
                            self._pause_requests > 0
                            or (not self._pending and not self._batch.rows and not self._prefill_rows)
                        )
                    ):
                        self._cond.wait()
                    if self._closed:
                        return
                    exclusive = bool(self._exclusive)
                    if not exclusive:
                        self._in_step = True
                if exclusive:
                    self._run_exclusive_work()
                    continue
                new_rows: list[Row] = []
                try:
                    self._batch.drop([row for row in self._batch.rows if row.job.done or row.job.cancelled])
                    with self._cond:
                        try:
                            new_rows, victims = self._admit()
                        except Exception:  # the waiting requests fail below: no retrying them forever
                            new_rows = [row for row in self._pending if not row.job.done]
                            raise
                        self._prefilling = len(new_rows)
                    if victims:
                        self._preempt(victims)
                    self._step(new_rows)
                except Exception as exc:  # never let the loop die, nor retry a broken batch forever
                    logger.exception("the decode loop hit an unexpected error")
                    self._fail_rows(new_rows + self._prefill_rows + list(self._batch.rows), exc)
                    self._prefill_rows = []
                    self._batch.clear()
                finally:
                    with self._cond:
                        self._in_step = False
                        self._prefilling = 0
                        self._stats.max_batch_size_seen = max(
                            self._stats.max_batch_size_seen, len(self._batch.rows)
                        )
                        self._cond.notify_all()

    def _admit(self) -> tuple[list[Row], list[Row]]:
        """Choose waiting rows to admit and running rows to preempt for them (:func:`~.scheduler.admit`).

        Holds the lock. Returns ``(admitted, preempted)``; the preempted rows wait again.
        """
        waiting = [row for row in self._pending if not (row.job.done or row.job.cancelled)]
        chosen, victims = admit(
            waiting, self._prefill_rows, self._batch.rows, self.max_batch_size, max_wait_s=MAX_WAIT_S
        )
        taken = {id(row) for row in chosen}
        self._pending = deque([row for row in waiting if id(row) not in taken] + victims)
        self._stats.preemptions += len(victims)
        for row in chosen:
            row.ran = 0
            row.scope = f"{row.adapter}#{self._generations.get(row.adapter, 0)}"
        return chosen, victims

    def _preempt(self, victims: list[Row]) -> None:
        """Take ``victims`` out of the batch; they keep their keys and values and wait to resume."""
        logger.info("preempting %d choice(s) to give a waiting request its share of the batch", len(victims))
        self._batch.drop(victims, keep_kv=True)

    def _step(self, new_rows: list[Row]) -> None:
        """Prefill (a chunk of) the admitted rows, then one decode step for the whole batch."""
        batch = self._batch
        self._prefill_rows.extend(new_rows)
        with self._cond:
            self._prefilling = 0
        prefilling = [row for row in self._prefill_rows if not (row.job.done or row.job.cancelled)]
        self._prefill_rows = prefilling
        if prefilling:
            try:
                joined, finished = batch.prefill(prefilling, self.prefill_chunk)
            except Exception as exc:
                logger.exception("prefill failed")
                self._fail_rows(prefilling, exc)
                self._prefill_rows = []
                batch.drop([row for row in batch.rows if row.job.done])
                return
            done = {id(row) for row in joined}
            self._prefill_rows = [row for row in prefilling if id(row) not in done]
            self._count(joined)
            # and the requests cancelled meanwhile (a client gone during the prefill): no more steps
            batch.drop(finished + [row for row in batch.rows if row.job.done or row.job.cancelled])
        if not batch.rows:
            return
        rows = list(batch.rows)
        try:
            finished = batch.decode()
        except Exception as exc:
            logger.exception("a decode step failed")
            self._fail_rows(rows, exc)
            batch.clear()
            return
        self._count(rows)
        batch.drop(finished)

    def _count(self, rows: list[Row]) -> None:
        """Update the stats after a prefill or decode over ``rows``."""
        with self._cond:
            self._stats.steps += 1
            self._stats.tokens_generated += len(rows)
            self._stats.max_batch_size_seen = max(self._stats.max_batch_size_seen, len(self._batch.rows))

    def _fail_rows(self, rows: list[Row], exc: Exception) -> None:
        """Fail the requests of ``rows`` (and drop their other choices still waiting)."""
        jobs = {id(row.job): row.job for row in rows}
        with self._cond:
            for job in jobs.values():
                if not job.done:
                    self._stats.failed_requests += 1
                job.fail(exc)
            self._pending = deque(row for row in self._pending if not row.job.done)


def _eos_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> set[int]:
    """Every token id that ends a sequence: the tokenizer's EOS and the generation config's."""
    ids: set[int] = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    generation_config = getattr(model, "generation_config", None)
    configured = getattr(generation_config, "eos_token_id", None)
    if isinstance(configured, int):
        ids.add(configured)
    elif configured:
        ids.update(int(i) for i in configured)
    if not ids:
        raise ValueError("the model defines no EOS token")
    return ids


def _use_shared_prefix_attention(model: PreTrainedModel) -> bool:
    """Run ``model`` with :mod:`.shared_prefix`'s attention where its layers allow it; whether it now does."""
    if not supports_shared_prefix(model.config):
        logger.info("decoding without a shared prefix: not every layer of the model attends to the whole context")
        return False
    register_attention()
    try:
        model.set_attn_implementation(ATTENTION_NAME)
    except (ValueError, ImportError) as exc:
        logger.warning("decoding without a shared prefix: %s", exc)
        return False
    return True
