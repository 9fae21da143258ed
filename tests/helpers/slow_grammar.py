"""JSON schemas that take xgrammar at least a given time to compile, with the xgrammar installed.

Tests of the grammar pool (compiles never hold other work, too many waiting compiles are a 429)
need compiles that last. Which schemas are slow changes between xgrammar releases: 0.2.9
compiles a 2,000-character bounded string in 10 ms where 0.2.8 took 2.5 s, and those tests then
checked nothing about the pool. A bounded regular expression (``^[a-z]{1,N}$``) has stayed
quadratic in ``N`` in both releases; :func:`slow_pattern_length` measures its cost here and
picks ``N``, so the tests keep their premise on a faster xgrammar (or say it is gone).
"""

from __future__ import annotations

import functools
import json
import time
from typing import Any

#: The longest bound tried before concluding that xgrammar compiles every pattern fast.
MAX_PATTERN_LENGTH = 64_000


def pattern_schema(length: int, variant: int = 0) -> dict[str, Any]:
    """An object with one string property matching ``^[a-z]{1,length + variant}$``.

    ``variant`` makes schemas that compile alike but are distinct for a grammar cache.
    """
    pattern = "^[a-z]{1,%d}$" % (length + variant)
    return {"type": "object", "properties": {"a": {"type": "string", "pattern": pattern}}, "required": ["a"]}


@functools.cache
def slow_pattern_length(tokenizer: Any, seconds: float) -> int:
    """The pattern bound whose schema takes at least ``seconds`` to compile for ``tokenizer`` here.

    Raises:
        AssertionError: even ``MAX_PATTERN_LENGTH`` compiles faster (a test that needs a slow
            compile cannot run as written with this xgrammar).
    """
    import xgrammar as xgr

    info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=len(tokenizer))
    compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
    length = 1000
    while length <= MAX_PATTERN_LENGTH:
        started = time.perf_counter()
        compiler.compile_json_schema(json.dumps(pattern_schema(length)))
        took = time.perf_counter() - started
        if took >= seconds:
            return length
        # Quadratic so far: aim straight at the target, at least doubling.
        length = max(2 * length, int(length * (seconds / max(took, 1e-3)) ** 0.5 * 1.2))
    raise AssertionError(f"xgrammar compiles ^[a-z]{{1,{MAX_PATTERN_LENGTH}}}$ in under {seconds} s: find a slower schema")
