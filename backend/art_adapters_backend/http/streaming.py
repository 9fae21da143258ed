"""Server-sent events for ``stream: true``, chunk for chunk as OpenAI sends them.

OpenAI clients parse the stream with no special case, and the exact-token record is written before the
stream finishes, so a client that saw ``[DONE]`` can fetch it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import APIError, error_body
from ..serving.chat import PreparedChat, choice_record, make_record, usage_body
from ..serving.engine.base import GeneratedSequence, SequenceDelta
from ..serving.reasoning import StreamingReasoningParser
from ..serving.tool_parser import ParsedToolCall, StreamingParser

if TYPE_CHECKING:
    from ..state import ServerState

__all__ = ["EventSource", "StreamedTokens", "open_stream", "pump_events"]

logger = logging.getLogger(__name__)


def _sse(data: dict[str, Any]) -> str:
    return f"data: {json.dumps(data, ensure_ascii=False, separators=(',', ':'))}\n\n"


@dataclass
class StreamedTokens:
    """What a choice's engine deltas add up to while it streams, for its record and its events.

    ``pending_logprobs``: OpenAI ``logprobs.content`` entries of tokens whose text is not sent yet
    (filled only when the request asks for log-probs).
    """

    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top_logprobs: list[list[tuple[int, float]]] = field(default_factory=list)
    has_top: bool = False
    text: str = ""
    eos: bool = False
    cached_tokens: int = 0
    pending_logprobs: list[dict[str, Any]] = field(default_factory=list)

    def add(self, delta: SequenceDelta, prepared: PreparedChat, state: ServerState) -> None:
        """Add ``delta``'s tokens, log-probs, text and (when asked for) its OpenAI log-prob entries."""
        self.token_ids.extend(delta.token_ids)
        self.logprobs.extend(float(x) for x in delta.logprobs)
        if delta.top_logprobs is not None:
            self.has_top = True
            self.top_logprobs.extend([[(int(t), float(lp)) for t, lp in row] for row in delta.top_logprobs])
        self.text += delta.text
        self.eos = self.eos or delta.eos
        self.cached_tokens += delta.cached_tokens
        if prepared.want_logprobs:
            self.pending_logprobs.extend(
                state.token_texts.content(delta.text_token_ids, delta.logprobs, delta.top_logprobs)
            )

    def sequence(self, index: int, finish_reason: str | None) -> GeneratedSequence:
        """The finished choice, as the engine would have returned it without streaming."""
        return GeneratedSequence(
            index=index, token_ids=self.token_ids, logprobs=self.logprobs, text=self.text,
            finish_reason=finish_reason or "stop",  # type: ignore[arg-type]
            top_logprobs=self.top_logprobs if self.has_top else None, eos=self.eos,
            cached_tokens=self.cached_tokens,
        )  # fmt: skip


@dataclass
class _Choice:
    index: int
    parser: StreamingParser | None
    reasoner: StreamingReasoningParser | None = None
    tokens: StreamedTokens = field(default_factory=StreamedTokens)
    finish_reason: str | None = None
    call_ids: list[str] = field(default_factory=list)


