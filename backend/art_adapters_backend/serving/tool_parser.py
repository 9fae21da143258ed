"""Tool-call parsers by model family, named like vLLM's ``--tool-call-parser``.

Each :class:`ToolCallParser` parses whole replies, streams, and says how a forced call is written in its
syntax: ``hermes`` (Qwen2.5, Qwen3, Hermes, the bundled SmolLM2 template) and ``llama3_json`` (Llama 3.x).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = [
    "TOOL_CALL_PARSERS",
    "HermesToolParser",
    "Llama3JsonToolParser",
    "ParsedReply",
    "ParsedToolCall",
    "StreamingToolParser",
    "ToolCallParser",
    "get_tool_parser",
    "new_call_id",
    "parse_reply",
]

START = "<tool_call>"
END = "</tool_call>"


def _blocks(text: str, start: int) -> Iterator[tuple[int, str, int]]:
    """``(block start, stripped body, block end)`` of each ``<tool_call>`` from ``start``.

    A block ends at the first ``</tool_call>``, or at the end of the text when unclosed.
    Plain ``str.find`` (a lazy regex backtracked quadratically over long whitespace runs).
    """
    while (begin := text.find(START, start)) >= 0:
        body = begin + len(START)
        close = text.find(END, body)
        end = len(text) if close < 0 else close + len(END)
        yield begin, text[body : len(text) if close < 0 else close].strip(), end
        start = end


def new_call_id() -> str:
    """A fresh OpenAI-style tool-call id, ``call_<24 hex>``."""
    return f"call_{secrets.token_hex(12)}"


@dataclass
class ParsedToolCall:
    """One valid tool call: ``arguments`` is a JSON object serialised as a string."""

    id: str
    name: str
    arguments: str

    def to_openai(self, index: int | None = None) -> dict[str, Any]:
        """The OpenAI ``tool_calls`` entry (with ``index`` when streaming)."""
        out: dict[str, Any] = {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }
        if index is not None:
            out = {"index": index, **out}
        return out


@dataclass
class ParsedReply:
    """A reply split into text and tool calls (``tool_calls`` empty when there are none)."""

    content: str | None
    tool_calls: list[ParsedToolCall] = field(default_factory=list)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _loads(raw: str) -> Any:
    """Strict JSON (no NaN / Infinity); ``ValueError`` also for nesting deeper than the recursion limit."""
    try:
        return json.loads(raw, parse_constant=_reject_constant)
    except RecursionError as exc:  # a degenerate sample like "[[[[..." must not become a 500
        raise ValueError("JSON nested too deeply") from exc


def _parse_call(raw: str, tool_names: Collection[str] | None) -> ParsedToolCall | None:
    try:
        data = _loads(raw)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        return None
    name = data["name"]
    if tool_names is not None and name not in tool_names:
        return None
    arguments = data.get("arguments", data.get("parameters", {}))
    if isinstance(arguments, str):
        try:
            arguments = _loads(arguments) if arguments.strip() else {}
        except ValueError:
            return None
    if not isinstance(arguments, dict):
        return None
    try:  # allow_nan=False: 1e999 parses as inf, which has no JSON spelling
        text = json.dumps(arguments, ensure_ascii=False, allow_nan=False)
    except ValueError:
        return None
    return ParsedToolCall(id=new_call_id(), name=name, arguments=text)


def parse_reply(text: str, tool_names: Collection[str] | None = None) -> ParsedReply:
    """Split ``text`` into content and tool calls (``hermes``).

    A reply is either text, or text followed by one or more valid calls. A call is valid when its
    JSON is an object with a ``name`` among the offered tools and ``arguments`` that are a JSON
    object (or a string holding one). If any block is malformed the whole reply stays text (and
    ``finish_reason`` stays what the engine said), so nothing is silently dropped.

    Args:
        text: the model's whole reply.
        tool_names: the offered tools; a call to any other name makes the reply plain text.
            ``None`` accepts any name.
    """
    start = text.find(START)
    if start < 0:
        return ParsedReply(content=text)
    calls: list[ParsedToolCall] = []
    position = start
    for begin, body, end in _blocks(text, start):
        if text[position:begin].strip():
            return ParsedReply(content=text)  # prose between calls: keep it all as text
        call = _parse_call(body, tool_names)
        if call is None:
            return ParsedReply(content=text)
        calls.append(call)
        position = end
    if not calls or text[position:].strip():
        return ParsedReply(content=text)
    content = text[:start].rstrip()
    return ParsedReply(content=content or None, tool_calls=calls)


class StreamingToolParser:
    """Incremental :func:`parse_reply` for one streamed choice.

    It passes text through until a ``<tool_call>`` might be starting, then holds the rest until the
    choice ends.
    Feed text deltas with :meth:`feed` (returns the text that can be shown now); call
    :meth:`finish` at the end for the held part, parsed.
    """

    def __init__(self, tool_names: Collection[str] | None = None) -> None:
        self.tool_names = tool_names
        self._emitted = ""
        self._held = ""
        self._holding_call = False

    def feed(self, text: str) -> str:
        """Add ``text``; return what is safe to stream as content now."""
        if self._holding_call:
            self._held += text
            return ""
        buffer = self._held + text
        start = buffer.find(START)
        if start >= 0:
            self._holding_call = True
            release, self._held = buffer[:start], buffer[start:]
        else:
            keep = _partial_start(buffer)
            release, self._held = buffer[: len(buffer) - keep], buffer[len(buffer) - keep :]
        # Whitespace right before a call is not shown until we know what follows it.
        stripped = release.rstrip()
        if stripped != release:
            self._held = release[len(stripped) :] + self._held
            release = stripped
        self._emitted += release
        return release

    def finish(self) -> tuple[str, list[ParsedToolCall]]:
        """The text still to stream as content and the tool calls, once the choice ended."""
        held, self._held = self._held, ""
        if not self._holding_call:
            self._emitted += held
            return held, []
        parsed = parse_reply(held, self.tool_names)
        if not parsed.tool_calls:
            self._emitted += held
            return held, []
        return "", parsed.tool_calls


def _partial_start(text: str) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of ``<tool_call>``."""
    for length in range(min(len(START) - 1, len(text)), 0, -1):
        if START.startswith(text[-length:]):
            return length
    return 0


