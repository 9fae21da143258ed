"""A forced first call that finishes: bounded strings and arrays in its schemas, and a cut call noticed.

The backend decodes a forced call within the tool's JSON schema; a greedy small model can loop
inside an unbounded string or array until the token limit, leaving a call that does not parse.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool

from art_adapters.structured_output import finish_reason

__all__ = ["bound_schema", "bounded_tools", "first_turn_cut"]


def _types(node: dict[str, Any]) -> set[str]:
    kind = node.get("type")
    return {kind} if isinstance(kind, str) else set(kind) if isinstance(kind, list) else set()


def bound_schema(schema: Any, max_chars: int, max_items: int) -> Any:
    """A copy of JSON *schema* whose strings hold at most *max_chars* characters and arrays *max_items* items.

    Only open-ended nodes are bounded: a string with ``enum``/``const``, or a ``maxLength`` /
    ``maxItems`` already at most the bound, is left as it is; a bound below the node's own
    ``minLength`` / ``minItems`` is raised to it, so the schema stays satisfiable.
    """
    schema = copy.deepcopy(schema)
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
            continue
        if not isinstance(node, dict):
            continue
        types = _types(node)
        if "string" in types and "enum" not in node and "const" not in node:
            limit = max(max_chars, int(node.get("minLength", 0)))
            node["maxLength"] = min(int(node.get("maxLength", limit)), limit)
        if "array" in types:
            limit = max(max_items, int(node.get("minItems", 0)))
            node["maxItems"] = min(int(node.get("maxItems", limit)), limit)
        stack.extend(value for key, value in node.items() if key not in ("enum", "const", "default", "examples"))
    return schema


def bounded_tools(tools: Sequence[BaseTool], max_chars: int, max_items: int) -> list[dict[str, Any]]:
    """*tools* as OpenAI tool dicts whose parameter schemas are bounded (:func:`bound_schema`)."""
    out = []
    for tool in tools:
        spec = convert_to_openai_tool(tool)
        function = dict(spec["function"])
        if "parameters" in function:
            function["parameters"] = bound_schema(function["parameters"], max_chars, max_items)
        out.append({**spec, "function": function})
    return out


def first_turn_cut(messages: Sequence[Any]) -> bool:
    """Whether the run's first model turn stopped at its token limit (``finish_reason`` ``"length"``)."""
    first = next((m for m in messages if getattr(m, "type", None) == "ai"), None)
    return first is not None and finish_reason(first) == "length"
