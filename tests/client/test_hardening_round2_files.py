"""Second hardening round, the client's files: malformed inputs are clear errors, never tracebacks or leaks.

A malformed ``OTEL_EXPORTER_OTLP_HEADERS`` item is not quoted (it may be a credential), a malformed
import file is one ``ConfigError`` line, and a RULER cache entry nested past the recursion limit is
a miss, and a deep span tree imports in time linear in its depth.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from art_adapters import ConfigError
from art_adapters.apps._import import read_source
from art_adapters.observe import ObserveConfig, trajectories_from_otlp_json
from art_adapters.ruler import JudgeScore, RulerCache

SECRET = "sk-live-0123456789abcdef"


def test_a_malformed_otlp_header_item_is_not_quoted() -> None:
    with pytest.raises(ConfigError, match="key=value") as error:
        ObserveConfig.from_env({"OTEL_EXPORTER_OTLP_HEADERS": f"x-team=a,Authorization Bearer {SECRET}"})
    assert SECRET not in str(error.value) and "item 2 of 2" in str(error.value)  # was quoted whole


@pytest.mark.parametrize(
    "text",
    [
        '{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": 7}]}]}]}',  # a number for an id
        '{"resourceSpans": "none"}',
        '[{"id": "t", "observations": [{"id": 1, "startTime": "not a time"}]}]',
        '{"resourceSpans": [' * 3000,  # truncated and deep
    ],
)
def test_a_malformed_import_file_is_one_clear_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "traces.json"
    path.write_text(text)
    try:
        trajectories = read_source(str(path), project="default", tags=[], session=None, since=None, until=None,
                                   limit=None)
    except ConfigError as exc:  # was a raw traceback (KeyError, TypeError, JSONDecodeError, ...)
        assert str(path) in str(exc)
    else:
        assert trajectories == []  # or nothing usable in it


def test_a_ruler_cache_entry_nested_past_the_recursion_limit_is_a_miss(tmp_path: Path) -> None:
    cache = RulerCache(tmp_path / "ruler")
    cache.put("cd" * 32, "judge", {"t1": JudgeScore(trajectory_id="t1", explanation="ok", score=0.5)})
    [entry] = list((tmp_path / "ruler").rglob("*.json"))
    entry.write_text('{"scores": ' + "[" * 100_000 + "]" * 100_000 + "}")
    assert cache.get("cd" * 32, ["t1"]) is None  # was a RecursionError


def _chain_of_model_calls(depth: int) -> dict[str, Any]:
    """OTLP JSON of one trace: ``depth`` GenAI chat spans, each the parent of the next."""
    spans = [
        {
            "traceId": "0" * 31 + "1", "spanId": f"{i:016x}", "parentSpanId": f"{i - 1:016x}" if i > 1 else "",
            "name": "chat", "startTimeUnixNano": str(i), "endTimeUnixNano": str(10**9 - i),
            "attributes": [
                {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
                {"key": "gen_ai.input.messages", "value": {"stringValue": json.dumps(
                    [{"role": "user", "parts": [{"type": "text", "content": f"q{i}"}]}])}},
            ],
        }
        for i in range(1, depth + 1)
    ]  # fmt: skip
    return {"resourceSpans": [{"scopeSpans": [{"scope": {"name": "x"}, "spans": spans}]}]}


def test_a_deep_span_tree_imports_in_linear_time() -> None:
    # Each call's ancestors were listed whole with a list membership test per step: O(N^3). An
    # 800-deep chain took 5.5 s, 3,200 would take minutes; now 1,600 take 1.6 s on this machine.
    started = time.perf_counter()
    [trajectory] = trajectories_from_otlp_json(_chain_of_model_calls(3200))
    seconds = time.perf_counter() - started
    print(f"3,200-deep span chain imported in {seconds:.1f} s")
    assert trajectory.messages and seconds < 30, seconds
