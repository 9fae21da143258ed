"""Schema-constrained decoding with xgrammar: output = prefix + JSON(schema) + suffix.

:class:`GrammarCache` compiles a :class:`~.base.Constraint` once (cached by its content) into
an xgrammar grammar; :class:`ConstrainedDecoder` follows one sequence through it, giving the
allowed-token mask before each step and accepting the token sampled.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import torch

from ...errors import BadRequestError, ServerBusyError
from ...threads import lower_thread_priority
from .base import Constraint

if TYPE_CHECKING:
    import xgrammar as xgr
    from transformers import PreTrainedTokenizerBase

__all__ = ["ConstrainedDecoder", "ConstraintError", "GrammarCache"]


class ConstraintError(BadRequestError, ValueError):
    """A constraint's JSON schema cannot be compiled; the message says why (a 400)."""

    code = "invalid_value"


class GrammarCache:
    """Compiles constraints for one tokenizer, keeping the most recent ones.

    A constraint becomes the grammar ``"prefix" JSON "suffix"``. JSON is generated without free
    whitespace (``", "`` and ``": "`` separators), so the model cannot pad forever, and with the
    schema's properties only (strict mode).

    Thread-safe. :meth:`compile_async` compiles on the cache's own ``threads`` (not the event
    loop's default pool, so slow compiles never delay other work) with at most ``max_waiting``
    compiles running or queued; :meth:`close` stops those threads.
    """

    def __init__(
        self, tokenizer: PreTrainedTokenizerBase, vocab_size: int, stop_token_ids: list[int], size: int = 64,
        *, threads: int = 1, max_waiting: int = 8,
    ) -> None:  # fmt: skip
        """Build the tokenizer's xgrammar view (vocab_size = the model's logits width).

        Raises:
            ValueError: ``threads`` or ``max_waiting`` is below 1.
        """
        if threads < 1 or max_waiting < 1:
            raise ValueError(f"threads and max_waiting must be at least 1, got {threads} and {max_waiting}")
        import xgrammar as xgr

        self.vocab_size = vocab_size
        self._info = xgr.TokenizerInfo.from_huggingface(
            tokenizer, vocab_size=vocab_size, stop_token_ids=stop_token_ids
        )
        self._compiler = xgr.GrammarCompiler(self._info, max_threads=1)
        self._cache: OrderedDict[str, xgr.CompiledGrammar] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()
        self._executor = ThreadPoolExecutor(
            max_workers=threads, thread_name_prefix="grammar-compile", initializer=lower_thread_priority
        )
        self.max_waiting = max_waiting
        self._waiting = 0  # compiles submitted and not finished (under _lock)

    async def compile_async(self, constraint: Constraint) -> xgr.CompiledGrammar:
        """:meth:`compile` on the cache's own threads (a cached grammar is answered at once).

        Raises:
            ConstraintError: as :meth:`compile`.
            ServerBusyError: ``max_waiting`` compiles are already running or queued (a 429).
        """
        key = _key(constraint)
        with self._lock:
            if key is not None and key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
            if self._waiting >= self.max_waiting:
                raise ServerBusyError(
                    f"{self._waiting} output constraints (tool_choice, response_format) are being compiled; "
                    "retry shortly", retry_after=1,
                )  # fmt: skip
            self._waiting += 1
        try:
            future = self._executor.submit(self.compile, constraint)
        except RuntimeError as exc:  # after close()
            self._done(None)
            raise RuntimeError("the grammar cache is closed") from exc
        future.add_done_callback(self._done)  # counted until it ends, even if the caller gives up
        return await asyncio.wrap_future(future)

    def _done(self, _future: Future[Any] | None) -> None:
        with self._lock:
            self._waiting -= 1

    def close(self) -> None:
        """Let the compile threads end once the compiles already queued are done; take no new ones."""
        self._executor.shutdown(wait=False)

    def compile(self, constraint: Constraint) -> xgr.CompiledGrammar:
        """The compiled grammar for ``constraint``.

        Raises:
            ConstraintError: the schema is not valid JSON Schema or uses unsupported features.
        """
        import xgrammar as xgr

        try:
            # Key order matters: the grammar emits properties in the schema's order.
            schema_text = json.dumps(constraint.json_schema)
        except (TypeError, ValueError) as exc:
            raise ConstraintError(f"the JSON schema is not JSON-serialisable: {exc}") from exc
        key = json.dumps([schema_text, constraint.prefix, constraint.suffix])  # as _key
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        if not isinstance(constraint.json_schema, dict):
            raise ConstraintError("the JSON schema must be an object")
        try:
            parts = []
            if constraint.prefix:
                parts.append(_literal(constraint.prefix))
            parts.append(xgr.Grammar.from_json_schema(schema_text, any_whitespace=False, strict_mode=True))
            if constraint.suffix:
                parts.append(_literal(constraint.suffix))
            grammar = xgr.Grammar.concat(*parts) if len(parts) > 1 else parts[0]
            compiled = self._compiler.compile_grammar(grammar)
        except (RuntimeError, ValueError, TypeError) as exc:
            message = str(exc).splitlines()[-1] if str(exc) else type(exc).__name__
            # xgrammar prefixes its messages with a time and C++ source location.
            message = message.split(": ", 1)[-1] if ".cc:" in message else message
            raise ConstraintError(f"cannot use the JSON schema: {message}") from exc
        with self._lock:
            self._cache[key] = compiled
            while len(self._cache) > self._size:
                self._cache.popitem(last=False)
        return compiled


