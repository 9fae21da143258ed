"""The package root's public surface: sorted, complete, and every name resolves."""

from __future__ import annotations

import art_adapters


def test_all_is_sorted_and_unique() -> None:
    assert art_adapters.__all__ == sorted(set(art_adapters.__all__))


def test_every_exported_name_resolves_to_a_documented_object() -> None:
    for name in art_adapters.__all__:
        value = getattr(art_adapters, name)
        assert value is not None, name
        assert (getattr(value, "__doc__", None) or "").strip(), f"{name} has no docstring"


def test_design_brief_names_are_exported() -> None:
    required = {
        "Trajectory",
        "TrajectoryGroup",
        "TrajectoryCallbackHandler",
        "TrajectorySpanProcessor",
        "TrainableModel",
        "LocalBackend",
        "RemoteBackend",
    }
    assert required <= set(art_adapters.__all__)


def test_unknown_attribute_raises_attribute_error() -> None:
    try:
        art_adapters.does_not_exist  # noqa: B018
    except AttributeError as exc:
        assert "does_not_exist" in str(exc)
    else:  # pragma: no cover
        raise AssertionError("expected AttributeError")
