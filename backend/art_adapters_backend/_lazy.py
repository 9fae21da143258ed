"""Names a package exports but imports on first use, so importing the backend or a wing stays light."""

from __future__ import annotations

import ast
import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module ``__getattr__`` and ``__dir__`` of ``package`` (PEP 562).

    The package's ``if TYPE_CHECKING:`` block imports its ``__all__`` from its modules, for type
    checkers; at run time each name is imported from the module that block names on first access,
    then kept in the package's namespace; any other name is an ``AttributeError``.

    Raises:
        ImportError: ``__all__`` and that block's names differ.
    """
    module = sys.modules[package]
    namespace = module.__dict__
    where = _type_checking_imports(Path(str(module.__file__)).read_text(encoding="utf-8"))
    if sorted(where) != sorted(namespace.get("__all__", ())):
        raise ImportError(f"{package}: __all__ is not what its TYPE_CHECKING block imports ({sorted(where)})")

    def __getattr__(name: str) -> Any:
        source = where.get(name)
        if source is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(source, package), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(where))

    return __getattr__, __dir__


def _type_checking_imports(source: str) -> dict[str, str]:
    """Each name a module's top-level ``if TYPE_CHECKING:`` block imports, and the module it names."""
    where: dict[str, str] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id.endswith("TYPE_CHECKING"):
            for item in node.body:
                if isinstance(item, ast.ImportFrom):
                    where.update({a.asname or a.name: "." * item.level + (item.module or "") for a in item.names})
    return where
