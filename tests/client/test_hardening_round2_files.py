"""Second hardening round, the client's files: malformed inputs are clear errors, never tracebacks or leaks.

A malformed ``OTEL_EXPORTER_OTLP_HEADERS`` item is not quoted (it may be a credential), a malformed
import file is one ``ConfigError`` line, and a RULER cache entry nested past the recursion limit is
a miss.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from art_adapters import ConfigError
from art_adapters.apps._import import read_source
from art_adapters.observe import ObserveConfig
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
