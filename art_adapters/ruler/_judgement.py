"""What a RULER pass leaves on a group and on its trajectories, as typed records read and written here.

The storage is the JSON it always was (``group.metadata["ruler"]``; a trajectory's ``metrics["ruler_score"]``,
``metrics["ruler_<dimension>"]``, ``metrics["independent_reward"]``, ``metrics["judge_agreement"]``,
``metadata["ruler_explanation"]``, ``["ruler_label"]``, ``["ruler_judges"]``, ``["turn_rewards"]``); this
module is the one place that knows those keys: everything else reads and writes the models' attributes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .._errors import ConfigError
from .._trajectory import Trajectory, TrajectoryGroup

__all__ = ["GroupJudgement", "JudgeVerdict", "TrajectoryJudgement"]

# The keys, group's then trajectory's metrics then its metadata; nothing outside this module spells them.
_GROUP_KEY = "ruler"
_SCORE, _DIMENSION_PREFIX = "ruler_score", "ruler_"
_REFERENCE, _AGREEMENT = "independent_reward", "judge_agreement"
_EXPLANATION, _LABEL, _VERDICTS, _TURNS = "ruler_explanation", "ruler_label", "ruler_judges", "turn_rewards"


def _number(value: Any) -> float | None:
    """``value`` as a float when it is a finite number (not a bool), else ``None``."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


#: Where each field of :class:`TrajectoryJudgement` is stored (named in errors).
_STORED = {
    "score": f"metrics[{_SCORE!r}]",
    "explanation": f"metadata[{_EXPLANATION!r}]",
    "label": f"metadata[{_LABEL!r}]",
    "dimensions": f"metrics[{_DIMENSION_PREFIX + '<dimension>'!r}]",
    "turn_scores": f"metadata[{_TURNS!r}]",
    "independent_reward": f"metrics[{_REFERENCE!r}]",
    "agreement": f"metrics[{_AGREEMENT!r}]",
    "verdicts": f"metadata[{_VERDICTS!r}]",
}


def _malformed(
    where: str, key: str, exc: ValidationError, stored: Mapping[str, str] | None = None
) -> ConfigError:
    """The error for a record of the wrong shape: ``where`` it is, and each field's problem, the field
    named by where it is ``stored`` (field -> key) when given."""

    def name(loc: tuple[int | str, ...]) -> str:
        if not loc:
            return key
        return ".".join([(stored or {}).get(str(loc[0]), str(loc[0])), *map(str, loc[1:])])

    problems = "; ".join(f"{name(tuple(e['loc']))}: {e['msg']}" for e in exc.errors())
    return ConfigError(
        f"{where}: {key} is not what a RULER pass writes ({problems}); fix or remove it, or score the "
        "group again with ruler_score_group"
    )