class _Stream:
    def __init__(self, prepared: PreparedChat, state: ServerState) -> None:
        self.prepared = prepared
        self.state = state
        names = prepared.tool_names
        tools, reasoning = prepared.tool_parser, prepared.reasoning_parser
        self.choices = [
            _Choice(
                i,
                tools.streaming(names) if tools is not None else None,
                reasoning.streaming(prepared.chat_template_kwargs) if reasoning is not None else None,
            )
            for i in range(prepared.generation.n)
        ]
        options = prepared.request.stream_options
        self.include_usage = bool(options and options.include_usage)

    def start(self) -> list[str]:
        """Each choice's first chunk, ``{"role": "assistant", "content": ""}``."""
        return [self.chunk(choice.index, {"role": "assistant", "content": ""}) for choice in self.choices]

    def error(self, exc: APIError) -> str:
        """``exc`` as the stream's last event: its OpenAI error body."""
        return _sse(exc.body())

    def failure(self, message: str) -> str:
        """An unexpected failure as the stream's last event: a ``server_error`` body."""
        return _sse(error_body(message, "server_error"))

    def chunk(self, index: int | None, delta: dict[str, Any] | None = None, *, finish_reason: str | None = None,
              logprobs: list[dict[str, Any]] | None = None) -> str:  # fmt: skip
        body: dict[str, Any] = {
            "id": self.prepared.completion_id,
            "object": "chat.completion.chunk",
            "created": self.prepared.created,
            "model": self.prepared.served.version,
            "system_fingerprint": None,
            "choices": [],
        }
        if index is not None:
            body["choices"] = [{
                "index": index,
                "delta": delta or {},
                "logprobs": {"content": logprobs, "refusal": None} if logprobs is not None else None,
                "finish_reason": finish_reason,
            }]  # fmt: skip
        if self.include_usage:
            body["usage"] = None
        return _sse(body)

    def on_delta(self, delta: SequenceDelta) -> list[str]:
        choice = self.choices[delta.index]
        choice.tokens.add(delta, self.prepared, self.state)
        out = self._text(choice, delta.text)
        if delta.finish_reason is not None:
            choice.finish_reason = delta.finish_reason
            out.extend(self._finish(choice))
        return out

    def _text(self, choice: _Choice, text: str) -> list[str]:
        """Chunks for a text delta: reasoning first (if the family has a reasoning parser), then content."""
        out: list[str] = []
        if choice.reasoner is not None:
            reasoning, text = choice.reasoner.feed(text)
            if reasoning:
                out.append(self._delta(choice, {"reasoning_content": reasoning}))
        shown = choice.parser.feed(text) if choice.parser is not None and text else text
        if shown:
            out.append(self._delta(choice, {"content": shown}))
        return out

    def _content(self, choice: _Choice, text: str) -> str:
        return self._delta(choice, {"content": text})

    def _delta(self, choice: _Choice, delta: dict[str, Any]) -> str:
        """One chunk carrying ``delta`` and the log-probs of the tokens not sent yet."""
        logprobs = None
        if self.prepared.want_logprobs:
            logprobs, choice.tokens.pending_logprobs = choice.tokens.pending_logprobs, []
        return self.chunk(choice.index, delta, logprobs=logprobs)

    def _finish(self, choice: _Choice) -> list[str]:
        out: list[str] = []
        calls: list[ParsedToolCall] = []
        if choice.reasoner is not None:
            reasoning, held = choice.reasoner.finish()
            if reasoning:
                out.append(self._delta(choice, {"reasoning_content": reasoning}))
            if held:
                shown = choice.parser.feed(held) if choice.parser is not None else held
                if shown:
                    out.append(self._content(choice, shown))
        if choice.parser is not None:
            rest, calls = choice.parser.finish()
            if rest:
                out.append(self._content(choice, rest))
        for position, call in enumerate(calls):
            head = {"index": position, "id": call.id, "type": "function",
                    "function": {"name": call.name, "arguments": ""}}  # fmt: skip
            out.append(self.chunk(choice.index, {"tool_calls": [head]}))
            args = {"index": position, "function": {"arguments": call.arguments}}
            out.append(self.chunk(choice.index, {"tool_calls": [args]}))
        if calls:
            choice.finish_reason = "tool_calls"
            choice.call_ids = [call.id for call in calls]
        out.append(self.chunk(choice.index, {}, finish_reason=choice.finish_reason))
        return out

    async def finish(self) -> list[str]:
        """Record the completion, then the usage chunk (if asked) and ``[DONE]``."""
        records = [
            choice_record(c.tokens.sequence(c.index, c.finish_reason), c.finish_reason or "stop", c.call_ids)
            for c in self.choices
        ]
        await self.state.records.put(make_record(self.prepared, records, self.state, stream=True))
        out = []
        if self.include_usage:
            prompt = len(self.prepared.generation.prompt_token_ids)
            tokens = [c.tokens for c in self.choices]
            usage = usage_body(prompt, sum(len(t.token_ids) for t in tokens), max(t.cached_tokens for t in tokens))
            body = json.loads(self.chunk(None)[len("data: ") :])
            body["usage"] = usage
            out.append(_sse(body))
        out.append("data: [DONE]\n\n")
        return out


