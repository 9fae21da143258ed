"""Structure figures read off the shipped packages' syntax trees: import circles, long modules and
functions, long module docstrings, private names used across modules, the backend's layers.

Used by ``tests/client/test_structure.py`` (the guard rails) and runnable for the before/after
figures: ``python -m tests.helpers.structure`` (repeated-code pairs come from ``duplicates``).
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {
    "art_adapters": ROOT / "art_adapters",
    "mcp_tools": ROOT / "mcp_tools",
    "art_adapters_backend": ROOT / "backend" / "art_adapters_backend",
}
BACKEND = "art_adapters_backend"
#: The backend's wings and the other wings each may import (each may import itself and the shared
#: modules: every top-level module that is not a process module).
BACKEND_WINGS: dict[str, set[str]] = {"http": {"serving", "training"}, "serving": set(), "training": set()}
#: The backend's top-level modules that assemble the wings into a server process (and the package itself).
PROCESS_MODULES = {"__main__", "cli", "serve", "state"}
#: Web frameworks and the ASGI server: only the http wing and the process modules import them.
WEB_FRAMEWORKS = {"fastapi", "starlette", "sse_starlette", "uvicorn"}
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 60
MAX_DOCSTRING_LINES = 8
FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass(frozen=True)
class Module:
    """One source file of a shipped package."""

    name: str
    path: Path
    tree: ast.Module

    @property
    def is_package(self) -> bool:
        return self.path.name == "__init__.py"


def modules() -> dict[str, Module]:
    """Every module of the shipped packages by dotted name."""
    found: dict[str, Module] = {}
    for top, folder in PACKAGES.items():
        for path in sorted(folder.rglob("*.py")):
            parts = [top, *path.relative_to(folder).with_suffix("").parts]
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = Module(name, path, ast.parse(path.read_text(), str(path)))
    return found


def _type_checking_nodes(tree: ast.Module) -> set[int]:
    """ids of the import nodes under ``if TYPE_CHECKING:`` (they never run)."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped |= {id(inner) for stmt in node.body for inner in ast.walk(stmt)}
    return skipped


def imported_from(node: ast.ImportFrom, package: str) -> str:
    """The module ``from ... import`` names, a relative one resolved against ``package``."""
    base = node.module or ""
    if node.level:
        anchor = package.split(".")
        anchor = anchor[: len(anchor) - (node.level - 1)]
        base = ".".join([*anchor, base] if base else anchor)
    return base


def every_import(
    module: Module, known: dict[str, Module]
) -> Iterator[tuple[int, str, tuple[str, ...], bool]]:
    """``(line, target module, imported names, typing only)`` for each import, function-local and
    ``TYPE_CHECKING`` ones (typing only) too. ``from p import m`` where ``m`` is a submodule targets
    ``p.m``."""
    typing_only = _type_checking_nodes(module.tree)
    package = module.name if module.is_package else module.name.rpartition(".")[0]
    for node in ast.walk(module.tree):
        typing = id(node) in typing_only
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, (), typing
        elif isinstance(node, ast.ImportFrom):
            base = imported_from(node, package)
            plain: list[str] = []
            for alias in node.names:
                if f"{base}.{alias.name}" in known:
                    yield node.lineno, f"{base}.{alias.name}", (), typing
                else:
                    plain.append(alias.name)
            if plain:
                yield node.lineno, base, tuple(plain), typing


def imports(module: Module, known: dict[str, Module]) -> Iterator[tuple[int, str, tuple[str, ...]]]:
    """``(line, target module, imported names)`` for each import that runs (function-local ones
    too, ``TYPE_CHECKING`` ones not)."""
    for line, target, names, typing in every_import(module, known):
        if not typing:
            yield line, target, names


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules of ours it imports (edges within one top-level package only)."""
    known = modules()
    graph: dict[str, set[str]] = {name: set() for name in known}
    for name, module in known.items():
        top = name.split(".")[0]
        for _, target, _ in imports(module, known):
            if target in known and target != name and target.split(".")[0] == top:
                graph[name].add(target)
    return graph


def import_circles() -> list[list[str]]:
    """Strongly connected groups of two or more modules (Tarjan), each sorted."""
    graph = import_graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(start: str) -> None:
        nonlocal counter
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group: list[str] = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        found.append(sorted(group))
            elif child not in index:
                index[child] = low[child] = counter
                counter += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return sorted(found)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _owner_of_private_module(target: str) -> str | None:
    """The package that owns ``target``'s first ``_private`` part (``a.b._c.d`` -> ``a.b``), if any."""
    parts = target.split(".")
    for i, part in enumerate(parts[1:], 1):
        if _private(part):
            return ".".join(parts[:i])
    return None


