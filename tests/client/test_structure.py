"""Guard rails on the shipped packages' shape: no import circles, no private names used across
modules except through the seams listed here, module docstrings of at most eight lines, functions
over 60 lines or 8 parameters only with a written reason.

Read off the syntax trees (:mod:`tests.helpers.structure`); no import, no model.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import structure

#: Uses of another module's private names that are seams on purpose, each with its reason.
SEAMS: dict[str, str] = {
    "art_adapters/_runner.py:32 uses art_adapters.observe._spans (a private module of art_adapters.observe)": (
        "RolloutContext is what the runner tells the observer's live span about a rollout"
    ),
    "art_adapters/_loop_telemetry.py:136 uses art_adapters.observe._spans (a private module of art_adapters.observe)": (
        "the loop's telemetry builds the train-step spans with the observer's span builders"
    ),
    "art_adapters/_loop_telemetry.py:108 uses art_adapters.observe._langfuse_datasets "
    "(a private module of art_adapters.observe)": "the loop links its Langfuse dataset runs through the observer's client",
    "art_adapters/observe/_live.py:93 uses self._observer._hold": (
        "a RolloutSpan is the Observer's own live span (made by Observer.start_rollout); it hands itself back"
    ),
    "art_adapters/ruler/_judges.py:107 uses self.model._get_invocation_params": (
        "LangChain's, not ours: the settings LangChain's own LLM cache keys on (guarded by a fallback)"
    ),
}


def _without_lines(entry: str) -> str:
    """An entry with its line number dropped, so an edit above a seam does not break the list."""
    path, _, rest = entry.partition(":")
    return f"{path}:{rest.partition(' ')[2]}"


def test_no_import_circles() -> None:
    circles = structure.import_circles()
    assert circles == [], "import circles (break them with a smaller shared module):\n" + "\n".join(
        " <-> ".join(c) for c in circles
    )


def test_no_private_names_used_across_modules_but_the_seams() -> None:
    allowed = {_without_lines(s) for s in SEAMS}
    found = [r for r in structure.private_reach_ins() if _without_lines(r) not in allowed]
    assert found == [], "private names of another module (use a public name or list a seam):\n" + "\n".join(found)


def test_every_seam_is_still_used() -> None:
    found = {_without_lines(r) for r in structure.private_reach_ins()}
    stale = [s for s in SEAMS if _without_lines(s) not in found]
    assert stale == [], f"seams no longer used (remove them): {stale}"


def test_module_docstrings_are_at_most_eight_lines() -> None:
    assert structure.long_docstrings() == []


def test_long_or_wide_functions_say_why() -> None:
    """A body over 60 lines (docstring aside) or over 8 parameters comes with a ``# shape:`` reason."""
    assert structure.long_functions(unexplained=True) == []
    assert structure.wide_functions(unexplained=True) == []


def test_the_shape_checker_counts_the_body_and_reads_the_reason(toy_package: Path) -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(60))
    doc = '    """' + "\n".join(["Doc."] * 30) + '"""\n'
    (toy_package / "_f.py").write_text(
        f"def long(a, b):\n{body}\n"  # 61 lines with the def line
        f"def documented():\n{doc}{body[: body.rindex('    x59')]}\n"  # 60 under a 30-line docstring
        f"# shape: a table, one row per line\n@staticmethod\ndef explained():\n{body}\n"
        "def wide(a, b, c, d, e, f, g, h, i):  # shape: mirrors the wire format\n    return a\n"
        "def wider(self, a, b, c, d, e, f, g, h, *, i, **kw):\n    return a\n"
    )
    assert structure.long_functions() == [("toy/_f.py:1 long", 61), ("toy/_f.py:156 explained", 61)]
    assert structure.long_functions(unexplained=True) == [("toy/_f.py:1 long", 61)]
    assert structure.wide_functions() == [("toy/_f.py:218 wide", 9), ("toy/_f.py:220 wider", 9)]
    assert structure.wide_functions(unexplained=True) == [("toy/_f.py:220 wider", 9)]


