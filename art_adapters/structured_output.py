"""Asking a LangChain chat model for JSON that follows a schema (``response_format`` json_schema).

Shared by the RULER judge and the scenario generator, which both ask for schema-constrained
JSON where the model supports it and fall back to asking plainly (their prompts state the
format) where it does not: either the chat model class has no json_schema mode, or the
endpoint behind it rejects the request (many OpenAI-compatible servers answer 400/422).
"""

from __future__ import annotations

import json
from typing import Any

from ._content import content_text

__all__ = [
    "NO_JSON_SCHEMA_MODE",
    "answer_text",
    "content_text",
    "cut_off_text",
    "finish_reason",
    "json_schema_output",
    "rejects_json_schema",
]

#: What ``with_structured_output(method="json_schema")`` raises for a model class without that mode.
NO_JSON_SCHEMA_MODE = (NotImplementedError, TypeError, ValueError)

#: HTTP statuses with which OpenAI-compatible servers refuse a ``response_format`` they do not support.
_REJECTED_STATUS = (400, 422)


def json_schema_output(model: Any, name: str, schema: dict[str, Any]) -> Any:
    """``model`` constrained to ``schema``, answering ``{"raw": message, "parsed": ...}`` (see :func:`answer_text`).

    Raises:
        NotImplementedError, TypeError, ValueError: the model class has no json_schema mode
            (:data:`NO_JSON_SCHEMA_MODE`).
    """
    return model.with_structured_output(
        {"name": name, "schema": schema}, method="json_schema", include_raw=True
    )


def rejects_json_schema(exc: BaseException) -> bool:
    """Whether ``exc`` is the endpoint refusing a json_schema request (HTTP 400/422), not another failure."""
    return getattr(exc, "status_code", None) in _REJECTED_STATUS


def answer_text(result: dict[str, Any]) -> str:
    """The answer's raw text; the parsed JSON re-serialised when the text is empty (a tool-call style answer)."""
    text = content_text(result["raw"].content) if result.get("raw") is not None else ""
    if not text.strip() and isinstance(result.get("parsed"), dict):
        return json.dumps(result["parsed"])
    return text


def cut_off_text(exc: BaseException) -> str | None:
    """The partial answer inside an ``openai.LengthFinishReasonError``; ``None`` for any other exception.

    ``ChatOpenAI`` sends a ``response_format`` through the OpenAI SDK's ``parse`` call, which
    raises ``LengthFinishReasonError`` (carrying the whole ``completion``) when the answer
    stops at the token limit, so no text reaches the caller; this recovers it, so the
    complete items of a cut JSON array can still be used.
    """
    try:
        from openai import LengthFinishReasonError
    except ImportError:  # pragma: no cover - langchain-openai depends on openai
        return None
    if not isinstance(exc, LengthFinishReasonError):
        return None
    choices = exc.completion.choices
    return (choices[0].message.content or "") if choices else ""


def finish_reason(message: Any) -> str | None:
    """Why the model stopped (``"stop"``, ``"length"``...), from a message's ``response_metadata``."""
    metadata = getattr(message, "response_metadata", None) or {}
    reason = metadata.get("finish_reason")
    return reason if isinstance(reason, str) else None
