"""A deterministic inference engine without model weights, for tests whose subject is not the model.

:class:`FakeEngine` implements the backend's ``InferenceEngine`` protocol (plus the adapter and pause
methods the server uses) over the model's real tokenizer: the routes, chat template, tool parser,
token records, registry and checkpoints around it are the real ones. What it "samples" follows a tiny
deterministic scheme instead of a forward pass:

- a reply is 1 to :data:`MAX_WORDS` whole-word tokens (``" hello"``, ``" two"``...), then the
  end-of-sequence token; at ``max_tokens`` it stops with ``"length"`` instead;
- greedy (``temperature == 0``) picks by the prompt (the same prompt gets the same reply), sampling by
  ``seed`` (and the choice index) when given, else by how many times the same prompt was sampled
  before, so replies at temperature 1 differ in length and words, and a group of rollouts of one
  prompt gets the same replies whatever order its requests arrive in;
- a constrained request (forced tool call, ``response_format``) yields ``prefix + JSON + suffix``
  with a JSON instance of the schema (:func:`schema_instance`); the constraint is compiled by the real
  engine's ``GrammarCache`` (xgrammar) and those tokens must be accepted by its grammar, so a schema
  the real engine refuses is refused here too;
- stop strings, ``min_tokens`` and streaming deltas use the backend's own ``TextTracker``;
- a token's log-probability is a fixed function of its id, scaled by the temperature, and
  ``top_logprobs`` lists it first with lower-scored alternatives.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import random
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

from art_adapters_backend.serving.engine.base import (
    EngineStats,
    GeneratedSequence,
    GenerationRequest,
    SequenceDelta,
    check_request,
)
from art_adapters_backend.serving.engine.text import TextTracker

__all__ = ["MAX_WORDS", "WORDS", "FakeEngine", "schema_instance"]

logger = logging.getLogger(__name__)

#: The words a reply is made of (each one token, with its leading space, in the bundled tokenizer).
WORDS = ("hello", "the", "answer", "is", "one", "two", "three", "four", "five", "yes", "no", "ok",
         "done", "good", "day", "seven", "nine", "ten", "sure", "here")  # fmt: skip
#: The most words in an unconstrained reply.
MAX_WORDS = 8


def _digest(*parts: Any) -> int:
    """A stable 64-bit number from ``parts`` (Python's ``hash`` is salted per process)."""
    data = json.dumps(parts, default=str).encode("utf-8")
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


def _resolve(root: Any, ref: str) -> Any:
    """The subschema a local ``$ref`` (``#/$defs/...``, a JSON pointer into ``root``) points at."""
    node = root
    for part in ref.removeprefix("#").strip("/").split("/"):
        if part:
            node = node.get(part.replace("~1", "/").replace("~0", "~"), {}) if isinstance(node, dict) else {}
    return node


def schema_instance(schema: Any, rng: random.Random, root: Any = None) -> Any:
    """A small value matching the JSON ``schema`` (the subset tool and response schemas use)."""
    if not isinstance(schema, dict):
        return None
    root = schema if root is None else root
    if "$ref" in schema:
        return schema_instance(_resolve(root, str(schema["$ref"])), rng, root)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        if schema.get(key):
            options = [o for o in schema[key] if not (isinstance(o, dict) and o.get("type") == "null")]
            return schema_instance((options or schema[key])[0], rng, root)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object" or (kind is None and "properties" in schema):
        properties: dict[str, Any] = schema.get("properties", {})
        return {name: schema_instance(sub, rng, root) for name, sub in properties.items()}
    if kind == "array":
        count = max(int(schema.get("minItems", 1)), 1)
        if "maxItems" in schema:
            count = min(count, int(schema["maxItems"]))
        return [schema_instance(schema.get("items", {}), rng, root) for _ in range(count)]
    if kind == "integer":
        low = int(schema.get("minimum", 1))
        return max(low, min(int(schema.get("maximum", low + 8)), low + rng.randrange(9)))
    if kind == "number":
        low = float(schema.get("minimum", 1))
        return max(low, min(float(schema.get("maximum", low + 8)), low + rng.randrange(9)))
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    word = WORDS[rng.randrange(len(WORDS))]
    length = int(schema.get("minLength", 0))
    text = (word * (length // len(word) + 1))[: max(length, len(word))]
    return text[: int(schema["maxLength"])] if "maxLength" in schema else text


class FakeEngine:
    """A deterministic ``InferenceEngine`` on the real tokenizer (see the module docstring).

    Args:
        tokenizer: the served model's tokenizer.
        context_length: the context length it reports (the model's own by default, see :meth:`for_model`).
    """

    def __init__(self, tokenizer: Any, *, context_length: int = 8192, vocab_size: int | None = None) -> None:
        self.tokenizer = tokenizer
        self.context_length = context_length
        self.vocab_size = vocab_size or len(tokenizer)
        self.eos_token_id = int(tokenizer.eos_token_id)
        self.words = [self._word_id(w) for w in WORDS]
        self.adapters: dict[str, Path] = {}
        self._stats = EngineStats()
        self._draws: dict[int, int] = {}  # per prompt: how many unseeded samples were drawn
        self._closed = False
        self._started = False
        self._grammars: Any = None  # the real engine's GrammarCache, built on the first constraint

    @classmethod
    def for_model(cls, model_path: Path, tokenizer: Any) -> FakeEngine:
        """The engine of a model folder: tokenizer and ``max_position_embeddings`` (an ``EngineFactory``)."""
        config = json.loads((Path(model_path) / "config.json").read_text("utf-8"))
        return cls(tokenizer, context_length=int(config.get("max_position_embeddings") or 8192),
                   vocab_size=config.get("vocab_size"))  # fmt: skip

    def _word_id(self, word: str) -> int:
        ids = self.tokenizer.encode(" " + word, add_special_tokens=False)
        if len(ids) != 1:
            raise ValueError(f"{word!r} is {len(ids)} tokens in this tokenizer; the fake engine needs one")
        return int(ids[0])

    # ---- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Nothing to load: marks the engine started."""
        self._started = True

    async def close(self) -> None:
        """Refuse requests from now on."""
        self._closed = True

    @property
    def stats(self) -> EngineStats:
        """The engine's counters (requests, sequences, tokens)."""
        return self._stats

    @contextlib.asynccontextmanager
    async def paused(self) -> AsyncIterator[None]:
        """Nothing runs between requests, so a pause only marks the section (training uses it)."""
        yield

    async def load_adapter(self, name: str, path: Path) -> None:
        """Accept a LoRA checkpoint folder (it must hold ``adapter_config.json``) under ``name``."""
        path = Path(path)
        if not (path / "adapter_config.json").is_file():
            raise FileNotFoundError(f"{path} is not a PEFT adapter folder: it has no adapter_config.json")
        self.adapters[name] = path

    async def unload_adapter(self, name: str) -> None:
        """Forget the adapter ``name``."""
        self.adapters.pop(name, None)

    # ---- requests --------------------------------------------------------------------------

    def _validate(self, request: GenerationRequest) -> None:
        if self._closed:
            raise RuntimeError("the engine is closed")
        check_request(request, self.vocab_size, self.context_length, self.adapters)

    def _rng(self, request: GenerationRequest, index: int) -> random.Random:
        params = request.params
        if params.temperature == 0:
            return random.Random(_digest(request.prompt_token_ids, request.adapter, index))
        if params.seed is not None:
            return random.Random(_digest(request.prompt_token_ids, params.seed, index))
        prompt = _digest(request.prompt_token_ids, request.adapter)
        self._draws[prompt] = draw = self._draws.get(prompt, 0) + 1
        return random.Random(_digest(prompt, draw, index))

    def _compile(self, request: GenerationRequest) -> Any:
        """The real engine's compiled grammar of the request's constraint (its errors are the engine's)."""
        from art_adapters_backend.serving.engine.constraint import GrammarCache

        if self._grammars is None:
            self._grammars = GrammarCache(self.tokenizer, self.vocab_size, [self.eos_token_id])
        return self._grammars.compile(request.constraint)

    def _planned(self, request: GenerationRequest, rng: random.Random, grammar: Any) -> list[int]:
        """The token ids this choice would produce without a length limit (EOS last)."""
        if request.constraint is not None:
            import xgrammar as xgr

            c = request.constraint
            text = c.prefix + json.dumps(schema_instance(c.json_schema, rng)) + c.suffix
            ids = [*self.tokenizer.encode(text, add_special_tokens=False), self.eos_token_id]
            matcher = xgr.GrammarMatcher(grammar)
            if not all(matcher.accept_token(t) for t in ids) or not matcher.is_terminated():
                raise RuntimeError(f"the fake engine's constrained output {text!r} does not fit the grammar")
            return ids
        count = max(rng.randint(1, MAX_WORDS), request.params.min_tokens)
        return [self.words[rng.randrange(len(self.words))] for _ in range(count)] + [self.eos_token_id]

    def _logprob(self, token_id: int, temperature: float) -> float:
        return -(0.05 + (token_id * 2654435761 % 1000) / 400) / (temperature if temperature > 0 else 1.0)

    def _choice(self, request: GenerationRequest, index: int, grammar: Any) -> Iterator[SequenceDelta]:
        params = request.params
        stop = () if request.constraint is not None else params.stop
        tracker = TextTracker(self.tokenizer, stop, min_tokens=params.min_tokens)
        planned = self._planned(request, self._rng(request, index), grammar)
        for position, token_id in enumerate(planned[: params.max_tokens]):
            eos = token_id == self.eos_token_id and position == len(planned) - 1
            if not eos:
                tracker.add(token_id)
            last = eos or tracker.stopped or position == params.max_tokens - 1
            logprob = self._logprob(token_id, params.temperature)
            top = None
            if params.top_logprobs:
                others = [w for w in self.words if w != token_id][: params.top_logprobs - 1]
                top = [[(token_id, logprob), *((w, logprob - 1.0 - i) for i, w in enumerate(others))]]
            finish = ("stop" if eos or tracker.stopped else "length") if last else None
            self._stats.tokens_generated += 1
            yield SequenceDelta(
                index=index, token_ids=[token_id], logprobs=[logprob], text=tracker.delta(final=last),
                finish_reason=finish, top_logprobs=top, eos=eos,
            )  # fmt: skip
            if last:
                return

    async def stream(self, request: GenerationRequest) -> AsyncIterator[SequenceDelta]:
        """Yield each choice's tokens one delta at a time, choices one after the other."""
        self._validate(request)
        grammar = await asyncio.to_thread(self._compile, request) if request.constraint is not None else None
        self._stats.requests += 1
        self._stats.sequences += request.n
        self._stats.max_batch_size_seen = max(self._stats.max_batch_size_seen, request.n)
        for index in range(request.n):
            for delta in self._choice(request, index, grammar):
                yield delta

    async def generate(self, request: GenerationRequest) -> list[GeneratedSequence]:
        """All ``request.n`` choices at once (the deltas of :meth:`stream`, joined)."""
        out: dict[int, GeneratedSequence] = {}
        async for delta in self.stream(request):
            seq = out.setdefault(delta.index, GeneratedSequence(
                index=delta.index, token_ids=[], logprobs=[], text="", finish_reason="length",
                top_logprobs=[] if request.params.top_logprobs else None,
            ))  # fmt: skip
            seq.token_ids += delta.token_ids
            seq.logprobs += delta.logprobs
            seq.text += delta.text
            if seq.top_logprobs is not None and delta.top_logprobs:
                seq.top_logprobs += delta.top_logprobs
            if delta.finish_reason is not None:
                seq.finish_reason = delta.finish_reason
            seq.eos = seq.eos or delta.eos
        return [out[i] for i in range(request.n)]
