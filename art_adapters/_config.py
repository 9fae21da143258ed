"""How a component's config object meets its keyword settings: one merge, one error type.

``run_groups`` and ``ruler_score_group(s)`` take a pydantic config model plus keyword overrides;
:func:`resolve_config` is the one place that merges and validates them, so a bad setting is always
a :class:`~art_adapters.ConfigError` carrying pydantic's message; :func:`reject_moved` names where a
config's retired field went.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, BeforeValidator, NonNegativeInt, PositiveInt, ValidationError

from ._errors import ConfigError

__all__ = ["Count", "PositiveCount", "reject_moved", "resolve_config"]

_Config = TypeVar("_Config", bound=BaseModel)


def _not_a_bool(value: Any) -> Any:
    if isinstance(value, bool):  # an int subclass, so pydantic would take True as 1
        raise ValueError("must be an int, not a bool")
    return value


#: An int >= 0 (``True``/``False`` rejected).
Count = Annotated[NonNegativeInt, BeforeValidator(_not_a_bool)]
#: An int >= 1 (``True`` rejected).
PositiveCount = Annotated[PositiveInt, BeforeValidator(_not_a_bool)]


def reject_moved(data: Any, moved: Mapping[str, str], where: str) -> Any:
    """A ``mode="before"`` model validator's body: ``data`` unchanged, unless it sets a field that moved.

    ``moved`` maps each retired field name to how to pass it now; ``where`` names where it went
    (``"TrainMcpConfig.loop"``). Raises ``ValueError`` with one hint per moved field given.
    """
    given = [name for name in moved if isinstance(data, Mapping) and name in data]
    if given:
        raise ValueError("; ".join(f"{name} moved into {where}: pass {moved[name]}" for name in given))
    return data


def resolve_config(
    model: type[_Config],
    config: _Config | None,
    settings: Mapping[str, Any],
    *,
    hints: Mapping[str, str] | None = None,
) -> _Config:
    """``config`` (or the defaults) with the keyword ``settings`` laid over it, validated.

    ``run_groups(..., config=RunConfig(...), max_concurrency=2)`` and
    ``ruler_score_group(..., config=RulerConfig(...), max_retries=0)`` both come through here: the
    config is returned as is when no setting is given, else re-validated with the settings on top.

    Raises:
        ConfigError: ``config`` is not a ``model``, a setting is unknown (``hints`` maps retired
            names to what replaced them) or invalid; the message is pydantic's.
    """
    for name, hint in (hints or {}).items():
        if name in settings:
            raise ConfigError(f"{name} is gone: {hint}")
    if config is not None and not isinstance(config, model):
        raise ConfigError(f"config must be a {model.__name__}, got {type(config).__name__}")
    if config is not None and not settings:
        return config
    # Only the fields set on ``config``: a default stays a default (RunConfig's budget depends on it).
    base = {name: getattr(config, name) for name in config.model_fields_set} if config is not None else {}
    try:
        return model.model_validate({**base, **settings})
    except ValidationError as exc:
        raise ConfigError(str(exc)) from None
