"""The ``gpu`` marker is on every test that needs a CUDA GPU, and each such test says why it skips.

``./dev test -m "not gpu"`` leaves them out; without ``-m`` they are collected and, off a GPU,
skipped with their reason shown. A test needs a GPU when its skip condition asks for one
(``vllm_available()``, ``torch.cuda.is_available()``) or it runs something on ``"cuda"``. Read off
the test files' syntax trees, so this costs no import and no collection.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.helpers.marks import module_marks

TESTS = Path(__file__).resolve().parent

#: Calls in a skip condition that mean "only with a CUDA GPU".
GPU_CHECKS = ("vllm_available(", "cuda.is_available(")


def _tests(tree: ast.Module) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test_"):
            yield node


def _runs_on_cuda(test: ast.AST) -> bool:
    return any(
        isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.split(":")[0] == "cuda"
        for n in ast.walk(test)
    )


def _gpu_tests() -> Iterator[tuple[str, bool, bool]]:
    """(test id, needs a GPU, carries the marker and a skip reason) for every test function."""
    for path in sorted(TESTS.rglob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        module = module_marks(tree)
        for test in _tests(tree):
            marks = module + "\n" + "\n".join(ast.unparse(d) for d in test.decorator_list)
            needs_gpu = any(check in marks for check in GPU_CHECKS) or _runs_on_cuda(test)
            marked = "mark.gpu" in marks and "skipif(" in marks and "reason=" in marks
            yield f"{path.relative_to(TESTS)}::{test.name}", needs_gpu, marked


def test_tests_that_need_a_gpu_are_marked_and_skip_with_a_reason() -> None:
    found = list(_gpu_tests())
    unmarked = [name for name, needs_gpu, marked in found if needs_gpu and not marked]
    assert not unmarked, f"mark these @pytest.mark.gpu, with a skipif(..., reason=...): {unmarked}"
    assert any(needs_gpu for _, needs_gpu, _ in found), "no GPU test found: is the check still right?"


def test_the_gpu_marker_is_declared() -> None:
    pyproject = (TESTS.parent / "pyproject.toml").read_text(encoding="utf-8")
    assert '"gpu: needs a CUDA GPU' in pyproject
