"""JSON-schema checks of chat requests: bounds on the event loop, compilation (cached) off it.

A tool's ``parameters`` or a ``response_format`` schema is bounded in size and depth before any
grammar work (:func:`check_schema_bounds`), then compiled once per distinct schema
(:func:`check_schema`); a forced tool call's joined grammar is bounded too (:func:`check_forced_size`).
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from typing import Any

from ..errors import BadRequestError
from ..limits import ServeLimits
from .openai_types import ChatCompletionRequest, NamedToolChoice

__all__ = ["check_forced_size", "check_schema", "check_schema_bounds"]

_XGRAMMAR_NOISE = re.compile(r"^\[[^\]]*\]\s*\S+:\d+:\s*")


class _SchemaVerdicts:
    """The outcome of compiling recently seen schemas (``None``: valid, else the reason it is not).

    Agents send the same tools with every turn: each schema is compiled once, not per request.
    Thread-safe (schemas are checked on worker threads).
    """

    def __init__(self, size: int = 512) -> None:
        self._size = size
        self._verdicts: OrderedDict[str, str | None] = OrderedDict()
        self._lock = threading.Lock()

    def verdict(self, text: str) -> str | None:
        with self._lock:
            if text in self._verdicts:
                self._verdicts.move_to_end(text)
                return self._verdicts[text]
        import xgrammar as xgr

        reason: str | None = None
        try:
            xgr.Grammar.from_json_schema(text, any_whitespace=False, strict_mode=True)
        except (RuntimeError, ValueError, TypeError) as exc:
            reason = _XGRAMMAR_NOISE.sub("", str(exc).strip()).strip()
        with self._lock:
            self._verdicts[text] = reason
            while len(self._verdicts) > self._size:
                self._verdicts.popitem(last=False)
        return reason


_SCHEMA_VERDICTS = _SchemaVerdicts()


def check_schema(schema: Any, param: str) -> None:
    """Raise a 400 naming ``param`` if ``schema`` is not a JSON schema the decoder can follow.

    Compiling costs about the cube of the schema's depth: call it off the event loop, after
    :func:`check_schema_bounds`. Verdicts are cached.
    """
    if not isinstance(schema, dict):
        raise BadRequestError(
            f"{param} must be a JSON schema object, not {type(schema).__name__}", param=param
        )
    reason = _SCHEMA_VERDICTS.verdict(json.dumps(schema))
    if reason is not None:
        raise BadRequestError(
            f"{param} is not a valid JSON schema: {reason}", param=param, code="invalid_schema"
        )


def _json_depth(value: Any, stop_past: int) -> int:
    """The nesting depth of ``value`` (objects and arrays), counted up to ``stop_past + 1``."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        if deepest > stop_past:
            return deepest
        stack.extend((child, depth + 1) for child in children)
    return deepest


def check_schema_bounds(schema: Any, param: str, limits: ServeLimits) -> None:
    """Raise a 400 naming ``param`` if ``schema`` is deeper or bigger than ``limits`` allow.

    Cheap (no compilation): run it on the event loop before any grammar work.
    """
    depth = _json_depth(schema, limits.max_schema_depth)
    if depth > limits.max_schema_depth:
        raise BadRequestError(
            f"{param} is nested more than {limits.max_schema_depth} levels deep (objects and arrays); "
            "this server compiles schemas up to that depth (serve --max-schema-depth): flatten the schema",
            param=param,
            code="invalid_schema",
        )
    size = len(json.dumps(schema, separators=(",", ":")))
    if size > limits.max_schema_bytes:
        raise BadRequestError(
            f"{param} is {size} bytes of JSON; this server accepts schemas up to {limits.max_schema_bytes} "
            "bytes (serve --max-schema-bytes): shorten the schema",
            param=param,
            code="invalid_schema",
        )


def check_forced_size(request: ChatCompletionRequest, limits: ServeLimits) -> None:
    """A 400 when a forced call's grammar would join more schema bytes than ``--max-constraint-bytes``.

    ``tool_choice: "required"`` constrains the reply to any of the tools: one grammar of all their
    schemas, compiled per request, whose cost grows with their total size.
    """
    choice = request.tool_choice
    if not request.tools or not (choice == "required" or isinstance(choice, NamedToolChoice)):
        return
    chosen = choice.function.name if isinstance(choice, NamedToolChoice) else None
    size = sum(
        len(json.dumps(tool.function.parameters, separators=(",", ":"))) if tool.function.parameters else 0
        for tool in request.tools
        if chosen is None or tool.function.name == chosen
    )
    if size > limits.max_constraint_bytes:
        raise BadRequestError(
            f"the forced tool call joins {size} bytes of tool schemas into one grammar; this server compiles "
            f"at most {limits.max_constraint_bytes} (serve --max-constraint-bytes): name one tool in "
            "tool_choice, or offer fewer or smaller tools",
            param="tool_choice",
            code="invalid_schema",
        )
