"""Side virtual environments for the tests: third-party software that cannot share ``.venv`` (Arize
Phoenix's dependencies, mcp 1.x with langchain-mcp-adapters, an older MCP SDK), each built once at the
repository root (git-ignored).

:func:`ensure_side_venv` builds one under an exclusive file lock, so two pytest runs never build it
twice, and marks it complete with a stamp file naming what it holds; a build that died half-way, or
one whose requirements changed, is removed and redone.
"""

from __future__ import annotations

import fcntl
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

__all__ = ["ROOT", "ensure_side_venv"]

ROOT = Path(__file__).resolve().parents[2]
STAMP_NAME = ".art-adapters-complete"


def ensure_side_venv(
    name: str,
    requirements: Sequence[str],
    *,
    usable: Callable[[Path], bool] | None = None,
    timeout_s: float = 900,
) -> tuple[Path | None, str]:
    """``ROOT/name``'s python and a note (built or cached), or ``(None, reason)`` when pip could not
    build it (the reason ends with pip's own output). ``usable(python)``, when given, must also hold
    of a built venv, or it is rebuilt (an editable install of this project misses a new dependency)."""
    venv = ROOT / name
    python, stamp = venv / "bin" / "python", venv / STAMP_NAME
    wanted = " ".join(requirements)

    def complete() -> bool:
        built = stamp.is_file() and stamp.read_text().splitlines()[:1] == [wanted]
        return built and (usable is None or usable(python))

    if complete():
        return python, "cached"
    with (ROOT / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another run may be building it: wait, then reuse
        if complete():
            return python, "built by another run"
        started = time.monotonic()
        if venv.exists():
            subprocess.run(["rm", "-rf", str(venv)], check=True)
        base = getattr(sys, "_base_executable", sys.executable)
        steps = [[base, "-m", "venv", str(venv)], [str(python), "-m", "pip", "install", "-q", *requirements]]
        for command in steps:
            result = subprocess.run(command, capture_output=True, text=True, check=False, timeout=timeout_s)
            if result.returncode != 0:
                output = "\n".join(
                    line for line in (result.stdout + result.stderr).splitlines() if "is ignored" not in line
                )
                return None, f"could not build {name} ({' '.join(command[-2:])}): {output[-1500:]}"
        seconds = time.monotonic() - started
        stamp.write_text(f"{wanted}\nbuilt in {seconds:.0f}s\n")
        return python, f"built in {seconds:.0f}s"
