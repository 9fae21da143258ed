"""Server-sent events for ``stream: true``, chunk for chunk as OpenAI sends them.

OpenAI clients parse the stream with no special case, and the exact-token record is written before the
stream finishes, so a client that saw ``[DONE]`` can fetch it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import APIError, error_body
from ..serving.chat import PreparedChat, choice_record, make_record, usage_body
from ..serving.engine.base import GeneratedSequence, SequenceDelta
from ..serving.reasoning import StreamingReasoningParser
from ..serving.tool_parser import ParsedToolCall, StreamingParser

if TYPE_CHECKING:
    from ..state import ServerState

__all__ = ["open_stream"]

logger = logging.getLogger(__name__)


def _sse(data: dict[str, Any]) -> str:
    return f"data: {json.dumps(data, ensure_ascii=False, separators=(',', ':'))}\n\n"


@dataclass
class _Choice:
    index: int
    parser: StreamingParser | None
    reasoner: StreamingReasoningParser | None = None
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top_logprobs: list[list[tuple[int, float]]] = field(default_factory=list)
    has_top: bool = False
    text: str = ""
    pending_logprobs: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str | None = None
    eos: bool = False
    cached_tokens: int = 0
    call_ids: list[str] = field(default_factory=list)

    def sequence(self) -> GeneratedSequence:
        return GeneratedSequence(
            index=self.index, token_ids=self.token_ids, logprobs=self.logprobs, text=self.text,
            finish_reason=self.finish_reason or "stop",  # type: ignore[arg-type]
            top_logprobs=self.top_logprobs if self.has_top else None, eos=self.eos,
            cached_tokens=self.cached_tokens,
        )  # fmt: skip


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
        choice.token_ids.extend(delta.token_ids)
        choice.logprobs.extend(float(x) for x in delta.logprobs)
        if delta.top_logprobs is not None:
            choice.has_top = True
            choice.top_logprobs.extend([[(int(t), float(lp)) for t, lp in row] for row in delta.top_logprobs])
        choice.text += delta.text
        choice.eos = choice.eos or delta.eos
        choice.cached_tokens += delta.cached_tokens
        out: list[str] = []
        if self.prepared.want_logprobs:
            choice.pending_logprobs.extend(
                self.state.token_texts.content(delta.text_token_ids, delta.logprobs, delta.top_logprobs)
            )
        out.extend(self._text(choice, delta.text))
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
            logprobs, choice.pending_logprobs = choice.pending_logprobs, []
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
        records = [choice_record(c.sequence(), c.finish_reason or "stop", c.call_ids) for c in self.choices]
        await self.state.records.put(make_record(self.prepared, records, self.state, stream=True))
        out = []
        if self.include_usage:
            prompt = len(self.prepared.generation.prompt_token_ids)
            usage = usage_body(
                prompt, sum(len(c.token_ids) for c in self.choices), max(c.cached_tokens for c in self.choices)
            )
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
    stream = _Stream(prepared, state)
    deltas, first = await start_deltas(prepared, state)

    async def events() -> AsyncIterator[str]:
        try:
            for choice in stream.choices:
                yield stream.chunk(choice.index, {"role": "assistant", "content": ""})
            if first is not None:
                for event in stream.on_delta(first):
                    yield event
                async for delta in deltas:
                    for event in stream.on_delta(delta):
                        yield event
            for event in await stream.finish():
                yield event
        except APIError as exc:
            yield _sse(exc.body())
        except Exception as exc:
            logger.exception("streamed completion %s failed", prepared.completion_id)
            message = (
                f"the completion failed while streaming ({type(exc).__name__}); the server logged the details"
            )
            yield _sse(error_body(message, "server_error"))
        finally:
            await close_deltas(deltas, on_close)

    return events()
