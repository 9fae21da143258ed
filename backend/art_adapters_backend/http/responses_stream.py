"""Server-sent events of a streamed ``/v1/responses`` reply, in the order OpenAI sends them.

``response.created``, ``response.in_progress``, then per output item ``output_item.added``, its
parts and deltas, ``output_item.done``; last ``response.completed`` (``response.incomplete`` at
``max_output_tokens``), sent after the exact-token record is written.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from ..errors import APIError
from ..serving.chat import PreparedChat, choice_record, make_record
from ..serving.engine.base import SequenceDelta
from ..serving.responses import (
    function_call_item,
    message_item,
    new_item_id,
    output_text_part,
    reasoning_item,
    response_object,
    usage,
)
from ..serving.responses_types import ResponsesRequest
from .streaming import StreamedTokens, pump_events

if TYPE_CHECKING:
    from ..state import ServerState

__all__ = ["open_response_stream"]


class _Events:
    """The event builder of one streamed response (one choice: the Responses API has no ``n``)."""

    def __init__(self, body: ResponsesRequest, prepared: PreparedChat, state: ServerState) -> None:
        self.body, self.prepared, self.state = body, prepared, state
        tools, reasoning = prepared.tool_parser, prepared.reasoning_parser
        self.tool_parser = tools.streaming(prepared.tool_names) if tools is not None else None
        self.reasoner = reasoning.streaming(prepared.chat_template_kwargs) if reasoning is not None else None
        self.sequence = 0
        self.output: list[dict[str, Any]] = []
        self.open: dict[str, Any] | None = None  # the reasoning or message item being streamed
        self.open_text = ""
        self.tokens = StreamedTokens()
        self.finish_reason: str | None = None
        self.text_logprobs: list[dict[str, Any]] = []
        self.call_ids: list[str] = []
        self.held_reasoning = ""

    def event(self, kind: str, **fields: Any) -> str:
        data = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return f"event: {kind}\ndata: {json.dumps(data, ensure_ascii=False, separators=(',', ':'))}\n\n"

    def error(self, exc: APIError) -> str:
        """``exc`` as an ``error`` event."""
        return self.event("error", code=exc.code, message=str(exc), param=exc.param)

    def failure(self, message: str) -> str:
        """An unexpected failure as an ``error`` event with code ``server_error``."""
        return self.event("error", code="server_error", message=message, param=None)

    def response(self, status: str, usage_body: dict[str, Any] | None = None) -> dict[str, Any]:
        return response_object(
            self.body, self.prepared, list(self.output), status=status, usage_body=usage_body
        )

    def start(self) -> list[str]:
        return [self.event("response.created", response=self.response("in_progress")),
                self.event("response.in_progress", response=self.response("in_progress"))]  # fmt: skip

    def _open(self, kind: str) -> list[str]:
        """Events opening a ``reasoning`` or ``message`` item (closing the other first)."""
        if self.open is not None and self.open["type"] == kind:
            return []
        out = self._close()
        if kind == "reasoning":
            self.open = reasoning_item(new_item_id("rs"), "", "in_progress")
            part: dict[str, Any] = {"type": "reasoning_text", "text": ""}
        else:
            self.open = message_item(new_item_id("msg"), None, "in_progress", None)
            part = output_text_part("", None)
        index = len(self.output)
        self.output.append(self.open)
        out.append(self.event("response.output_item.added", output_index=index, item=self.open))
        out.append(self.event("response.content_part.added", item_id=self.open["id"], output_index=index,
                              content_index=0, part=part))  # fmt: skip
        return out

    def _close(self, status: str = "completed") -> list[str]:
        item, text = self.open, self.open_text
        if item is None:
            return []
        self.open, self.open_text = None, ""
        index = len(self.output) - 1
        common = {"item_id": item["id"], "output_index": index, "content_index": 0}
        if item["type"] == "reasoning":
            part: dict[str, Any] = {"type": "reasoning_text", "text": text}
            done = [self.event("response.reasoning_text.done", text=text, **common)]
            item.update(reasoning_item(item["id"], text, status))
        else:
            part = output_text_part(text, self.text_logprobs if self.prepared.want_logprobs else None)
            done = [self.event("response.output_text.done", text=text, logprobs=part["logprobs"], **common)]
            item.update(message_item(item["id"], text, status, part["logprobs"]))
        done.append(self.event("response.content_part.done", part=part, **common))
        done.append(self.event("response.output_item.done", output_index=index, item=item))
        return done

    def _delta(self, kind: str, text: str) -> list[str]:
        if kind == "reasoning" and (self.open is None or self.open["type"] != "reasoning"):
            self.held_reasoning += text  # whitespace alone (an empty thinking block) opens no item
            if not self.held_reasoning.strip():
                return []
            text, self.held_reasoning = self.held_reasoning, ""
        out = self._open(kind)
        assert self.open is not None
        self.open_text += text
        common = {"item_id": self.open["id"], "output_index": len(self.output) - 1, "content_index": 0}
        if kind == "reasoning":
            out.append(self.event("response.reasoning_text.delta", delta=text, **common))
        else:
            logprobs, self.tokens.pending_logprobs = self.tokens.pending_logprobs, []
            self.text_logprobs.extend(logprobs)
            out.append(self.event("response.output_text.delta", delta=text, logprobs=logprobs, **common))
        return out

    def on_delta(self, delta: SequenceDelta) -> list[str]:
        self.tokens.add(delta, self.prepared, self.state)
        out: list[str] = []
        text = delta.text
        if self.reasoner is not None:
            reasoning, text = self.reasoner.feed(text)
            if reasoning:
                out.extend(self._delta("reasoning", reasoning))
        shown = self.tool_parser.feed(text) if self.tool_parser is not None and text else text
        if shown:
            out.extend(self._delta("message", shown))
        if delta.finish_reason is not None:
            self.finish_reason = delta.finish_reason
        return out

    def finish_items(self) -> list[str]:
        """Flush the parsers, close the open item and stream the function calls."""
        out: list[str] = []
        if self.reasoner is not None:
            reasoning, held = self.reasoner.finish()
            if reasoning:
                out.extend(self._delta("reasoning", reasoning))
            shown = self.tool_parser.feed(held) if self.tool_parser is not None and held else held
            if shown:
                out.extend(self._delta("message", shown))
        calls = []
        if self.tool_parser is not None:
            rest, calls = self.tool_parser.finish()
            if rest:
                out.extend(self._delta("message", rest))
        if not calls and not any(item["type"] == "message" for item in self.output) and self.open is None:
            out.extend(self._open("message"))  # a reply with no text still has its (empty) message
        status = "incomplete" if self.finish_reason == "length" else "completed"
        out.extend(self._close(status))
        self.call_ids = [call.id for call in calls]
        for call in calls:
            index = len(self.output)
            item = function_call_item(new_item_id("fc"), call.id, call.name, "", "in_progress")
            self.output.append(item)
            out.append(self.event("response.output_item.added", output_index=index, item=item))
            common = {"item_id": item["id"], "output_index": index}
            out.append(self.event("response.function_call_arguments.delta", delta=call.arguments, **common))
            out.append(self.event("response.function_call_arguments.done", arguments=call.arguments,
                                  name=call.name, **common))  # fmt: skip
            item.update(arguments=call.arguments, status="completed")
            out.append(self.event("response.output_item.done", output_index=index, item=item))
        return out

    async def finish(self) -> list[str]:
        """The closing items, the record, then ``response.completed`` (or ``response.incomplete``)."""
        out = self.finish_items()
        reason = "tool_calls" if self.call_ids else (self.finish_reason or "stop")
        record = choice_record(self.tokens.sequence(0, self.finish_reason), reason, self.call_ids)
        await self.state.records.put(make_record(self.prepared, [record], self.state, stream=True))
        status = "incomplete" if self.finish_reason == "length" else "completed"
        prompt_tokens = len(self.prepared.generation.prompt_token_ids)
        final = self.response(status, usage(prompt_tokens, len(self.tokens.token_ids)))
        out.append(self.event(f"response.{status}", response=final))
        return out


async def open_response_stream(
    body: ResponsesRequest,
    prepared: PreparedChat,
    state: ServerState,
    on_close: Callable[[], None] | None = None,
) -> AsyncIterator[str]:
    """Start decoding and return the SSE event iterator (the first engine delta is awaited first,
    so a request the engine refuses gets a JSON error, not a broken stream). ``on_close`` runs once
    the iterator is finished or closed."""
    return await pump_events(_Events(body, prepared, state), prepared, state, on_close, "response")
