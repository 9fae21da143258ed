"""Message content as plain text, one rule for every module that reads chat messages."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["content_text"]


def content_text(content: Any) -> str:
    """The text of an OpenAI / LangChain message ``content``.

    A string is returned as is; a list of content parts gives the concatenated text of its
    text parts (plain strings and ``{"type": "text", "text": ...}``; image and other parts are
    skipped); ``None`` gives ``""``; anything else its ``str()``.
    """
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part if isinstance(part, str) else str(part.get("text", ""))
            for part in content
            if isinstance(part, str) or (isinstance(part, Mapping) and part.get("type", "text") == "text")
        )
    return str(content)
