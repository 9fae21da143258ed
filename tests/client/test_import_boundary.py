"""The client never pays for the server: importing it loads no heavy module and is fast."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ["torch", "transformers", "vllm", "unsloth", "fastapi", "uvicorn", "peft", "art_adapters_backend"]

PROBE = """
import json, sys, time
start = time.perf_counter()
import art_adapters
elapsed = time.perf_counter() - start
print(json.dumps({"elapsed": elapsed, "loaded": [m for m in HEAVY if m in sys.modules]}))
"""


def _probe(extra: str = "") -> dict[str, object]:
    code = f"HEAVY = {HEAVY!r}\n" + PROBE + extra
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.splitlines()[0])


def test_import_loads_no_heavy_module() -> None:
    result = _probe()
    assert result["loaded"] == []


def test_import_is_well_under_a_second() -> None:
    # Best of three: the first run may pay for a cold disk cache.
    best = min(float(_probe()["elapsed"]) for _ in range(3))
    assert best < 1.0, f"import art_adapters took {best:.2f} s"


def test_capture_names_do_not_load_the_backend() -> None:
    code = f"HEAVY = {HEAVY!r}\n" + (
        "import sys, json\nimport art_adapters\n"
        "art_adapters.TrajectoryCallbackHandler\n"
        "print(json.dumps([m for m in HEAVY if m in sys.modules]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert json.loads(out.stdout.splitlines()[-1]) == []
