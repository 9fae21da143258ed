"""Asking a LangChain chat model for JSON that follows a schema (``response_format`` json_schema).

Shared by the RULER judge and the scenario generator, which both ask for schema-constrained
JSON where the model supports it and fall back to asking plainly (their prompts state the
format) where it does not: either the chat model class has no json_schema mode, or the
endpoint behind it rejects the request (many OpenAI-compatible servers answer 400/422).
"""

from __future__ import annotations

import json
from typing import Any

from .content import content_text

__all__ = ["NO_JSON_SCHEMA_MODE", "answer_text", "json_schema_output", "rejects_json_schema"]

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
