"""``ServerState``: what every route shares (engine, template, registry, token records)."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .adapters import AdapterCache
from .chat_template import ChatTemplate
from .records import RecordStore
from .registry import Registry
from .token_text import TokenTexts

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from .config import ServeConfig
    from .engine.base import InferenceEngine

__all__ = ["ServerState"]

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
        template: prompt rendering (ChatML + Hermes-style tools).
        token_texts: token id -> text/bytes for ``logprobs``.
        adapters: the LoRA checkpoints loaded in the engine (leased per request, LRU-evicted).
        started: Unix time the state was built.
    """

    config: ServeConfig
    engine: InferenceEngine
    tokenizer: PreTrainedTokenizerBase
    registry: Registry
    records: RecordStore
    template: ChatTemplate = field(init=False)
    token_texts: TokenTexts = field(init=False)
    started: float = field(default_factory=time.time)
    adapters: AdapterCache = field(init=False)

    def __post_init__(self) -> None:
        from .sampled_turns import SampledTurns

        self.adapters = AdapterCache(self.engine, self.config.max_loaded_adapters)
        self.template = ChatTemplate(self.tokenizer)
        eos = getattr(self.engine, "eos_token_ids", None) or {self.tokenizer.eos_token_id}
        self.template.sampled_turns = SampledTurns(self.records, set(eos))  # exact tokens of issued tool calls
        self.token_texts = TokenTexts(self.tokenizer)

    @classmethod
    async def create(cls, config: ServeConfig) -> ServerState:
        """Load the base model's engine (in a thread) and open the run directory."""
        from .bundled import load_tokenizer, resolve_model_path
        from .engine.torch_engine import TorchEngine

        run_dir = config.run_dir
        run_dir.mkdir(parents=True, exist_ok=True)
        path = await asyncio.to_thread(resolve_model_path, config.base_model, config.cache_dir)
        started = time.perf_counter()
        if config.engine == "vllm":
            from .engine.vllm_engine import VllmEngine

            engine: Any = await asyncio.to_thread(
                VllmEngine.load, path, log_path=run_dir / "vllm.log", max_loras=config.max_loaded_adapters
            )
        else:
            engine = await asyncio.to_thread(
                TorchEngine.load, path, device=config.device, max_batch_size=config.max_batch_size
            )
        await engine.start()
        logger.info(
            "engine for %s loaded from %s in %.1f s", config.base_model, path, time.perf_counter() - started
        )
        tokenizer = getattr(engine, "tokenizer", None) or await asyncio.to_thread(load_tokenizer, path)
        registry = Registry(run_dir, config.base_model)
        records = RecordStore(run_dir / "completions.jsonl")
        return cls(config=config, engine=engine, tokenizer=tokenizer, registry=registry, records=records)

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
            },
            "records": len(self.records),
            "models": len(self.registry.list()),
            "uptime_s": round(time.time() - self.started, 3),
        }

    async def close(self) -> None:
        """Stop the engine and close the record store."""
        try:
            await self.engine.close()
        finally:
            self.records.close()