# --------------------------------------------------------------------------- llama3_json

PYTHON_TAG = "<|python_tag|>"


def parse_llama3_json(text: str, tool_names: Collection[str] | None = None) -> ParsedReply:
    """Split a Llama 3.x reply: JSON call objects (after an optional ``<|python_tag|>``), else text.

    The whole reply must be calls (``{...}`` separated by ``;``); anything else stays text.
    """
    body = text.strip()
    if body.startswith(PYTHON_TAG):
        body = body[len(PYTHON_TAG) :].lstrip()
    if not body.startswith("{"):
        return ParsedReply(content=text)
    decoder = json.JSONDecoder(parse_constant=_reject_constant)
    calls: list[ParsedToolCall] = []
    position = 0
    while position < len(body):
        try:
            data, end = decoder.raw_decode(body, position)
        except (ValueError, RecursionError):
            return ParsedReply(content=text)
        call = _parse_call(json.dumps(data), tool_names) if isinstance(data, dict) else None
        if call is None:
            return ParsedReply(content=text)
        calls.append(call)
        rest = body[end:].lstrip()
        if rest.startswith(";"):
            rest = rest[1:].lstrip()
        elif rest:
            return ParsedReply(content=text)
        position = len(body) - len(rest)
    return ParsedReply(content=None, tool_calls=calls) if calls else ParsedReply(content=text)