class GroupJudgement(BaseModel):
    """What a RULER pass leaves on a group (stored as ``group.metadata["ruler"]``, a JSON object).

    Read it with :meth:`read` and store it with :meth:`write`. Only the fields that were set are
    stored (a single judge's record has no ``aggregate``, an unscored one no ``attempts``), so a
    record read and written back is the JSON it was; keys this version does not know are kept.

    Attributes:
        status: ``"scored"`` or ``"unscored"`` (``None`` in records that predate it).
        reason: why the group was left unscored (the judge's error, or no trajectories).
        judge: the judge's ``model_id``; for an ensemble its distinct ones, joined by ``", "``.
        cache_hit: every judge's answer came from the cache.
        attempts: judge calls made, all judges together (0 when all were cached).
        distinct_trajectories: trajectories the judge saw (identical ones are shown once).
        shared_prefix_messages: messages all trajectories share, sent once.
        aggregate: an ensemble's aggregation (``RulerConfig.aggregate``); ensembles only.
        kendall_tau: the judges' mean pairwise Kendall tau-b (``None`` when undefined); ensembles only.
        cache_hits: how many of the ensemble's answers came from the cache; ensembles only.
        judges: one :func:`~art_adapters.ruler.judge_identity` record per judge (and sample).
        per_turn: the judge also scored each assistant turn (``TrajectoryJudgement.turn_scores``).
        dimensions: the rubric dimensions and their weights, when the judge scored dimensions.
    """

    model_config = ConfigDict(extra="allow")

    status: Literal["scored", "unscored"] | None = None
    reason: str | None = None
    judge: str | None = None
    cache_hit: bool | None = None
    attempts: int | None = None
    distinct_trajectories: int | None = None
    shared_prefix_messages: int | None = None
    aggregate: str | None = None
    kendall_tau: float | None = None
    cache_hits: int | None = None
    judges: list[dict[str, Any]] = Field(default_factory=list)
    per_turn: bool = False
    dimensions: dict[str, float] | None = None

    @property
    def is_scored(self) -> bool:
        """Whether the judge scored the group (``status == "scored"``)."""
        return self.status == "scored"

    @property
    def judge_ids(self) -> tuple[str, ...]:
        """The ``id`` of each judge identity that has a string one, in order."""
        return tuple(j["id"] for j in self.judges if isinstance(j.get("id"), str))

    @classmethod
    def read(cls, group: TrajectoryGroup) -> GroupJudgement | None:
        """The judgement stored on ``group``; ``None`` when no RULER pass left one.

        Raises:
            ConfigError: what is stored is not a judgement (not a JSON object, or a field of the
                wrong type); the message names the group and the field.
        """
        stored = group.metadata.get(_GROUP_KEY)
        if stored is None:
            return None
        try:
            return cls.model_validate(stored)
        except ValidationError as exc:
            raise _malformed(f"group {group.id}", f"metadata[{_GROUP_KEY!r}]", exc) from exc

    def write(self, group: TrajectoryGroup) -> None:
        """Store this judgement on ``group`` (replacing any earlier one): the fields that were set."""
        group.metadata[_GROUP_KEY] = self.model_dump(exclude_unset=True)


class JudgeVerdict(BaseModel):
    """One ensemble judge's verdict of a trajectory (an entry of ``metadata["ruler_judges"]``).

    Attributes:
        judge: the judge's identity ``id`` (its record is in :attr:`GroupJudgement.judges`).
        score: its score in [0, 1].
        explanation: its explanation.
        sample: the sample index when each judge was asked ``samples`` > 1 times, else ``None``.
        dimensions: its score per rubric dimension, when the judge scored dimensions.
    """

    judge: str
    score: float
    explanation: str
    sample: int | None = None
    dimensions: dict[str, float] | None = None


