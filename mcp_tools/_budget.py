"""The scenario generator's context window: how long it is, and fitting the prompt into it.

The generator reads a system prompt, the tool descriptions, the tasks already written and the server's
resources, and must still have room for its answer (:func:`estimate_tokens`, :func:`discover_context_tokens`).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

logger = logging.getLogger(__name__)

__all__ = [
    "CHARS_PER_TOKEN",
    "MESSAGE_OVERHEAD_TOKENS",
    "RESOURCE_TEXT_CHARS",
    "UNKNOWN_CONTEXT_RESOURCE_CHARS",
    "answer_reserve",
    "describe_resources",
    "discover_context_tokens",
    "estimate_tokens",
    "is_context_overflow",
]

#: Characters per token assumed when estimating a prompt's length (conservative: see :func:`estimate_tokens`).
CHARS_PER_TOKEN = 3
#: Tokens assumed for a chat message's template (role markers, separators).
MESSAGE_OVERHEAD_TOKENS = 16
#: Most characters of one resource's text shown to the generator.
RESOURCE_TEXT_CHARS = 2000
#: Most characters of resources (all of them together) shown when the context length is unknown.
UNKNOWN_CONTEXT_RESOURCE_CHARS = 8000
#: Keys of a ``/v1/models`` entry that carry the model's context length.
_CONTEXT_KEYS = ("max_model_len", "context_length", "context_window", "max_context_length")
#: Seconds to wait for the endpoint's model list.
_LOOKUP_TIMEOUT_S = 10.0


def estimate_tokens(text: str) -> int:
    """Estimated tokens of *text*: ``ceil(len(text) / CHARS_PER_TOKEN)``.

    Token counts are *estimated*, not measured (no tokenizer is known for an arbitrary endpoint):
    one token per :data:`CHARS_PER_TOKEN` characters (3), rounded up, plus
    :data:`MESSAGE_OVERHEAD_TOKENS` per chat message. English prose averages about 4 characters a
    token with common BPE vocabularies and identifiers or JSON about 3, so the estimate errs on
    the long side.
    """
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def answer_reserve(model: Any, count: int, max_task_chars: int) -> int:
    """Tokens to keep free for an answer of *count* tasks: the model's ``max_tokens`` when it has one."""
    for field in ("max_tokens", "max_completion_tokens"):
        value = getattr(model, field, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return count * (math.ceil(max_task_chars / CHARS_PER_TOKEN) + 12) + 16


def _positive_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float) and value > 0:
        return int(value)
    return None


async def discover_context_tokens(model: Any) -> int | None:
    """The generator's context length in tokens, or ``None`` when unknown.

    Unless the caller gave ``context_tokens``, it is, in order: the chat model's LangChain profile
    (``model.profile["max_input_tokens"]``, known for hosted models); the OpenAI-compatible
    endpoint's model list (``GET /v1/models``: ``max_model_len`` as vLLM reports it, or
    ``context_length`` / ``context_window`` / ``max_context_length``). When none is known, the
    tools are not checked and the resources are cut to :data:`UNKNOWN_CONTEXT_RESOURCE_CHARS`
    characters in all.
    """
    profile = getattr(model, "profile", None)
    if isinstance(profile, Mapping) and (tokens := _positive_int(profile.get("max_input_tokens"))):
        return tokens
    client = getattr(model, "root_async_client", None)  # ChatOpenAI and its subclasses
    name = getattr(model, "model_name", None)
    if client is None or not isinstance(name, str):
        return None
    try:
        page = await asyncio.wait_for(client.models.list(), _LOOKUP_TIMEOUT_S)
    except Exception as exc:  # noqa: BLE001 - any failure means "unknown", never a failed generation
        logger.debug("scenario generator: no model list from the endpoint (%s)", exc)
        return None
    for entry in getattr(page, "data", None) or []:
        if getattr(entry, "id", None) != name:
            continue
        extra = getattr(entry, "model_extra", None) or {}
        for key in _CONTEXT_KEYS:
            if tokens := _positive_int(extra.get(key)):
                return tokens
    return None


def is_context_overflow(exc: BaseException) -> bool:
    """Whether *exc* is an endpoint saying the prompt does not fit the model's context."""
    if getattr(exc, "code", None) == "context_length_exceeded":
        return True
    return getattr(exc, "status_code", None) == 400 and "context length" in str(exc).casefold()


def describe_resources(resources: Sequence[Mapping[str, Any]], max_chars: int | None) -> tuple[str, int]:
    """The resources as the generator reads them, in at most *max_chars* characters.

    Resources are shown in order, each text cut to :data:`RESOURCE_TEXT_CHARS` and to what
    is left of *max_chars*; those that no longer fit are left out and counted in a last
    line. ``None``: no overall limit. Returns the text ("" when nothing fits) and how many
    resources were left out or cut.
    """
    if not resources:
        return "", 0
    title = "Data the server holds (resources):"
    room = None if max_chars is None else max_chars - len(title) - 60  # 60: the "N more" line
    if room is not None and room <= 0:
        return "", len(resources)
    lines = [title]
    trimmed = 0
    for index, resource in enumerate(resources):
        head = f"- {resource.get('name') or resource.get('uri')}"
        if resource.get("description"):
            head += f": {' '.join(str(resource['description']).split())}"
        if room is not None and len(head) + 1 > room:
            left_out = len(resources) - index
            lines.append(f"({left_out} more resource{'s' if left_out != 1 else ''} not shown)")
            return "\n".join(lines), trimmed + left_out
        lines.append(head)
        if room is not None:
            room -= len(head) + 1
        text = str(resource.get("text") or "")
        if text:
            limit = RESOURCE_TEXT_CHARS if room is None else min(RESOURCE_TEXT_CHARS, room - 5)
            if limit < len(text):
                trimmed += 1
                text = text[: max(limit, 0)].rstrip() + " ..." if limit > 0 else ""
            if text:
                lines.append(text)
                if room is not None:
                    room -= len(text) + 1
    return "\n".join(lines), trimmed