async def close_deltas(deltas: AsyncIterator[SequenceDelta], on_close: Callable[[], None] | None) -> None:
    """End a stream: close the engine's delta iterator (it stops decoding), then call ``on_close``
    even if closing failed."""
    try:
        aclose = getattr(deltas, "aclose", None)
        if aclose is not None:
            await aclose()
    finally:
        if on_close is not None:
            on_close()


async def start_deltas(
    prepared: PreparedChat, state: ServerState
) -> tuple[AsyncIterator[SequenceDelta], SequenceDelta | None]:
    """Start the engine's delta stream and await its first delta (``None`` if it ends at once).

    Awaited before a route answers, so a request the engine refuses still gets a JSON error
    instead of a broken stream; on such a failure the engine's iterator is closed.
    """
    deltas = state.engine.stream(prepared.generation).__aiter__()
    try:
        return deltas, await deltas.__anext__()
    except StopAsyncIteration:
        return deltas, None
    except BaseException:
        aclose = getattr(deltas, "aclose", None)
        if aclose is not None:
            await aclose()
        raise


class EventSource(Protocol):
    """The events of one streamed reply, as :func:`pump_events` asks for them."""

    def start(self) -> list[str]:
        """The events sent before the first token."""
        ...

    def on_delta(self, delta: SequenceDelta) -> list[str]:
        """The events one engine delta makes."""
        ...

    async def finish(self) -> list[str]:
        """The last events, once the engine is done (the exact-token record is written first)."""
        ...

    def error(self, exc: APIError) -> str:
        """The event reporting an :class:`APIError` that ended the stream."""
        ...

    def failure(self, message: str) -> str:
        """The event reporting an unexpected exception that ended the stream, with ``message``."""
        ...


async def pump_events(
    source: EventSource, prepared: PreparedChat, state: ServerState, on_close: Callable[[], None] | None,
    noun: str,
) -> AsyncIterator[str]:
    """Start decoding (:func:`start_deltas`) and return the iterator of ``source``'s events.

    ``source.start()``, its events of every delta, then ``source.finish()``; an error on the way
    ends the stream with its event (an unexpected one is logged, and reported as the ``noun``,
    "completion" or "response", failing). The engine's deltas are closed and ``on_close`` runs
    once the iterator is finished or closed (not when this function raises).
    """
    deltas, first = await start_deltas(prepared, state)

    async def events() -> AsyncIterator[str]:
        try:
            for event in source.start():
                yield event
            if first is not None:
                for event in source.on_delta(first):
                    yield event
                async for delta in deltas:
                    for event in source.on_delta(delta):
                        yield event
            for event in await source.finish():
                yield event
        except APIError as exc:
            yield source.error(exc)
        except Exception as exc:
            logger.exception("streamed %s %s failed", noun, prepared.completion_id)
            yield source.failure(
                f"the {noun} failed while streaming ({type(exc).__name__}); the server logged the details"
            )
        finally:
            await close_deltas(deltas, on_close)

    return events()


async def open_stream(
    prepared: PreparedChat, state: ServerState, on_close: Callable[[], None] | None = None
) -> AsyncIterator[str]:
    """Start decoding and return the SSE event iterator.

    Per choice: a first chunk with ``{"role": "assistant", "content": ""}``, content deltas
    (with ``logprobs`` when asked), tool-call deltas (id, type and name first, then the
    arguments) once the choice ends, a last chunk with ``finish_reason``; then, with
    ``stream_options.include_usage``, a chunk with empty ``choices`` and the usage; then
    ``data: [DONE]``. The exact-token record is written before the finish of the stream.

    The first engine delta is awaited before returning, so a request the engine refuses
    still gets a proper JSON error instead of a broken stream. ``on_close`` runs once the
    returned iterator is finished or closed (not when this function raises).
    """
    return await pump_events(_Stream(prepared, state), prepared, state, on_close, "completion")