def _defined_private_names(tree: ast.Module) -> set[str]:
    """``_names`` a module defines itself: functions, classes, assigned names and attributes."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, FunctionNode | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {n for n in names if _private(n)}


def private_reach_ins() -> list[str]:
    """``path:line uses ...`` for each use of another module's private names: a ``_name`` imported
    from a sibling module, a ``_private`` module of another (sub)package imported, or ``obj._attr``
    where this module defines no ``_attr`` itself (``os._exit`` and the like aside)."""
    known = modules()
    found: list[str] = []
    for name, module in known.items():
        where = module.path.relative_to(ROOT)
        foreign: set[str] = set()
        for line, target, names in imports(module, known):
            if target not in known:
                foreign.add(target.split(".")[0])
                continue
            if target == name:
                continue
            found += [f"{where}:{line} uses {target}.{n}" for n in names if _private(n)]
            owner = _owner_of_private_module(target)
            if owner is not None and name != owner and not name.startswith(owner + "."):
                found.append(f"{where}:{line} uses {target} (a private module of {owner})")
        own = _defined_private_names(module.tree)
        for node in ast.walk(module.tree):
            if (
                isinstance(node, ast.Attribute)
                and _private(node.attr)
                and node.attr not in own
                and not (isinstance(node.value, ast.Name) and node.value.id in foreign | {"self", "cls"})
            ):
                found.append(f"{where}:{node.lineno} uses {ast.unparse(node)}")
    return sorted(set(found))


def backend_layer(module: str) -> str:
    """Where a module of the backend sits: ``process``, one of :data:`BACKEND_WINGS`, or ``shared``."""
    parts = module.split(".")
    if len(parts) == 1 or parts[1] in PROCESS_MODULES:
        return "process"
    return parts[1] if parts[1] in BACKEND_WINGS else "shared"


def _backend_rule(importer: str, target: str, typing: bool) -> str | None:
    """Why ``importer`` (a backend layer) may not import ``target`` (a module), or ``None``."""
    top = target.split(".")[0]
    if top in WEB_FRAMEWORKS:
        return None if importer in {"http", "process"} else "only the http wing and process modules use it"
    if top != BACKEND:
        return None
    layer = backend_layer(target)
    if layer in {importer, "shared"} or importer == "process":
        return None
    if importer == "shared":
        return "a shared module imports no wing and no process module"
    if layer == "process":
        return None if typing or importer == "http" else "a wing imports the process modules for typing only"
    if layer not in BACKEND_WINGS[importer]:
        return f"the {importer} wing may not import the {layer} wing"
    return None


def backend_layer_violations() -> list[str]:
    """``path:line module imports target: rule`` for each backend import against its layers (all
    imports: function-local and ``TYPE_CHECKING`` ones too, the latter only typing the process modules)."""
    known = modules()
    found: list[str] = []
    for name, module in known.items():
        if name.split(".")[0] != BACKEND:
            continue
        importer = backend_layer(name)
        for line, target, _, typing in every_import(module, known):
            reason = _backend_rule(importer, target, typing)
            if reason is not None:
                found.append(f"{module.path.relative_to(ROOT)}:{line} imports {target}: {reason}")
    return sorted(set(found))


def long_modules() -> list[tuple[str, int]]:
    """``(path, lines)`` of the modules over :data:`MAX_MODULE_LINES`."""
    result = []
    for module in modules().values():
        count = len(module.path.read_text().splitlines())
        if count > MAX_MODULE_LINES:
            result.append((str(module.path.relative_to(ROOT)), count))
    return sorted(result, key=lambda item: -item[1])


#: The comment above a function (or its decorators) that says why it is longer or wider than the limits.
SHAPE_REASON = "# shape:"
MAX_PARAMETERS = 8


def _functions() -> Iterator[tuple[Module, FunctionNode]]:
    for module in modules().values():
        for node in ast.walk(module.tree):
            if isinstance(node, FunctionNode):
                yield module, node


def body_lines(node: FunctionNode) -> int:
    """The function's lines, its docstring left out (a docstring documents; it does not make code long)."""
    count = (node.end_lineno or node.lineno) - node.lineno + 1
    first = node.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        count -= (first.end_lineno or first.lineno) - first.lineno + 1
    return count


