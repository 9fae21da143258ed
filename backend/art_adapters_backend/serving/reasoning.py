"""Reasoning parsers: ``<think>...</think>`` becomes ``reasoning_content``, named like vLLM's.

The parsers (``qwen3``, ``deepseek_r1``) have the semantics of vLLM's parsers of the same names. The
parsed pieces are only what the API shows: the exact-token record keeps every sampled token, reasoning
included.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["REASONING_PARSERS", "ReasoningParser", "StreamingReasoningParser", "get_reasoning_parser"]

START = "<think>"
END = "</think>"


@dataclass(frozen=True)
class ReasoningParser:
    """One reasoning parser.

    Both parsers strip a leading ``<think>`` if the model wrote it and split at the first
    ``</think>``: what precedes is the reasoning, what follows the content (``None`` when empty).
    They differ only when no ``</think>`` appears (a truncated or non-thinking reply):

    * ``qwen3``: thinking on (the default) means the reply was cut while thinking, so it is all
      reasoning; with ``chat_template_kwargs={"enable_thinking": false}`` it is all content.
    * ``deepseek_r1``: it is all reasoning.

    Forced tool calls skip the thinking block: :attr:`empty_block` is what a template renders for
    "no thinking" (Qwen3's ``<think>\\n\\n</think>\\n\\n``), written before the constrained call so
    the reply still parses as a reply of that family.

    Attributes:
        name: vLLM's ``--reasoning-parser`` name.
        unterminated_is_content_without_thinking: whether a reply with no ``</think>`` is content
            when thinking was turned off by ``chat_template_kwargs`` (``qwen3``).
        empty_block: the text of an empty thinking block (written before a forced tool call).
    """

    name: str
    unterminated_is_content_without_thinking: bool
    empty_block: str = "<think>\n\n</think>\n\n"

    def thinking(self, chat_template_kwargs: dict[str, Any] | None) -> bool:
        """Whether the request leaves thinking on (``enable_thinking`` defaults to true)."""
        return bool((chat_template_kwargs or {}).get("enable_thinking", True))

    def thinking_turned_off(self, chat_template_kwargs: dict[str, Any] | None) -> bool:
        """Whether the request turned thinking off for a parser that honours it (``qwen3``): the
        prompt then ends in the empty thinking block, and a reply without ``</think>`` is content."""
        return self.unterminated_is_content_without_thinking and not self.thinking(chat_template_kwargs)

    def split(self, text: str, chat_template_kwargs: dict[str, Any] | None = None) -> tuple[str | None, str | None]:
        """``(reasoning, content)`` of a whole reply (either may be ``None``)."""
        before, found, after = text.partition(START)
        body = after if found else before
        if END in body:
            reasoning, _, content = body.partition(END)
            return reasoning, content or None
        if self.thinking_turned_off(chat_template_kwargs):
            return None, body
        return body, None

    def streaming(self, chat_template_kwargs: dict[str, Any] | None = None) -> StreamingReasoningParser:
        """A parser for one streamed choice."""
        return StreamingReasoningParser(content_only=self.thinking_turned_off(chat_template_kwargs))


#: vLLM's ``--reasoning-parser`` names implemented here.
REASONING_PARSERS: dict[str, ReasoningParser] = {
    "qwen3": ReasoningParser("qwen3", unterminated_is_content_without_thinking=True),
    "deepseek_r1": ReasoningParser("deepseek_r1", unterminated_is_content_without_thinking=False),
}


def get_reasoning_parser(name: str | None) -> ReasoningParser | None:
    """The parser called ``name`` (``None`` for none); ``KeyError`` for an unknown name."""
    return None if name is None else REASONING_PARSERS[name]


def _partial_suffix(text: str, marker: str) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of ``marker``."""
    for length in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-length:]):
            return length
    return 0


class StreamingReasoningParser:
    """Splits a streamed reply into reasoning and content deltas.

    :meth:`feed` takes a text delta and returns ``(reasoning, content)`` deltas that can be sent
    now; text that might be the start of ``<think>`` or ``</think>`` is held until it is not.
    Without ``</think>`` by the end, the reply is reasoning (``content_only``: content), as
    :meth:`ReasoningParser.split` says; so content is only released once ``</think>`` was seen.
    """

    def __init__(self, *, content_only: bool = False) -> None:
        self._buffer = ""
        self._started = False  # past a possible leading <think>
        self._done = False  # past </think>
        self._content_only = content_only

    def feed(self, text: str) -> tuple[str, str]:
        """Add a text delta; return the ``(reasoning, content)`` deltas safe to send now."""
        if self._done:
            return "", text
        buffer = self._buffer + text
        if not self._started:
            stripped = buffer.lstrip()
            if len(stripped) < len(START) and START.startswith(stripped):  # may still become <think>
                self._buffer = buffer
                return "", ""
            self._started = True
            if stripped.startswith(START):
                buffer = stripped[len(START) :]
            elif self._content_only:
                # Thinking turned off and no <think>: content. (A bare </think> later in such a
                # reply stays content here, where the whole-reply split would call what precedes
                # it reasoning: a reply the template's "no thinking" prompt makes very unlikely.)
                self._done = True
                self._buffer = ""
                return "", buffer
        end = buffer.find(END)
        if end >= 0:
            self._done = True
            self._buffer = ""
            return buffer[:end], buffer[end + len(END) :]
        keep = _partial_suffix(buffer, END)
        self._buffer = buffer[len(buffer) - keep :]
        return buffer[: len(buffer) - keep], ""

    def finish(self) -> tuple[str, str]:
        """The held text once the reply ended, as ``(reasoning, content)``."""
        held, self._buffer = self._buffer, ""
        if self._done or (self._content_only and not self._started):
            return "", held
        return held, ""
