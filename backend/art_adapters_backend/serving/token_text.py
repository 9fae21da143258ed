"""Token ids -> OpenAI ``logprobs`` entries (``token``, ``bytes``, ``logprob``, ``top_logprobs``)."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = ["UNREPORTABLE_LOGPROB", "TokenTexts", "reported_logprob"]


@functools.cache
def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level BPE alphabet, inverted: printable stand-in char -> byte."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    chars = printable[:]
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=True)}


#: What a log-probability that is not a finite number is reported as (OpenAI's ``-9999.0``): JSON has
#: no NaN or infinity, and a NaN in a response or stream would break the client's parser.
UNREPORTABLE_LOGPROB = -9999.0


def reported_logprob(value: float) -> float:
    """``value`` as a float, or :data:`UNREPORTABLE_LOGPROB` when it is NaN or infinite."""
    value = float(value)
    return value if math.isfinite(value) else UNREPORTABLE_LOGPROB


class TokenTexts:
    """The exact bytes and display text of each token of one tokenizer (cached)."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase) -> None:
        self.tokenizer = tokenizer
        self._special = set(tokenizer.all_special_ids)

    @functools.lru_cache(maxsize=65536)  # noqa: B019 - one instance per server, lives as long
    def token_bytes(self, token_id: int) -> bytes:
        """The bytes token ``token_id`` stands for."""
        piece = self.tokenizer.convert_ids_to_tokens(token_id)
        if piece is None:
            return b""
        if token_id not in self._special:
            decoder = _byte_decoder()
            if all(ch in decoder for ch in piece):
                return bytes(decoder[ch] for ch in piece)
        if piece.startswith("<0x") and piece.endswith(">") and len(piece) == 6:  # sentencepiece byte tokens
            return bytes([int(piece[3:5], 16)])
        return self.tokenizer.decode([token_id]).encode("utf-8")

    def token_text(self, token_id: int) -> str:
        """The token as text (invalid UTF-8 of a partial character shown as ``\\xNN`` escapes)."""
        return self.token_bytes(token_id).decode("utf-8", errors="backslashreplace")

    def entry(self, token_id: int, logprob: float, top: Sequence[tuple[int, float]] | None) -> dict[str, Any]:
        """One OpenAI ``logprobs.content`` item."""
        raw = self.token_bytes(token_id)
        return {
            "token": self.token_text(token_id),
            "logprob": reported_logprob(logprob),
            "bytes": list(raw),
            "top_logprobs": [
                {"token": self.token_text(t), "logprob": reported_logprob(lp), "bytes": list(self.token_bytes(t))}
                for t, lp in (top or [])
            ],
        }

    def content(
        self,
        token_ids: Sequence[int],
        logprobs: Sequence[float],
        top_logprobs: Sequence[Sequence[tuple[int, float]]] | None,
    ) -> list[dict[str, Any]]:
        """The ``logprobs.content`` list of a choice (or of a streamed delta)."""
        return [
            self.entry(t, lp, top_logprobs[i] if top_logprobs is not None and i < len(top_logprobs) else None)
            for i, (t, lp) in enumerate(zip(token_ids, logprobs, strict=False))
        ]
