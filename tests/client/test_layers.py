"""Imports run one way: core <- mcp_tools <- apps, and the backend uses the core only.

Every ``import`` in the shipped packages (function-local ones too) is parsed and resolved to a
module name; the test fails on an import that points up the layers, or that reaches into a
``_private`` module of another package. The layers::

    art_adapters.apps        the CLI, the demo, train-mcp        imports core, mcp_tools, backend CLI
    mcp_tools                MCP servers as captured tools        imports core
    art_adapters_backend     the service (inference, training)    imports core
    art_adapters             records, capture, runner, RULER,     imports nothing of ours
                             loop, client, observe
    bench                    benchmarks (not shipped)             imports any layer's public names
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.helpers.structure import imported_from

ROOT = Path(__file__).resolve().parents[2]
SOURCES = {
    "art_adapters": ROOT / "art_adapters",
    "mcp_tools": ROOT / "mcp_tools",
    "art_adapters_backend": ROOT / "backend" / "art_adapters_backend",
    "bench": ROOT / "bench",
}

#: Which packages each package may import (itself always).
ALLOWED: dict[str, set[str]] = {
    "core": set(),
    "mcp_tools": {"core"},
    "backend": {"core"},
    "apps": {"core", "mcp_tools", "backend"},
    "bench": {"core", "mcp_tools", "backend", "apps"},
}

#: Private modules ``bench/`` may import, each with the reason: a benchmark that measures one of
#: the commands' own pieces (the agent the demo trains, the server the tests slow down) imports
#: that piece, not a copy of it.
BENCH_SEAMS: dict[str, str] = {
    "art_adapters.apps._demo_agent": "the demo's own agent, scenarios and check, measured as the demo runs them",
    "art_adapters.apps._train_mcp": "train-mcp's own agent, rollout and generator settings, measured as is",
    "art_adapters.apps._cli": "train-mcp's own options, so bench/train_mcp_time.py parses a command line as the CLI does",
    "art_adapters.apps._options": "the CLI's own option-to-config builder, used with those options by the same bench",
    "mcp_tools._compat": "a bench-only MCP server starts as the shipped servers do (mcp 1.x/2.x shim)",
    "mcp_tools.servers._runner": "a bench-only MCP server runs under the shipped servers' command line",
}


def package_of(module: str) -> str | None:
    """The layer a dotted module name belongs to, or ``None`` for a third-party module."""
    top = module.split(".")[0]
    if top == "art_adapters":
        return "apps" if module == "art_adapters.apps" or module.startswith("art_adapters.apps.") else "core"
    return {"mcp_tools": "mcp_tools", "art_adapters_backend": "backend", "bench": "bench"}.get(top)


def module_name(path: Path) -> str:
    for top, folder in SOURCES.items():
        if path.is_relative_to(folder):
            parts = [top, *path.relative_to(folder).with_suffix("").parts]
            return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    raise AssertionError(path)


def imports_of(path: Path) -> list[tuple[int, str]]:
    """``(line, module)`` for every import in ``path``, relative ones resolved; ``from m import n``
    also yields ``m.n`` (``n`` may be a submodule)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = imported_from(node, package)
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names if alias.name != "*"]
    return found


def is_private(module: str) -> bool:
    return any(part.startswith("_") and not part.startswith("__") for part in module.split(".")[1:])


def _bench_seam(target: str) -> bool:
    return any(target == seam or target.startswith(seam + ".") for seam in BENCH_SEAMS)


def all_sources() -> list[Path]:
    return sorted(p for folder in SOURCES.values() for p in folder.rglob("*.py"))


def violations() -> list[str]:
    found: list[str] = []
    for path in all_sources():
        importer = package_of(module_name(path))
        assert importer is not None
        reported: set[int] = set()
        for line, target in imports_of(path):
            if line in reported:
                continue
            layer = package_of(target)
            if layer is None or layer == importer:
                continue
            where = f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{line} imports {target}"
            if layer not in ALLOWED[importer]:
                found.append(f"{where}: {importer} may not import {layer}")
                reported.add(line)
            elif is_private(target) and not (importer == "bench" and _bench_seam(target)):
                found.append(f"{where}: a private module of {layer}; import its public names")
                reported.add(line)
    return found


def test_the_checker_resolves_relative_imports_and_names_layers() -> None:
    source = SOURCES["art_adapters"] / "ruler" / "__init__.py"
    modules = {m for _, m in imports_of(source)}
    assert any(m.startswith("art_adapters.ruler._") for m in modules), modules
    assert package_of("art_adapters.apps._cli") == "apps"
    assert package_of("art_adapters._runner") == "core"
    assert package_of("langchain_core.messages") is None
    assert is_private("mcp_tools._generate") and not is_private("mcp_tools.servers")
    assert package_of("bench.train") == "bench"


def test_every_package_is_parsed() -> None:
    layers = {package_of(module_name(p)) for p in all_sources()}
    assert layers == {"core", "apps", "mcp_tools", "backend", "bench"}


def test_imports_run_one_way_and_never_into_another_packages_privates() -> None:
    found = violations()
    if found:
        pytest.fail("imports against the layers:\n" + "\n".join(found))


def test_bench_is_checked_and_a_private_import_there_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A benchmark that reaches into a private module outside :data:`BENCH_SEAMS` is reported."""
    assert any(p.is_relative_to(SOURCES["bench"]) for p in all_sources())
    bench = tmp_path / "bench"
    bench.mkdir()
    (bench / "probe.py").write_text(
        "from art_adapters._runner import run_groups\nfrom art_adapters.apps._demo_agent import check\n"
    )
    monkeypatch.setitem(SOURCES, "bench", bench)
    found = [v for v in violations() if v.startswith(str(bench / "probe.py"))]
    assert len(found) == 1 and "probe.py:1 imports art_adapters._runner" in found[0], found