class TrajectoryJudgement(BaseModel):
    """What a RULER pass leaves on one trajectory, read with :meth:`read` and stored with :meth:`write`.

    Stored where it always was: ``score`` in ``metrics["ruler_score"]``, each dimension ``d`` in
    ``metrics["ruler_<d>"]``, ``independent_reward`` and ``agreement`` in ``metrics["independent_reward"]``
    and ``metrics["judge_agreement"]``; ``explanation``, ``label``, ``verdicts`` and ``turn_scores`` in
    ``metadata["ruler_explanation"]``, ``["ruler_label"]``, ``["ruler_judges"]`` and ``["turn_rewards"]``.

    Attributes:
        score: the judge's score (an ensemble's aggregate); the reward unless mixed by weights.
        explanation: the judge's explanation (an ensemble's, one line per judge).
        label: the trajectory's id in the judge's prompt (``t1``, ``t2``...).
        dimensions: the score per rubric dimension, when the judge scored dimensions.
        turn_scores: one score per assistant message of ``messages``, when scored per turn.
        independent_reward: the reward the trajectory had before RULER first scored it.
        agreement: ``1 - (max - min)`` of an ensemble's scores; ensembles only.
        verdicts: each ensemble judge's own verdict; ensembles only.
    """

    #: The metric of the judged score; ``calibrate``'s default ``score``.
    SCORE_METRIC: ClassVar[str] = _SCORE
    #: The metric of the reward before RULER; ``calibrate``'s default ``reference``.
    REFERENCE_METRIC: ClassVar[str] = _REFERENCE

    score: float
    explanation: str | None = None
    label: str | None = None
    dimensions: dict[str, float] = Field(default_factory=dict)
    turn_scores: list[float] | None = None
    independent_reward: float | None = None
    agreement: float | None = None
    verdicts: list[JudgeVerdict] | None = None

    @staticmethod
    def dimension_metric(name: str) -> str:
        """The metric a rubric dimension's score is stored in: ``ruler_<name>``."""
        return _DIMENSION_PREFIX + name

    @classmethod
    def read(cls, trajectory: Trajectory) -> TrajectoryJudgement | None:
        """The judgement stored on ``trajectory``; ``None`` when no judge scored it (no numeric score).

        ``dimensions`` are the finite numeric ``ruler_<d>`` metrics other than the score.

        Raises:
            ConfigError: a stored field has the wrong type (an explanation that is not a string,
                turn scores that are not numbers, a verdict without a judge...), naming it.
        """
        score = trajectory.metrics.get(_SCORE)
        if isinstance(score, bool) or not isinstance(score, int | float):
            return None
        metrics, metadata = trajectory.metrics, trajectory.metadata
        fields = {
            "score": score,
            "explanation": metadata.get(_EXPLANATION),
            "label": metadata.get(_LABEL),
            "dimensions": _dimensions(metrics),
            "turn_scores": metadata.get(_TURNS),
            "independent_reward": metrics.get(_REFERENCE),
            "agreement": metrics.get(_AGREEMENT),
            "verdicts": metadata.get(_VERDICTS),
        }
        try:
            return cls.model_validate(fields)
        except ValidationError as exc:
            raise _malformed(f"trajectory {trajectory.id}", "its RULER record", exc, _STORED) from exc

    def write(self, trajectory: Trajectory) -> None:
        """Store this judgement on ``trajectory`` (in place).

        Sets the score and every dimension; ``agreement``, ``explanation``, ``label`` and ``verdicts``
        are set, or removed when ``None`` (an earlier ensemble's are not left behind). An
        ``independent_reward`` or ``turn_scores`` of ``None`` leaves what is stored as it is (the
        reward before the first RULER pass stays; per-turn rewards set by hand stay). Dimensions an
        earlier pass scored and this one does not stay too: remove them with :meth:`forget_dimensions`.
        """
        metrics, metadata = trajectory.metrics, trajectory.metadata
        if self.independent_reward is not None:
            metrics[_REFERENCE] = self.independent_reward
        metrics[_SCORE] = self.score
        _put(metrics, _AGREEMENT, self.agreement)
        for name, value in self.dimensions.items():
            metrics[self.dimension_metric(name)] = value
        entries = None if self.verdicts is None else [v.model_dump(exclude_none=True) for v in self.verdicts]
        _put(metadata, _VERDICTS, entries)
        _put(metadata, _EXPLANATION, self.explanation)
        _put(metadata, _LABEL, self.label)
        if self.turn_scores is not None:
            metadata[_TURNS] = list(self.turn_scores)

    @classmethod
    def forget_dimensions(cls, trajectory: Trajectory, names: Iterable[str]) -> None:
        """Remove the stored scores of the rubric dimensions ``names`` from ``trajectory``."""
        for name in names:
            trajectory.metrics.pop(cls.dimension_metric(name), None)

    @classmethod
    def forget(cls, trajectory: Trajectory) -> None:
        """Remove every judged score from ``trajectory``'s metrics (score, dimensions, reference, agreement).

        What is left is what the trajectory would carry had no judge scored it; its ``reward`` and
        metadata are not touched.
        """
        prefix, others = _DIMENSION_PREFIX, (_REFERENCE, _AGREEMENT)
        for key in [k for k in trajectory.metrics if k.startswith(prefix) or k in others]:
            del trajectory.metrics[key]


def _dimensions(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The finite numeric ``ruler_<d>`` metrics other than the score, by dimension name ``d``."""
    found = {}
    for key, value in metrics.items():
        number = _number(value)
        if key.startswith(_DIMENSION_PREFIX) and key != _SCORE and number is not None:
            found[key.removeprefix(_DIMENSION_PREFIX)] = number
    return found


def _put(store: dict[str, Any], key: str, value: Any) -> None:
    """``store[key] = value``, or remove ``key`` when ``value`` is ``None``."""
    if value is None:
        store.pop(key, None)
    else:
        store[key] = value
