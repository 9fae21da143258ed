"""``observe.parse_time`` and the exact ISO-time nanoseconds: the one place times are read."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from art_adapters import ConfigError
from art_adapters.observe import parse_time
from art_adapters.observe._times import iso_ns


def test_an_iso_time_is_read_with_its_zone_and_a_naive_one_is_utc() -> None:
    assert parse_time("2026-11-25T10:00:00Z", "--since") == datetime(2026, 11, 25, 10, tzinfo=UTC)
    assert parse_time(" 2026-11-25T10:00:00 ", "--since") == datetime(2026, 11, 25, 10, tzinfo=UTC)
    plus_one = parse_time("2026-11-25T11:00:00+01:00", "start")
    assert plus_one is not None and plus_one.utcoffset() == timedelta(hours=1)
    assert plus_one == datetime(2026, 11, 25, 10, tzinfo=UTC)
    aware = datetime(2026, 1, 1, tzinfo=timezone(timedelta(hours=-5)))
    assert parse_time(aware, "start") is aware
    assert parse_time(None, "start") is None


def test_a_bad_time_names_the_option() -> None:
    with pytest.raises(ConfigError, match=r"--until must be an ISO 8601 time .* got 'yesterday'"):
        parse_time("yesterday", "--until")


def test_nanoseconds_are_exact_and_unreadable_times_are_zero() -> None:
    assert iso_ns("2026-11-25T10:00:00.123456Z") == 1_795_600_800_123_456_000
    assert iso_ns("2026-11-25T10:00:00.123456") == iso_ns("2026-11-25T10:00:00.123456+00:00")
    assert iso_ns(1_700_000_000_000_000_000) == 1_700_000_000_000_000_000
    assert iso_ns("not a time") == 0 and iso_ns("") == 0 and iso_ns(None) == 0
