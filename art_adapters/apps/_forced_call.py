"""A forced first call that finishes: bounded strings and arrays in its schemas, and a cut call noticed.

The backend decodes a forced call within the tool's JSON schema; a greedy small model can loop
inside an unbounded string or array until the token limit, leaving a call that does not parse.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool

from art_adapters import ConfigError
from art_adapters.structured_output import finish_reason

__all__ = ["bound_schema", "bounded_tools", "first_turn_cut", "parse_pins"]


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
        skip = ("enum", "const", "default", "examples")  # values, not schemas
        stack.extend(value for key, value in node.items() if key not in skip)
    return schema


def bounded_tools(
    tools: Sequence[BaseTool], max_chars: int, max_items: int, pins: Mapping[str, str] | None = None
) -> list[dict[str, Any]]:
    """*tools* as OpenAI tool dicts whose parameter schemas are bounded (:func:`bound_schema`), and
    whose top-level parameters named in *pins* can only take the pinned value (``const``)."""
    out = []
    for tool in tools:
        spec = convert_to_openai_tool(tool)
        function = dict(spec["function"])
        if "parameters" in function:
            parameters = bound_schema(function["parameters"], max_chars, max_items)
            properties = parameters.get("properties") or {}
            for name, value in (pins or {}).items():
                if name in properties:
                    properties[name] = {"type": "string", "const": value}
            function["parameters"] = parameters
        out.append({**spec, "function": function})
    return out


def parse_pins(pins: Sequence[str], tools: Sequence[BaseTool]) -> dict[str, str]:
    """``NAME=VALUE`` options as ``{NAME: VALUE}``.

    Raises:
        ConfigError: an option has no ``=``, or no offered tool has a parameter NAME.
    """
    out: dict[str, str] = {}
    for pin in pins:
        name, sep, value = pin.partition("=")
        if not sep or not name:
            raise ConfigError(f"--pin-arg {pin!r} is not NAME=VALUE (e.g. repo_path=.)")
        if not any(name in (t.args or {}) for t in tools):
            raise ConfigError(f"--pin-arg {pin!r}: no offered tool has a parameter {name!r}")
        out[name] = value
    return out


def first_turn_cut(messages: Sequence[Any]) -> bool:
    """Whether the run's first model turn stopped at its token limit (``finish_reason`` ``"length"``)."""
    first = next((m for m in messages if getattr(m, "type", None) == "ai"), None)
    return first is not None and finish_reason(first) == "length"
