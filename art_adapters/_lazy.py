"""Lazy re-exports for a package ``__init__``: names whose modules load on first access."""

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    namespace: dict[str, Any], table: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module-level ``__getattr__`` and ``__dir__`` for a package whose globals are ``namespace``.

    ``table`` maps each lazy name to the module (relative to the package) that defines it; a name
    is imported on first access and then cached in ``namespace``. ``__dir__`` lists the globals and
    the package's ``__all__`` (read when called, so it may be assigned after this call).
    """
    package = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        module_name = table.get(name)
        if module_name is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module_name, package), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(namespace["__all__"]))

    return __getattr__, __dir__