def parameters(node: FunctionNode) -> int:
    """Named parameters, ``self``/``cls`` not counted (``*args``/``**kwargs`` neither)."""
    args = node.args
    named = [*args.posonlyargs, *args.args, *args.kwonlyargs]
    return len(named) - bool(named and named[0].arg in ("self", "cls"))


def shape_reason(module: Module, node: FunctionNode) -> str | None:
    """The reason written for the function: ``# shape: ...`` on the line before it (or its decorators)
    or at the end of its ``def`` line."""
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    lines = module.path.read_text().splitlines()
    above = lines[first - 2].strip() if first >= 2 else ""
    _, marker, inline = lines[node.lineno - 1].partition(SHAPE_REASON)
    if above.startswith(SHAPE_REASON):
        return above.removeprefix(SHAPE_REASON).strip() or None
    return inline.strip() or None if marker else None


def _over(measure: Callable[[FunctionNode], int], limit: int, unexplained: bool) -> list[tuple[str, int]]:
    result = []
    for module, node in _functions():
        count = measure(node)
        if count > limit and not (unexplained and shape_reason(module, node)):
            result.append((f"{module.path.relative_to(ROOT)}:{node.lineno} {node.name}", count))
    return sorted(result, key=lambda item: -item[1])


def long_functions(*, unexplained: bool = False) -> list[tuple[str, int]]:
    """``(path:line name, lines)`` of the functions whose body (docstring aside, nested functions
    counted on their own and inside their parent) is over :data:`MAX_FUNCTION_LINES`; with
    ``unexplained``, only those without a written reason (:func:`shape_reason`)."""
    return _over(body_lines, MAX_FUNCTION_LINES, unexplained)


def wide_functions(*, unexplained: bool = False) -> list[tuple[str, int]]:
    """``(path:line name, parameters)`` of the functions over :data:`MAX_PARAMETERS` parameters;
    with ``unexplained``, only those without a written reason."""
    return _over(parameters, MAX_PARAMETERS, unexplained)


def long_docstrings() -> list[tuple[str, int]]:
    """``(path, lines)`` of the module docstrings over :data:`MAX_DOCSTRING_LINES`."""
    result = []
    for module in modules().values():
        doc = ast.get_docstring(module.tree, clean=False)
        if doc is not None:
            count = len(doc.strip().splitlines())
            if count > MAX_DOCSTRING_LINES:
                result.append((str(module.path.relative_to(ROOT)), count))
    return sorted(result, key=lambda item: -item[1])


def main() -> None:
    """Print the figures."""
    circles = import_circles()
    print(f"import circles: {len(circles)}")
    for circle in circles:
        print("  " + " <-> ".join(circle))
    reach = private_reach_ins()
    print(f"private names used across modules: {len(reach)}")
    layers = backend_layer_violations()
    print(f"backend imports against its layers: {len(layers)}")
    for row in layers:
        print("  " + row)
    for section, rows in (
        (f"modules over {MAX_MODULE_LINES} lines", long_modules()),
        (f"functions over {MAX_FUNCTION_LINES} lines, docstring aside", long_functions()),
        ("  of them without a written reason", long_functions(unexplained=True)),
        (f"functions over {MAX_PARAMETERS} parameters", wide_functions()),
        ("  of them without a written reason", wide_functions(unexplained=True)),
        (f"module docstrings over {MAX_DOCSTRING_LINES} lines", long_docstrings()),
    ):
        print(f"{section}: {len(rows)}")
        for where, count in rows:
            print(f"  {count:5d} {where}")
    if "-v" in sys.argv:
        print("\n".join(reach))


if __name__ == "__main__":
    main()
