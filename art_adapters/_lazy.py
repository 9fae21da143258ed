"""Names a package exports but imports on first use, so importing the client stays light.

The core's twin of ``art_adapters_backend._lazy``, with its signature and table format: the core never
imports the backend, and the backend's packages load without the client.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, modules: dict[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module ``__getattr__`` and ``__dir__`` of ``package`` (PEP 562).

    ``modules`` maps a module (a path relative to ``package``) to the names it gives, space-separated,
    as an import line would: each is taken from there on first access, then kept in the package's
    namespace; any other name is an ``AttributeError``.
    """
    namespace = sys.modules[package].__dict__
    where = {name: module for module, names in modules.items() for name in names.split()}

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(where))

    return __getattr__, __dir__
