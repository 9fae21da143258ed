"""Test helper: OpenAI tool definitions the tests send to the server."""

from __future__ import annotations

from typing import Any


def add_tool(maximum: int | None = None) -> dict[str, Any]:
    """``add(a, b)`` on two integers; with ``maximum``, each bounded to ``0..maximum``."""
    integer: dict[str, Any] = {"type": "integer"}
    if maximum is not None:
        integer |= {"minimum": 0, "maximum": maximum}
    return {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers.",
            "parameters": {
                "type": "object",
                "properties": {"a": dict(integer), "b": dict(integer)},
                "required": ["a", "b"],
            },
        },
    }


#: ``add(a, b)`` on two integers (unbounded; the cross-family tests bound theirs, ``families_support.ADD``).
ADD_TOOL: dict[str, Any] = add_tool()
