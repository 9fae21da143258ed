"""Turning a growing list of token ids into text: stop strings and safe streaming deltas.

:class:`TextTracker` holds the rule for a sequence's text (cut before the first stop string), which the
vLLM engine mirrors, and the torch engine's streaming deltas.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = ["TextTracker"]

_REPLACEMENT = "\ufffd"
#: Characters before the previous end of the text searched again: decoding one more token may
#: change the last few (a completed UTF-8 character, a tokenizer's clean-up of spaces).
_TAIL_SLACK = 16
#: Characters of a stop string's start searched for at once when holding back a partial match.
_HEAD = 8


class TextTracker:
    """The text of one sequence as its tokens arrive.

    It decodes each new token in a window of the few tokens before it (the text decoded so far is
    never decoded again), finds the first stop string (the text is cut before it) and hands out text
    deltas for streaming that never contain a stop string or the start of one, nor a half-decoded
    UTF-8 character, so the deltas always concatenate to the final text.

    The stop-string work per token is bounded by the stop strings' length, not the text's: a stop
    string can only end in the text that changed since the last token, so only that tail (plus the
    longest stop string) is searched, and only the last ``len(stop) - 1`` characters can hold the
    start of one.
    """

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
        self._checked = 0  # the text before this was searched for stop strings (up to _TAIL_SLACK)
        self._token_ids: list[int] = []
        # Incremental decoding (vLLM's detokenizer): the text of tokens[:read] is final in
        # ``_decoded``; tokens[prefix:read] are decoded again with each new token, as context
        # (a tokenizer may decode a token differently at the start of a text).
        self._prefix = 0
        self._read = 0
        self._decoded = ""
        self.text = ""
        """The decoded text so far (cut before a stop string once :attr:`stopped`)."""
        self.stopped = False
        """Whether a stop string appeared."""
        self._emitted = 0

    def add(self, token_id: int) -> None:
        """Append one sampled token and look for stop strings."""
        self._token_ids.append(token_id)
        self.text = self._decode_new()
        if not self._stop:
            return
        if len(self._token_ids) <= self._min_tokens:
            self._protected = len(self.text)
            return
        text = self.text
        found = (
            text.find(s, max(0, self._protected - len(s) + 1, self._checked - len(s) - _TAIL_SLACK))
            for s in self._stop
        )
        cuts = [i for i in found if i >= 0]
        if cuts:
            self.text = text[: min(cuts)]
            self.stopped = True
        self._checked = _stable_length(text)

    def _decode_new(self) -> str:
        """The whole text: the final part plus the new tokens decoded after their context."""
        ids = self._token_ids
        before = self._tokenizer.decode(ids[self._prefix : self._read], skip_special_tokens=False)
        after = self._tokenizer.decode(ids[self._prefix :], skip_special_tokens=False)
        new = after[len(before) :] if after.startswith(before) else after
        if len(after) > len(before) and not after.endswith(_REPLACEMENT):
            self._decoded += new
            self._prefix, self._read = self._read, len(ids)
            return self._decoded
        return self._decoded + new  # a character still incomplete: shown as the full decode shows it

    def delta(self, final: bool) -> str:
        """The text not handed out yet that is safe to hand out now (all of it when ``final``)."""
        if final:
            safe = len(self.text)
        else:
            safe = _stable_length(self.text)
            safe -= self._held_back(self.text, safe)
        if safe <= self._emitted:
            return ""
        out = self.text[self._emitted : safe]
        self._emitted = safe
        return out

    def _held_back(self, text: str, end: int) -> int:
        """The length of the longest suffix of ``text[:end]`` that is a proper prefix of a stop string.

        Only the last ``len(stop) - 1`` characters are looked at, and only where they hold the
        stop string's first character.
        """
        longest = 0
        for stop in self._stop:
            size = min(len(stop) - 1, end)
            if size <= longest:
                continue
            tail = text[end - size : end]
            # Suffixes at least as long as ``head`` must contain it where they start: found in C.
            head = stop[: min(size, _HEAD)]
            last = size - len(head)  # where the shortest such suffix starts
            i = tail.find(head, 0, size)
            while 0 <= i <= last and size - i > longest:
                if stop.startswith(tail[i:]):
                    longest = size - i
                    break
                i = tail.find(head, i + 1, size)
            for i in range(last + 1, size - longest):  # the shorter ones, longest first
                if stop.startswith(tail[i:]):
                    longest = size - i
                    break
        return longest


def _stable_length(text: str) -> int:
    """The length of ``text`` without its trailing replacement characters (a UTF-8 character still
    being decoded), found without copying the text."""
    end = len(text)
    while end and text[end - 1] == _REPLACEMENT:
        end -= 1
    return end
