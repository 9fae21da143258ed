"""Test helper: OpenAI tool definitions the tests send to the server."""

from __future__ import annotations

from typing import Any

#: ``add(a, b)`` on two integers (unbounded; the cross-family tests bound theirs, ``families_support.ADD``).
ADD_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}
