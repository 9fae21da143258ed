"""``ServerState``: what every route shares (engine, template, registry, token records)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from art_adapters.files import private_dir

from .freed_memory import FREED_MEMORY
from .gc_pauses import PAUSES
from .http.admission import AdmissionGate
from .serving.adapters import AdapterCache
from .serving.chat_template import ChatTemplate
from .serving.model_family import (
    CHAT_TEMPLATE_FILE,
    ModelFamily,
    resolve_model_family,
    write_serving_settings,
)
from .serving.records import RecordStore
from .serving.registry import Registry
from .serving.token_text import TokenTexts
from .training.checkpoint_leases import CheckpointLeases

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from .config import ServeConfig
    from .serving.engine.base import InferenceEngine
    from .training.trainer import LoraTrainer

#: Builds the engine from the model folder and its tokenizer (a test seam: a fake engine, no weights).
EngineFactory = Callable[[Path, "PreTrainedTokenizerBase"], "InferenceEngine"]
#: Builds the LoRA trainer from the model folder and the device (a test seam: a trainer without torch math).
TrainerFactory = Callable[[Path, str], "LoraTrainer"]

__all__ = ["EngineFactory", "ServerState", "TrainerFactory"]

logger = logging.getLogger(__name__)


@dataclass
class ServerState:
    """The shared state of one server process.

    Attributes:
        config: the server's settings.
        engine: the inference engine (decodes concurrent requests together).
        tokenizer: the base model's tokenizer.
        registry: registered models and their steps (``run_dir/registry.json``).
        records: exact-token records (``run_dir/completions.jsonl``).
        family: the chat template and the tool-call / reasoning parsers (fixed at start-up).
        template: prompt rendering with the family's chat template, as vLLM renders it.
        token_texts: token id -> text/bytes for ``logprobs``.
        adapters: the LoRA checkpoints loaded in the engine (leased per request, LRU-evicted).
        admission: the chat completions in progress, within ``config.limits`` (429 beyond them).
        started: Unix time the state was built.
        trainer_factory: builds the training service's LoRA trainer instead of ``config.trainer``'s
            class (``None``: that class; tests pass a trainer without torch math).
    """

    config: ServeConfig
    engine: InferenceEngine
    tokenizer: PreTrainedTokenizerBase
    registry: Registry
    records: RecordStore
    family: ModelFamily
    template: ChatTemplate = field(init=False)
    token_texts: TokenTexts = field(init=False)
    started: float = field(default_factory=time.time)
    adapters: AdapterCache = field(init=False)
    admission: AdmissionGate = field(init=False)
    checkpoint_leases: CheckpointLeases = field(default_factory=CheckpointLeases)
    trainer_factory: TrainerFactory | None = None

    def __post_init__(self) -> None:
        self.adapters = AdapterCache(self.engine, self.config.max_loaded_adapters)
        self.admission = AdmissionGate(self.config.limits, self.config.max_batch_size)
        self.template = ChatTemplate(self.tokenizer, self.family.chat_template)
        self.token_texts = TokenTexts(self.tokenizer)

    @classmethod
    async def create(
        cls,
        config: ServeConfig,
        *,
        engine_factory: EngineFactory | None = None,
        trainer_factory: TrainerFactory | None = None,
    ) -> ServerState:
        """Load the base model's engine (in a thread) and open the run directory.

        ``engine_factory`` replaces ``config.engine``'s engine and ``trainer_factory`` the trainer:
        the seam the tests' fake engine uses to serve the real app without model weights.
        """
        from .bundled import is_bundled, load_tokenizer, resolve_model_path
        from .serving.engine.torch_engine import TorchEngine

        run_dir = private_dir(config.run_dir)  # 0o700: records, groups, checkpoints are the owner's only
        path = await asyncio.to_thread(resolve_model_path, config.base_model, config.cache_dir)
        # The template and parsers are checked before the (slow) engine load: a bad flag fails fast.
        family_tokenizer = await asyncio.to_thread(load_tokenizer, path)
        family = resolve_model_family(
            family_tokenizer,
            bundled=is_bundled(config.base_model),
            chat_template=config.chat_template,
            tool_call_parser=config.tool_call_parser,
            reasoning_parser=config.reasoning_parser,
        )
        write_serving_settings(run_dir, config.base_model, path, family)
        started = time.perf_counter()
        if engine_factory is not None:
            engine: Any = await asyncio.to_thread(engine_factory, path, family_tokenizer)
        elif config.engine == "vllm":
            from .serving.engine.vllm_engine import VllmEngine

            engine = await asyncio.to_thread(
                VllmEngine.load,
                path,
                family_flags=family.vllm_flags(run_dir / CHAT_TEMPLATE_FILE),
                log_path=run_dir / "vllm.log",
                max_loras=config.max_loaded_adapters,
            )
        else:
            engine = await asyncio.to_thread(
                TorchEngine.load, path, device=config.device, max_batch_size=config.max_batch_size,
                prefix_cache_bytes=config.prefix_cache_bytes, share_prefixes=config.shared_prefixes,
            )
        await engine.start()
        logger.info(
            "engine for %s loaded from %s in %.1f s", config.base_model, path, time.perf_counter() - started
        )
        tokenizer = getattr(engine, "tokenizer", None) or await asyncio.to_thread(load_tokenizer, path)
        registry = Registry(run_dir, config.base_model)
        records = RecordStore(run_dir / "completions.jsonl")
        return cls(config=config, engine=engine, tokenizer=tokenizer, registry=registry, records=records,
                   family=family, trainer_factory=trainer_factory)  # fmt: skip

    @property
    def context_length(self) -> int:
        """The model's context length in tokens."""
        return int(self.engine.context_length)

    def stats(self) -> dict[str, Any]:
        """Engine counters (if the engine keeps them) and store sizes."""
        engine_stats = getattr(self.engine, "stats", None)
        if callable(engine_stats):
            engine_stats = engine_stats()
        if engine_stats is not None and not isinstance(engine_stats, dict):
            engine_stats = dict(vars(engine_stats))
        return {
            "engine": engine_stats,
            "adapters": {
                "loaded": self.adapters.loaded,
                "max_loaded": self.adapters.max_loaded,
                "evictions": self.adapters.evictions,
                "leases": self.adapters.leases,
            },
            "admission": self.admission.stats(),
            "records": len(self.records),
            "models": len(self.registry.list()),
            "uptime_s": round(time.time() - self.started, 3),
            "gc": PAUSES.stats(),
            "memory": FREED_MEMORY.stats(),
        }

    async def close(self) -> None:
        """Stop the engine and close the record store."""
        try:
            await self.engine.close()
        finally:
            self.records.close()
