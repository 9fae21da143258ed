"""Reading pytest marks off a test file's syntax tree (no import, no collection), for the marker checks."""

from __future__ import annotations

import ast

__all__ = ["module_marks"]


def module_marks(tree: ast.Module) -> str:
    """The source of the module's ``pytestmark`` (empty without one)."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets
        ):
            return ast.unparse(node.value)
    return ""
