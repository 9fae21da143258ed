"""Times as the importers read them: ISO 8601 strings (``Z`` or an offset; naive means UTC)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from art_adapters._errors import ConfigError

__all__ = ["TimeBound", "iso_ns", "parse_time"]

#: A time bound an importer takes: a datetime, an ISO 8601 string, or ``None`` (unbounded).
TimeBound = datetime | str | None

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def parse_time(value: TimeBound, name: str) -> datetime | None:
    """``value`` as an aware datetime (a naive one is UTC); ``None`` stays ``None``.

    Raises:
        ConfigError: ``value`` is a string that is not an ISO 8601 time (the message names ``name``).
    """
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.strip())
        except ValueError:
            raise ConfigError(
                f"{name} must be an ISO 8601 time like 2026-11-25T10:00:00Z, got {value!r}"
            ) from None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def iso_ns(value: Any) -> int:
    """Nanoseconds since the epoch of an ISO time (exact: no float rounding); a number is taken as
    nanoseconds already; 0 when missing or unreadable."""
    if isinstance(value, int | float):
        return int(value)
    if not isinstance(value, str) or not value:
        return 0
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        return 0
    when = when if when.tzinfo is not None else when.replace(tzinfo=UTC)
    return (when - _EPOCH) // timedelta(microseconds=1) * 1000
