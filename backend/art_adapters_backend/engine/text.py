"""Turning a growing list of token ids into text: stop strings and safe streaming deltas.

:class:`TextTracker` decodes one sequence's tokens after each step, finds the first stop
string (the text is cut before it) and hands out text deltas for streaming that never
contain a stop string or the start of one, nor a half-decoded UTF-8 character, so the
deltas always concatenate to the final text.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = ["TextTracker"]

_REPLACEMENT = "\ufffd"


class TextTracker:
    """The text of one sequence as its tokens arrive."""

    def __init__(
        self, tokenizer: PreTrainedTokenizerBase, stop: tuple[str, ...], min_tokens: int = 0
    ) -> None:
        """Track a sequence that ends at any of the ``stop`` strings (empty ones are ignored).

        With ``min_tokens`` (vLLM's semantics) no stop string is looked for until more than
        ``min_tokens`` tokens arrived, and one must end after the text of the first ``min_tokens``.
        """
        self._tokenizer = tokenizer
        self._stop = tuple(s for s in stop if s)
        self._min_tokens = min_tokens
        self._protected = 0  # length of the text of the first min_tokens tokens
        self._token_ids: list[int] = []
        self.text = ""
        """The decoded text so far (cut before a stop string once :attr:`stopped`)."""
        self.stopped = False
        """Whether a stop string appeared."""
        self._emitted = 0

    def add(self, token_id: int) -> None:
        """Append one sampled token and look for stop strings."""
        self._token_ids.append(token_id)
        self.text = self._tokenizer.decode(self._token_ids, skip_special_tokens=False)
        if not self._stop:
            return
        if len(self._token_ids) <= self._min_tokens:
            self._protected = len(self.text)
            return
        found = (self.text.find(s, max(0, self._protected - len(s) + 1)) for s in self._stop)
        cuts = [i for i in found if i >= 0]
        if cuts:
            self.text = self.text[: min(cuts)]
            self.stopped = True

    def delta(self, final: bool) -> str:
        """The text not handed out yet that is safe to hand out now (all of it when ``final``)."""
        if final:
            safe = len(self.text)
        else:
            safe = len(self.text.rstrip(_REPLACEMENT))
            safe -= self._held_back(self.text[:safe])
        if safe <= self._emitted:
            return ""
        out = self.text[self._emitted : safe]
        self._emitted = safe
        return out

    def _held_back(self, text: str) -> int:
        """The length of the longest suffix of ``text`` that is a proper prefix of a stop string."""
        longest = 0
        for stop in self._stop:
            for k in range(min(len(stop) - 1, len(text)), longest, -1):
                if text.endswith(stop[:k]):
                    longest = k
                    break
        return longest
