"""The ``slow`` marker is on every test that starts a real backend or loads model weights.

``./dev test -m "not slow"`` is then a fast tier for the edit loop: no backend subprocess, no weights.
A test is slow when it (or a fixture it uses, followed through fixture parameters, ``usefixtures``
and ``request.getfixturevalue("...")``) calls one of :data:`REAL_MODEL_CALLS`. Read off the syntax
trees of the test files and conftests, so this costs no import and no collection.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.helpers.marks import module_marks

TESTS = Path(__file__).resolve().parent

#: Calls that start a backend process or load weights (bundled SmolLM2 or a family model).
REAL_MODEL_CALLS = (
    "LocalBackend(",
    "TorchEngine.load",
    "PeftTrainer(",
    "UnslothTrainer(",
    "ForCausalLM.from_pretrained(",
    "run_demo(",
    "start_serve(",
)


def _is_fixture(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any("fixture" in ast.unparse(d) for d in node.decorator_list)


def _fixture_name(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    """A fixture's name: ``name=`` in its decorator, else the function's."""
    for decorator in node.decorator_list:
        if isinstance(decorator, ast.Call):
            for keyword in decorator.keywords:
                if keyword.arg == "name" and isinstance(keyword.value, ast.Constant):
                    return str(keyword.value.value)
    return node.name


def _uses(node: ast.AST) -> set[str]:
    """Fixture names a function or mark asks for: parameters, ``usefixtures``, ``getfixturevalue``."""
    names: set[str] = set()
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        names |= {a.arg for a in node.args.args + node.args.kwonlyargs}
    for call in ast.walk(node):
        if isinstance(call, ast.Call) and ast.unparse(call.func).endswith(("getfixturevalue", "usefixtures")):
            names |= {a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)}
    return names


class _Tree:
    """The test tree's fixtures, scoped as pytest scopes them: a module's own, then the conftests above it."""

    def __init__(self) -> None:
        self.modules = {p: ast.parse(p.read_text(encoding="utf-8")) for p in sorted(TESTS.rglob("*.py"))}
        self.fixtures: dict[Path, dict[str, ast.FunctionDef | ast.AsyncFunctionDef]] = {}
        #: A module's top-level plain functions, read as part of whatever calls them there.
        self.helpers: dict[Path, dict[str, ast.AST]] = {}
        for path, tree in self.modules.items():
            top = [n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
            self.fixtures[path] = {_fixture_name(n): n for n in top if _is_fixture(n)}
            self.helpers[path] = {n.name: n for n in top if not _is_fixture(n)}
        self._real: dict[tuple[Path, str], bool] = {}

    def resolve(self, path: Path, name: str) -> tuple[Path, ast.FunctionDef | ast.AsyncFunctionDef] | None:
        """Where the fixture ``name`` seen from module ``path`` is defined."""
        if name in self.fixtures.get(path, {}):
            return path, self.fixtures[path][name]
        folder = path.parent
        while folder == TESTS or TESTS in folder.parents:
            conftest = folder / "conftest.py"
            if name in self.fixtures.get(conftest, {}):
                return conftest, self.fixtures[conftest][name]
            folder = folder.parent
        return None

    def _reads(self, path: Path, node: ast.AST) -> list[ast.AST]:
        """``node`` and the module's helper functions it names (one level: called, or picked from a dict)."""
        named = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
        return [node] + [h for name, h in self.helpers[path].items() if name in named and h is not node]

    def is_real(self, path: Path, node: ast.AST, extra_uses: set[str] = frozenset()) -> bool:  # type: ignore[assignment]
        """Whether ``node`` (in ``path``) starts a backend or loads weights, itself or through fixtures."""
        uses = set(extra_uses)
        for part in self._reads(path, node):
            if any(call in ast.unparse(part) for call in REAL_MODEL_CALLS):
                return True
            uses |= _uses(part)
        return any(self._fixture_is_real(path, name) for name in uses)

    def _fixture_is_real(self, path: Path, name: str) -> bool:
        found = self.resolve(path, name)
        if found is None:
            return False
        key = (found[0], name)
        if key not in self._real:
            self._real[key] = False  # a cycle (a fixture overriding its parent's) reads as not real
            self._real[key] = self.is_real(found[0], found[1])
        return self._real[key]


def _slow_tests() -> Iterator[tuple[str, bool, bool]]:
    """(test id, needs the slow marker, carries it) for every test function."""
    tree = _Tree()
    for path, module in tree.modules.items():
        if not path.name.startswith("test_"):
            continue
        marks = module_marks(module)
        module_uses = _uses(ast.parse(marks)) if marks else set()
        for test in ast.walk(module):
            if not isinstance(test, ast.FunctionDef | ast.AsyncFunctionDef) or not test.name.startswith("test_"):
                continue
            decorators = "\n".join(ast.unparse(d) for d in test.decorator_list)
            uses = module_uses | _uses(ast.parse(decorators or "None"))
            needs = tree.is_real(path, test, uses)
            yield f"{path.relative_to(TESTS)}::{test.name}", needs, "mark.slow" in marks + decorators


def test_tests_that_start_a_backend_or_load_weights_are_marked_slow() -> None:
    found = list(_slow_tests())
    unmarked = [name for name, needs, marked in found if needs and not marked]
    assert not unmarked, f"mark these @pytest.mark.slow (or the module's pytestmark): {unmarked}"
    assert sum(needs for _, needs, _ in found) > 50, "too few slow tests found: is the check still right?"


def test_the_check_follows_fixtures_through_conftests() -> None:
    tree = _Tree()
    training = TESTS / "training" / "test_grpo.py"
    # local_backend (tests/conftest.py) starts the bundled model; trainer (tests/training) loads it.
    for path, name in [(training, "local_backend"), (training, "trainer"), (TESTS / "families" / "x.py", "family")]:
        assert tree._fixture_is_real(path, name), name
    assert not tree._fixture_is_real(training, "fake_backend")
    assert not tree._fixture_is_real(training, "tokenizer")


def test_the_slow_marker_is_declared() -> None:
    pyproject = (TESTS.parent / "pyproject.toml").read_text(encoding="utf-8")
    assert '"slow: ' in pyproject
