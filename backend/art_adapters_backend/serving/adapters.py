"""``AdapterCache``: which LoRA checkpoints the engine holds, loaded on first use, evicted least recently used.

Every trained step is servable (``name@step``), but the engine keeps only ``max_loaded`` adapters in
memory: a long run would otherwise grow by one adapter per step.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections import Counter, OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import CheckpointUnavailableError

if TYPE_CHECKING:
    from .engine.base import InferenceEngine
    from .registry import ServedModel

__all__ = ["AdapterCache"]

logger = logging.getLogger(__name__)


async def _maybe_await(result: Any) -> None:
    if inspect.isawaitable(result):
        await result


class AdapterCache:
    """The engine's loaded LoRA adapters, at most ``max_loaded`` of them (least recently used go first).

    A request *leases* its adapter (:meth:`acquire`) from the moment its model is resolved until
    its last token is sent (:meth:`release`), and a leased adapter is never evicted, so eviction
    cannot pull weights from under a request that is queued or decoding. When every loaded
    adapter is leased the cache goes over its size for a while rather than make a request wait,
    and shrinks when those requests end.

    A key is only loaded or unloaded while holding its own lock, so a request for an adapter
    that is being evicted waits for the unload to finish and then loads it again.

    Args:
        engine: the inference engine; it must offer ``load_adapter(name, path)`` and
            ``unload_adapter(name)``.
        max_loaded: how many adapters stay loaded once no request uses the others (>= 1).
    """

    def __init__(self, engine: InferenceEngine, max_loaded: int) -> None:
        if max_loaded < 1:
            raise ValueError(f"max_loaded must be at least 1, got {max_loaded}")
        self.engine = engine
        self.max_loaded = max_loaded
        self._loaded: OrderedDict[str, Path] = OrderedDict()  # least recently used first
        self._leases: Counter[str] = Counter()
        self._locks: dict[str, asyncio.Lock] = {}
        self.evictions = 0
        self._shrinking: asyncio.Task[None] | None = None

    @property
    def loaded(self) -> list[str]:
        """The loaded adapter keys, least recently used first."""
        return list(self._loaded)

    @property
    def leases(self) -> dict[str, int]:
        """Open leases per adapter key (requests queued or decoding on it); empty when idle."""
        return dict(self._leases)

    async def acquire(self, served: ServedModel) -> str | None:
        """Load ``served``'s adapter if needed and lease it; ``None`` (no lease) for the base weights.

        Every key returned must be given back with :meth:`release` once the request is over.

        Raises:
            CheckpointUnavailableError: the checkpoint's folder is missing or not a LoRA adapter.
        """
        return await self._ensure(served, lease=True)

    def release(self, key: str | None) -> None:
        """End one lease of ``key`` (``None`` is ignored)."""
        if key is None:
            return
        if self._leases[key] <= 0:
            logger.warning("adapter %s released more often than acquired", key)
            return
        self._leases[key] -= 1
        if self._leases[key] == 0:
            del self._leases[key]
            if len(self._loaded) > self.max_loaded and self._shrinking is None:
                self._shrinking = asyncio.get_running_loop().create_task(self._shrink_later())

    async def preload(self, served: ServedModel) -> str | None:
        """Load ``served``'s adapter (e.g. a checkpoint just written) without leasing it."""
        return await self._ensure(served, lease=False)

    async def unload(self, key: str) -> None:
        """Unload ``key`` now if it is loaded (a deleted checkpoint); the engine lets running requests finish."""
        async with self._lock(key):
            if key in self._loaded:
                await self._unload_locked(key)

    async def _ensure(self, served: ServedModel, *, lease: bool) -> str | None:
        key = served.adapter_key
        if key is None or served.adapter_path is None:
            return None
        async with self._lock(key):
            if key not in self._loaded:
                path = Path(served.adapter_path)
                try:
                    await _maybe_await(self.engine.load_adapter(key, path))  # type: ignore[attr-defined]
                except (OSError, ValueError) as exc:
                    # The folder and the cause (whose text often names the path) go to the server log
                    # only: a client is not told where the server keeps its files.
                    logger.warning("cannot load checkpoint %s from %s: %s", key, path, exc)
                    raise CheckpointUnavailableError(
                        f"checkpoint {key} cannot be loaded ({type(exc).__name__}; the server log names "
                        f"the folder and the cause); restore the folder, or stop serving step "
                        f"{served.step} with POST /art/models/{served.trained_model}/checkpoints/delete",
                        code="checkpoint_unavailable",
                    ) from exc
                self._loaded[key] = path
                logger.info("loaded adapter %s from %s", key, path)
            self._loaded.move_to_end(key)
            if lease:
                self._leases[key] += 1  # taken before any await below, so eviction skips it
        try:
            await self._shrink(keep=key)
        except Exception:  # an engine that fails to unload another adapter must not fail this request
            logger.exception("could not unload idle adapters (%d loaded)", len(self._loaded))
        except asyncio.CancelledError:  # the caller never sees the key: give its lease back
            if lease:
                self.release(key)
            raise
        return key

    async def _shrink_later(self) -> None:
        """Shrink once the request that went over the limit is done (run as a task by :meth:`release`)."""
        try:
            await self._shrink(keep=None)
        except Exception:  # an engine that fails to unload must not take the server down
            logger.exception("could not unload idle adapters")
        finally:
            self._shrinking = None

    async def _shrink(self, keep: str | None) -> None:
        """Evict unleased adapters, least recently used first, until at most ``max_loaded`` remain."""
        while len(self._loaded) > self.max_loaded:
            victim = next((k for k in self._loaded if k != keep and self._leases[k] == 0), None)
            if victim is None:
                logger.debug(
                    "%d adapters loaded (limit %d): all in use, evicting later",
                    len(self._loaded),
                    self.max_loaded,
                )
                return
            async with self._lock(victim):
                if victim in self._loaded and self._leases[victim] == 0:
                    await self._unload_locked(victim)
                    self.evictions += 1

    async def _unload_locked(self, key: str) -> None:
        del self._loaded[key]  # from here on, requests for it wait on its lock and reload it
        await _maybe_await(self.engine.unload_adapter(key))  # type: ignore[attr-defined]
        logger.info("unloaded adapter %s", key)

    def _lock(self, key: str) -> asyncio.Lock:
        return self._locks.setdefault(key, asyncio.Lock())