@pytest.fixture
def toy_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A package ``toy`` the checkers read instead of the shipped ones."""
    package = tmp_path / "toy"
    package.mkdir()
    (package / "__init__.py").write_text('"""A toy."""\n')
    monkeypatch.setattr(structure, "PACKAGES", {"toy": package})
    monkeypatch.setattr(structure, "ROOT", tmp_path)
    return package


def test_the_checkers_see_a_circle_a_reach_in_and_a_long_docstring(toy_package: Path) -> None:
    (toy_package / "_a.py").write_text("def f():\n    from toy._b import g\n    return g._cache\n")
    (toy_package / "_b.py").write_text(
        '"""One.\n2\n3\n4\n5\n6\n7\n8\n9\n"""\nfrom toy._a import f, _hidden\n\ndef g():\n    return f\n'
    )
    (toy_package / "_c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from toy._a import f\nimport os\nos._exit\n"
    )
    assert structure.import_circles() == [["toy._a", "toy._b"]]
    assert structure.private_reach_ins() == ["toy/_a.py:3 uses g._cache", "toy/_b.py:11 uses toy._a._hidden"]
    assert structure.long_docstrings() == [("toy/_b.py", 9)]


def test_a_private_module_of_another_subpackage_is_a_reach_in(toy_package: Path) -> None:
    (toy_package / "sub").mkdir()
    (toy_package / "sub" / "__init__.py").write_text("from toy.sub._inner import x\n")
    (toy_package / "sub" / "_inner.py").write_text("x = 1\n")
    (toy_package / "_user.py").write_text("from toy.sub._inner import x\nfrom toy.sub import x as y\n")
    assert structure.private_reach_ins() == ["toy/_user.py:1 uses toy.sub._inner (a private module of toy.sub)"]


def test_the_backend_wings_import_one_way() -> None:
    """http -> serving, training -> shared modules; FastAPI/Starlette only in http (see docs/structure.md)."""
    found = structure.backend_layer_violations()
    assert found == [], "backend imports against its layers:\n" + "\n".join(found)


def test_the_backend_layer_checker_sees_each_rule(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = tmp_path / "art_adapters_backend"
    sources = {
        "__init__.py": "",
        "errors.py": "import fastapi\nfrom .serving import chat\n",
        "state.py": "from .http import app\nfrom .training.service import S\n",
        "http/__init__.py": "",
        "http/app.py": "from fastapi import FastAPI\nfrom ..serving.chat import x\nfrom ..state import S\n",
        "serving/__init__.py": "",
        "serving/chat.py": (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..state import S\n"
            "    from ..http import app\nfrom ..errors import E\n"
        ),
        "training/__init__.py": "",
        "training/service.py": (
            "from ..serving import chat\nfrom starlette.types import Scope\nfrom ..state import S\n"
        ),
    }
    for name, text in sources.items():
        (backend / name).parent.mkdir(parents=True, exist_ok=True)
        (backend / name).write_text(text)
    monkeypatch.setattr(structure, "PACKAGES", {"art_adapters_backend": backend})
    monkeypatch.setattr(structure, "ROOT", tmp_path)
    where = "art_adapters_backend"
    web = "only the http wing and process modules use it"
    shared = "a shared module imports no wing and no process module"
    typing = "a wing imports the process modules for typing only"
    sibling = "the training wing may not import the serving wing"
    assert structure.backend_layer_violations() == [
        f"{where}/errors.py:1 imports fastapi: {web}",
        f"{where}/errors.py:2 imports {where}.serving.chat: {shared}",
        f"{where}/serving/chat.py:4 imports {where}.http.app: the serving wing may not import the http wing",
        f"{where}/training/service.py:1 imports {where}.serving.chat: {sibling}",
        f"{where}/training/service.py:2 imports starlette.types: {web}",
        f"{where}/training/service.py:3 imports {where}.state: {typing}",
    ]