class StreamingLlama3JsonParser:
    """Incremental :func:`parse_llama3_json`: a reply that starts like a call is held to the end."""

    def __init__(self, tool_names: Collection[str] | None = None) -> None:
        self.tool_names = tool_names
        self._held = ""
        self._decided: bool | None = None  # True: holding a call; False: plain text

    def feed(self, text: str) -> str:
        """Add ``text``; return what is safe to stream as content now."""
        if self._decided is False:
            return text
        self._held += text
        if self._decided:
            return ""
        head = self._held.lstrip()
        if not head or (PYTHON_TAG.startswith(head) and len(head) < len(PYTHON_TAG)):
            return ""
        if head.startswith("{") or head.startswith(PYTHON_TAG):
            self._decided = True
            return ""
        self._decided = False
        out, self._held = self._held, ""
        return out

    def finish(self) -> tuple[str, list[ParsedToolCall]]:
        """The text still to stream as content and the tool calls, once the choice ended."""
        held, self._held = self._held, ""
        if not held:
            return "", []
        parsed = parse_llama3_json(held, self.tool_names)
        return ("", parsed.tool_calls) if parsed.tool_calls else (held, [])


# --------------------------------------------------------------------------- registry


class StreamingParser(Protocol):
    """One streamed choice's tool-call parser."""

    def feed(self, text: str) -> str:
        """Add a text delta; return the content safe to stream now."""
        ...

    def finish(self) -> tuple[str, list[ParsedToolCall]]:
        """The held content and the parsed calls, once the choice ended."""
        ...


class ToolCallParser:
    """A model family's tool-call syntax: parsing, streaming and forced calls.

    It parses whole replies, streams (holding text that may be a call), and says how a forced call
    (``tool_choice`` required or named) is written in its syntax, so the constrained decoder produces
    exactly what the model would write itself.

    Attributes:
        name: vLLM's ``--tool-call-parser`` name.
        arguments_key: the key holding the arguments in a call object (``arguments``/``parameters``).
        call_prefix: text written before a forced call's JSON.
        call_suffix: text written after it.
    """

    name = ""
    arguments_key = "arguments"
    call_prefix = ""
    call_suffix = ""

    def parse(self, text: str, tool_names: Collection[str] | None = None) -> ParsedReply:
        """Split a whole reply into content and tool calls."""
        raise NotImplementedError

    def streaming(self, tool_names: Collection[str] | None = None) -> StreamingParser:
        """A parser for one streamed choice."""
        raise NotImplementedError

    def call_schema(self, name: str, parameters: dict[str, Any]) -> dict[str, Any]:
        """The JSON schema of one call of ``name`` in this syntax (keys in the order the model writes them)."""
        return {
            "type": "object",
            "properties": {"name": {"const": name}, self.arguments_key: parameters},
            "required": ["name", self.arguments_key],
        }


class HermesToolParser(ToolCallParser):
    """``<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`` blocks.

    The syntax of Qwen2.5, Qwen3, Hermes and the bundled SmolLM2 template.
    """

    name = "hermes"
    arguments_key = "arguments"
    call_prefix = "<tool_call>\n"
    call_suffix = "\n</tool_call>"

    def parse(self, text: str, tool_names: Collection[str] | None = None) -> ParsedReply:
        """See :func:`parse_reply`."""
        return parse_reply(text, tool_names)

    def streaming(self, tool_names: Collection[str] | None = None) -> StreamingParser:
        """See :class:`StreamingToolParser`."""
        return StreamingToolParser(tool_names)


class Llama3JsonToolParser(ToolCallParser):
    """Llama 3.x JSON calls: ``{"name": ..., "parameters": {...}}`` (``arguments`` accepted too).

    The reply is JSON, optionally after ``<|python_tag|>``; several calls are separated by ``;``.
    """

    name = "llama3_json"
    arguments_key = "parameters"

    def parse(self, text: str, tool_names: Collection[str] | None = None) -> ParsedReply:
        """See :func:`parse_llama3_json`."""
        return parse_llama3_json(text, tool_names)

    def streaming(self, tool_names: Collection[str] | None = None) -> StreamingParser:
        """See :class:`StreamingLlama3JsonParser`."""
        return StreamingLlama3JsonParser(tool_names)


#: vLLM's ``--tool-call-parser`` names implemented here.
TOOL_CALL_PARSERS: dict[str, ToolCallParser] = {
    parser.name: parser for parser in (HermesToolParser(), Llama3JsonToolParser())
}


def get_tool_parser(name: str | None) -> ToolCallParser | None:
    """The parser called ``name`` (``None`` for none); ``KeyError`` for an unknown name."""
    return None if name is None else TOOL_CALL_PARSERS[name]
