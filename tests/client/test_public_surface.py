"""The public surface, pinned: which modules are public, and what each one exports.

Internals live in ``_private`` modules. A public package exports exactly its public names:
``__all__`` equals the names it binds without an underscore (its public subpackages aside),
as httpx's ``test_exported_members.py`` checks. A public plain module lists in ``__all__``
every class and function it defines without an underscore. A new public module, or a name
that leaks, fails here until it is added on purpose.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from types import ModuleType

import pytest

#: Every public module of the shipped packages (a dotted path with no ``_private`` part).
PUBLIC_PACKAGES = [
    "art_adapters",
    "art_adapters.apps",
    "art_adapters.observe",
    "art_adapters.ruler",
    "mcp_tools",
    "mcp_tools.servers",
]
PUBLIC_MODULES = [
    "art_adapters.cli_options",
    "art_adapters.files",
    "art_adapters.structured_output",
    "mcp_tools.servers.calculator",
    "mcp_tools.servers.notes",
]
#: Module-level dunders a package may export on purpose.
EXPORTED_DUNDERS = {"__version__"}


def public_modules_found() -> set[str]:
    found = set()
    for top in ("art_adapters", "mcp_tools"):
        package = importlib.import_module(top)
        found.add(top)
        for info in pkgutil.walk_packages(package.__path__, prefix=f"{top}.", onerror=lambda name: None):
            if not any(part.startswith("_") for part in info.name.split(".")):
                found.add(info.name)
    return found


def bound_public_names(module: ModuleType) -> set[str]:
    names = {name for name in vars(module) if not name.startswith("_") or name in EXPORTED_DUNDERS}
    # A public subpackage appears as an attribute once imported; it is reached by its own path.
    return {n for n in names if not (inspect.ismodule(getattr(module, n)) and f"{module.__name__}.{n}" in
                                     {*PUBLIC_PACKAGES, *PUBLIC_MODULES})}


def test_the_public_modules_are_exactly_the_listed_ones() -> None:
    assert public_modules_found() == {*PUBLIC_PACKAGES, *PUBLIC_MODULES}


@pytest.mark.parametrize("name", PUBLIC_PACKAGES)
def test_a_public_package_exports_exactly_its_public_names(name: str) -> None:
    package = importlib.import_module(name)
    for exported in package.__all__:  # lazily loaded names are bound on first access
        getattr(package, exported)
    assert package.__all__ == sorted(package.__all__), "keep __all__ sorted"
    assert len(set(package.__all__)) == len(package.__all__), "__all__ repeats a name"
    assert sorted(package.__all__) == sorted(bound_public_names(package))


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_a_public_module_lists_every_class_and_function_it_defines(name: str) -> None:
    module = importlib.import_module(name)
    defined = {
        n for n, value in vars(module).items()
        if not n.startswith("_") and (inspect.isclass(value) or inspect.isfunction(value))
        and value.__module__ == name
    }  # fmt: skip
    assert defined <= set(module.__all__), f"defined but not exported: {sorted(defined - set(module.__all__))}"
    assert all(hasattr(module, n) for n in module.__all__)


@pytest.mark.parametrize("name", PUBLIC_PACKAGES + PUBLIC_MODULES)
def test_every_exported_name_has_a_docstring_of_its_own(name: str) -> None:
    module = importlib.import_module(name)
    missing = []
    for exported in module.__all__:
        value = getattr(module, exported)
        if inspect.isclass(value) or inspect.isfunction(value):
            if not (value.__doc__ or "").strip():
                missing.append(exported)
    assert not missing, f"{name}: no docstring on {missing}"


def test_the_types_users_get_back_are_exported() -> None:
    import art_adapters

    returned = {"StepReport", "EvalReport", "RunProgress", "CheckpointInfo", "RunConfig", "RulerConfig"}
    assert returned <= set(art_adapters.__all__)
