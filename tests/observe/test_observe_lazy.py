"""``import art_adapters.observe`` (the loop does, for its metrics file) loads no OpenTelemetry module;
the names that export or import spans load it on first use."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import json, sys
import art_adapters.observe as observe
before = sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry")
observe.trajectories_from_otlp_json
after = sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry")
print(json.dumps({"before": before, "after": bool(after)}))
"""


def test_observe_loads_opentelemetry_only_when_an_otel_name_is_used() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], check=True, capture_output=True, text=True, timeout=120)
    result = json.loads(out.stdout.splitlines()[-1])
    assert result == {"before": [], "after": True}
