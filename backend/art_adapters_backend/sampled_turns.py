"""Render an assistant tool-call turn the server sampled with exactly the tokens it sampled.

The model may space its ``<tool_call>`` JSON differently from the template's canonical
rendering (``{"name": "add", "arguments": {"a": 1}}``). If the next request's prompt re-rendered
the call canonically, its tokens would no longer extend the sampled ones, and training would
split the conversation into separate sequences. So the record store indexes every tool-call
id the server issued (``call_<hex>``), and when a request's assistant message carries such
ids, the chat template uses that choice's exact completion tokens (EOS excluded) instead,
provided the message still says the same thing: same content, same calls in the same order,
same names and JSON-equal arguments. Anything edited falls back to the canonical rendering.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from .records import RecordStore
from .tool_parser import parse_reply

__all__ = ["SampledTurns"]

logger = logging.getLogger(__name__)


def _args(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value) if value.strip() else {}
        except (json.JSONDecodeError, RecursionError):
            return value
    return value


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content.strip()
    return "".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping)).strip()


class SampledTurns:
    """``lookup(message)`` -> the exact token ids of a tool-call turn this server sampled, or ``None``.

    Args:
        records: the server's record store (indexes tool-call ids).
        eos_token_ids: ids that end a turn (stripped from the end of the completion).
    """

    def __init__(self, records: RecordStore, eos_token_ids: set[int]) -> None:
        self.records = records
        self.eos_token_ids = eos_token_ids

    def __call__(self, message: Mapping[str, Any]) -> list[int] | None:
        calls = message.get("tool_calls") or []
        ids = [call.get("id") for call in calls if isinstance(call, Mapping)]
        if not ids or not all(isinstance(i, str) for i in ids):
            return None
        found = self.records.tool_call_choice(ids[0])
        if found is None:
            return None
        _record, choice = found
        if list(choice.tool_call_ids) != ids:
            return None
        parsed = parse_reply(choice.text, None)
        if _text(parsed.content) != _text(message.get("content")) or len(parsed.tool_calls) != len(calls):
            return None
        for sent, sampled in zip(calls, parsed.tool_calls, strict=True):
            function = sent.get("function") or {}
            if function.get("name") != sampled.name or _args(function.get("arguments")) != _args(
                sampled.arguments
            ):
                return None
        tokens = list(choice.completion_token_ids)
        if tokens and tokens[-1] in self.eos_token_ids:
            tokens = tokens[:-1]
        return tokens