def _key(constraint: Constraint) -> str | None:
    """The cache key of ``constraint`` (``None``: its schema is not JSON; :meth:`compile` says so)."""
    try:
        return json.dumps([json.dumps(constraint.json_schema), constraint.prefix, constraint.suffix])
    except (TypeError, ValueError):
        return None


def _literal(text: str) -> Any:
    """An xgrammar grammar matching exactly ``text``."""
    import xgrammar as xgr

    return xgr.Grammar.from_ebnf("root ::= " + json.dumps(text))


class ConstrainedDecoder:
    """One sequence's position in its grammar."""

    def __init__(self, compiled: xgr.CompiledGrammar, vocab_size: int, tokenizer: PreTrainedTokenizerBase) -> None:
        """Start at the beginning of ``compiled``."""
        import xgrammar as xgr

        self._tokenizer = tokenizer
        self._matcher = xgr.GrammarMatcher(compiled)
        self._bitmask = xgr.allocate_token_bitmask(1, vocab_size)
        self._vocab_size = vocab_size
        self._bits = torch.tensor([1 << i for i in range(32)], dtype=torch.int64)
        self._stop_ids = torch.tensor(list(self._matcher.stop_token_ids), dtype=torch.int64)
        self._allowed: torch.Tensor | None = None

    def allowed(self) -> torch.Tensor:
        """[V] bool: the tokens the grammar allows next (stop tokens only once complete)."""
        if self._allowed is None:
            self._matcher.fill_next_token_bitmask(self._bitmask, 0)
            words = self._bitmask[0].to(torch.int64) & 0xFFFFFFFF  # [V/32] as unsigned
            bits = (words.unsqueeze(-1) & self._bits) != 0  # [V/32, 32]
            self._allowed = bits.reshape(-1)[: self._vocab_size]
        return self._allowed

    def accept(self, token_id: int) -> None:
        """Advance past ``token_id`` (which must have been allowed)."""
        if not self._matcher.accept_token(token_id):
            raise RuntimeError(f"the grammar rejected token {token_id} it had allowed")
        self._allowed = None

    def forced_token(self) -> int | None:
        """The next token when the grammar leaves no choice (the prefix, the suffix, fixed keys).

        Text the grammar forces is fed as the tokenizer's own tokens, not the character-by-
        character pieces a mask would also allow, so the model sees text it would write itself.
        """
        forced = self._matcher.find_jump_forward_string()
        if not forced:
            return None
        ids = self._tokenizer(forced, add_special_tokens=False).input_ids
        if not ids or not bool(self.allowed()[ids[0]]):
            return None
        return int(ids[0])

    @property
    def must_stop(self) -> bool:
        """Whether the output is complete and nothing but a stop token may follow."""
        if not self._matcher.is_completed():
            return False
        allowed = self.allowed().clone()
        allowed[self._stop_ids] = False
        return not bool(allowed.any())

