"""RULER's settings in one model: what ruler_score_group(s) take besides the group and the judge."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .._config import Count, PositiveCount
from ._cache import RulerCache
from ._judges import StructuredMode
from ._prompt import DEFAULT_RUBRIC

__all__ = ["Aggregate", "RulerConfig"]

#: How an ensemble's scores become one: ``mean`` of the judges' scores, or ``rank_mean``, the mean of
#: each judge's normalised rank of the trajectory within the group (see :mod:`art_adapters.ruler._ensemble`).
Aggregate = Literal["mean", "rank_mean"]

#: A dimension's name: it becomes the metric ``ruler_<name>`` and a key of the judge's answer.
_DIMENSION = re.compile(r"^[a-z][a-z0-9_]{0,39}$")


class RulerConfig(BaseModel):
    """Settings of :func:`~art_adapters.ruler_score_group` and :func:`~art_adapters.ruler_score_groups`.

    Every field can also be passed to those functions as a keyword setting, which overrides the
    config object: ``ruler_score_groups(groups, judge, config=RulerConfig(cache=False), max_retries=0)``.

    Attributes:
        rubric: how to score, in plain words; :data:`DEFAULT_RUBRIC` by default.
        judge_timeout_s: seconds one judge call may take (then retried), > 0; ``None``: no limit.
            Default 120.
        max_retries: further attempts after a malformed answer, an out-of-range score, a
            missing/duplicate/unknown id, a timeout or an endpoint error. Default 2.
        cache: ``True`` (default) caches answers under
            :func:`~art_adapters.ruler._cache.default_cache_dir`, a directory caches there, a
            :class:`RulerCache` is used as is, ``False``/``None`` disables caching.
        structured: ``"auto"`` (json_schema when the endpoint supports it, else plain),
            ``"json_schema"`` or ``"none"``.
        swallow_exceptions: on failure return the group unscored (``metadata["ruler"]`` has
            ``status="unscored"`` and the reason) instead of raising :class:`JudgeError`.
            Default False.
        reward_weights: if given, each trajectory's final reward is
            :func:`~art_adapters.combine_rewards` of these metrics (e.g.
            ``{"ruler_score": 0.8, "independent_reward": 0.2}``).
        max_explanation_chars: the longest explanation the answer schema allows (``maxLength``),
            >= 1; ``None``: no bound. Default 400.
        max_concurrency: judge calls at once in :func:`~art_adapters.ruler_score_groups`, >= 1.
            Default 4.
        per_turn: also ask the judge for a score in [0, 1] per assistant turn of each
            trajectory's main history (numbered in the prompt), validated and retried like the
            trajectory scores, stored as ``metadata["turn_rewards"]`` (one float per assistant
            message of ``messages``, in order) for per-turn credit (``TrainConfig.credit="turn"``).
            Default False (the prompt and answer are then exactly the per-trajectory ones).
        samples: how many times each judge is asked about each group, >= 1. Default 1. With
            ``samples=k`` one model makes an ensemble of ``k`` judges of the same identity (each
            sample is cached under its own index; give the judge a temperature > 0 for the samples
            to differ), and with ``judges=[...]`` each of them is asked ``k`` times.
        aggregate: how an ensemble's scores become ``metrics["ruler_score"]`` and the reward:
            ``"mean"`` (default; the mean of the judges' scores) or ``"rank_mean"`` (the mean of each
            judge's rank of the trajectory within the group, normalised to [0, 1]: robust to a judge
            that scores everything high or low). A single judge's scores are used as they are.
        dimensions: rubric dimensions and their weights (``{"correctness": 2, "efficiency": 1}``):
            the judge then gives every trajectory one score in [0, 1] per dimension instead of one
            overall score, each is kept as ``metrics["ruler_<name>"]``, and ``ruler_score`` (the
            reward) is their weighted mean. Names are lowercase identifiers (``[a-z][a-z0-9_]*``,
            not ``score``); weights finite and > 0. ``None`` (default): one score per trajectory.
        dimension_rubrics: what each dimension means, in plain words, shown to the judge with its
            name (``{"correctness": "the final answer is right"}``); keys must be dimensions. ``None``
            (default) or a missing key: the name alone.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    rubric: str = DEFAULT_RUBRIC
    judge_timeout_s: float | None = Field(default=120.0, gt=0.0, allow_inf_nan=False)
    max_retries: Count = 2
    cache: bool | Path | RulerCache | None = True
    structured: StructuredMode = "auto"
    swallow_exceptions: bool = False
    reward_weights: dict[str, float] | None = None
    max_explanation_chars: PositiveCount | None = 400
    max_concurrency: PositiveCount = 4
    per_turn: bool = False
    samples: PositiveCount = 1
    aggregate: Aggregate = "mean"
    dimensions: dict[str, float] | None = None
    dimension_rubrics: dict[str, str] | None = None

    @field_validator("rubric")
    @classmethod
    def _rubric_has_words(cls, rubric: str) -> str:
        if not rubric.strip():
            raise ValueError("rubric must be a non-empty string (or leave it out for the default rubric)")
        return rubric

    @field_validator("dimensions")
    @classmethod
    def _dimensions_named_and_weighted(cls, dimensions: dict[str, float] | None) -> dict[str, float] | None:
        if dimensions is None:
            return None
        if not dimensions:
            raise ValueError(
                "dimensions must name at least one dimension, e.g. {'correctness': 2, 'efficiency': 1} "
                "(or leave it out for one score per trajectory)"
            )
        for name, weight in dimensions.items():
            if not _DIMENSION.match(name) or name == "score":
                raise ValueError(
                    f"dimension name {name!r} must be a lowercase identifier of at most 40 characters "
                    "([a-z][a-z0-9_]*) other than 'score': it becomes the metric ruler_<name>"
                )
            if not math.isfinite(weight) or weight <= 0:
                raise ValueError(f"weight of dimension {name!r} must be a finite number > 0, got {weight!r}")
        return dimensions

    @model_validator(mode="after")
    def _rubrics_name_dimensions(self) -> RulerConfig:
        if self.dimension_rubrics is None:
            return self
        if self.dimensions is None:
            raise ValueError("dimension_rubrics needs dimensions: name the dimensions and their weights too")
        unknown = sorted(set(self.dimension_rubrics) - set(self.dimensions))
        if unknown:
            raise ValueError(
                f"dimension_rubrics names {', '.join(map(repr, unknown))}, which dimensions lacks; "
                f"the dimensions are {', '.join(map(repr, self.dimensions))}"
            )
        return self

    @field_validator("cache", mode="before")
    @classmethod
    def _directory(cls, cache: Any) -> Any:
        return Path(cache) if isinstance(cache, str) else cache  # a str is a directory, never a bool

    def cache_store(self) -> RulerCache | None:
        """The cache the settings name, or ``None`` when caching is off."""
        if self.cache is None or self.cache is False:
            return None
        if self.cache is True:
            return RulerCache()
        return self.cache if isinstance(self.cache, RulerCache) else RulerCache(self.cache)
