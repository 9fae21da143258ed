"""The scores a trajectory carries, each with the identity of the judge that gave it (pure: no I/O).

RULER leaves a score, one per rubric dimension and, for an ensemble, the judges' agreement and
verdicts (:class:`~art_adapters.ruler.TrajectoryJudgement`); the group names the judges
(:attr:`~art_adapters.ruler.GroupJudgement.judges`, one identity record each). This module
turns them into named scores (``ruler``, ``reward``, ``ruler.<dimension>``, ``judge_agreement``) for
the evaluator spans and the Langfuse scores, each carrying its judge's identity.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from art_adapters._trajectory import Trajectory, TrajectoryGroup
from art_adapters.ruler import GroupJudgement, JudgeVerdict, TrajectoryJudgement

__all__ = [
    "AGREEMENT_SCORE",
    "ATTRIBUTE_PREFIX",
    "DIMENSION_PREFIX",
    "ScoreRecord",
    "group_judges",
    "judge_attributes",
    "judge_metadata",
    "score_records",
    "trajectory_scores",
]

#: A rubric dimension ``d`` (``TrajectoryJudgement.dimensions["d"]``) is the score ``ruler.d``.
DIMENSION_PREFIX = "ruler."

#: The name of the judge-agreement score (ensembles: ``TrajectoryJudgement.agreement``).
AGREEMENT_SCORE = "judge_agreement"

#: The namespace of every span attribute art-adapters writes (``art_adapters.reward``...).
ATTRIBUTE_PREFIX = "art_adapters"


@dataclass(frozen=True)
class ScoreRecord:
    """One score of a trajectory.

    Attributes:
        name: ``"ruler"``, ``"reward"``, ``"ruler.<dimension>"`` or ``"judge_agreement"``.
        value: the score (RULER's scores and the agreement are in [0, 1]; the reward is the
            trajectory's, whatever its range).
        comment: the judge's explanation for ``ruler`` (and for ``reward`` when the reward is
            RULER's score); for a dimension or the agreement, who judged and, for an ensemble, each
            judge's own value; ``None`` for a reward that did not come from the judge.
        judges: the identity records of the judges who gave the score (empty for a reward that
            did not come from a judge); an identity known only by its id (the group's records were
            not at hand) is ``{"id": ...}``.
    """

    name: str
    value: float
    comment: str | None
    judges: tuple[Mapping[str, Any], ...] = field(default=())


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def group_judges(group: TrajectoryGroup) -> tuple[Mapping[str, Any], ...]:
    """The identities of the judges that scored ``group`` (``GroupJudgement.judges`` with ids), or ``()``."""
    judgement = GroupJudgement.read(group)
    if judgement is None:
        return ()
    return tuple(j for j in judgement.judges if isinstance(j.get("id"), str))


def _judges_of(
    judged: TrajectoryJudgement, judges: Sequence[Mapping[str, Any]]
) -> tuple[Mapping[str, Any], ...]:
    """The distinct identities that judged a trajectory (``judged``), in the order they judged.

    An ensemble's verdicts name their judges' ids: the records of ``judges`` with those ids (a
    bare ``{"id": ...}`` for an id it lacks); a single judge (or one model sampled several times):
    the distinct records of ``judges``.
    """
    known = {str(j["id"]): j for j in judges if isinstance(j.get("id"), str)}
    if not judged.verdicts:
        return tuple(known.values())
    ids = dict.fromkeys(v.judge for v in judged.verdicts)
    return tuple(known.get(i, {"id": i}) for i in ids)


def _who(identity: Mapping[str, Any]) -> str:
    model = identity.get("model")
    return f"{model} (judge {identity['id']})" if model else f"judge {identity.get('id')}"


def _per_judge(
    verdicts: list[JudgeVerdict],
    judges: tuple[Mapping[str, Any], ...],
    value: Callable[[JudgeVerdict], Any],
) -> str:
    """``"model (judge id) 0.80; model (judge id) #1 0.60"``: each verdict's ``value(verdict)``."""
    by_id = {str(j.get("id")): j for j in judges}
    parts = []
    for verdict in verdicts:
        own = _number(value(verdict))
        if own is None:
            continue
        who = _who(by_id.get(verdict.judge, {"id": verdict.judge}))
        sample = verdict.sample
        parts.append(f"{who}{f' #{sample}' if sample is not None else ''} {own:.2f}")
    return "; ".join(parts)


def _dimension_comment(
    name: str, verdicts: list[JudgeVerdict], judges: tuple[Mapping[str, Any], ...]
) -> str | None:
    if verdicts:
        each = _per_judge(verdicts, judges, lambda v: (v.dimensions or {}).get(name))
        return f"{name}: mean of {len(verdicts)} judges: {each}" if each else None
    if judges:
        return f"{name} by " + ", ".join(_who(j) for j in judges)
    return None


def score_records(
    trajectory: Trajectory, judges: Sequence[Mapping[str, Any]] | None = None
) -> list[ScoreRecord]:
    """Every score ``trajectory`` carries, in order: ``ruler``, ``reward``, then ``ruler.<dimension>``
    (sorted by name) and ``judge_agreement``.

    Args:
        trajectory: a trajectory, scored or not (an unscored one has no scores, or only its reward).
        judges: the identities of the judges of its group (:func:`group_judges`); without them a
            score carries only the judge ids an ensemble's verdicts name (a single judge's
            identity is then unknown here).

    ``ruler`` and ``reward`` are as they always were (the judge's explanation as the comment of
    ``ruler``, and of ``reward`` when it is RULER's score); a reward that is not RULER's score
    (a verifiable one, or mixed by ``reward_weights``) carries no judge.
    """
    scores: list[ScoreRecord] = []
    judged = TrajectoryJudgement.read(trajectory)
    ruler = judged.score if judged is not None else None
    who = _judges_of(judged, list(judges or ())) if judged is not None else ()
    comment = judged.explanation if judged is not None else None
    if ruler is not None:
        scores.append(ScoreRecord("ruler", ruler, comment, who))
    if trajectory.reward is not None:
        mine = ruler == trajectory.reward
        scores.append(
            ScoreRecord("reward", float(trajectory.reward), comment if mine else None, who if mine else ())
        )
    if judged is None:
        return scores
    verdicts = judged.verdicts or []
    for name, value in sorted(judged.dimensions.items()):
        scores.append(
            ScoreRecord(DIMENSION_PREFIX + name, value, _dimension_comment(name, verdicts, who), who)
        )
    agreement = _number(judged.agreement)
    if agreement is not None:
        each = _per_judge(verdicts, who, lambda v: v.score)
        note = f"1 - (max - min) of {len(verdicts)} judges' scores: {each}" if each else None
        scores.append(ScoreRecord(AGREEMENT_SCORE, agreement, note, who))
    return scores


def trajectory_scores(
    trajectory: Trajectory, judges: Sequence[Mapping[str, Any]] | None = None
) -> list[tuple[str, float, str | None]]:
    """The ``(name, value, comment)`` of each of :func:`score_records`: RULER's (with the explanation),
    the reward, one per rubric dimension (``ruler.<dimension>``) and the judges' agreement."""
    return [(s.name, s.value, s.comment) for s in score_records(trajectory, judges)]


def judge_attributes(judges: Sequence[Mapping[str, Any]]) -> dict[str, str | Sequence[str]]:
    """The span attributes naming a score's judges (empty for none).

    ``art_adapters.judge.ids`` and ``art_adapters.judge.models`` (lists, in the judges' order; a
    model only where known), ``art_adapters.judges`` (the identity records as JSON) and the same
    JSON as the Langfuse observation metadata ``judges``.
    """
    if not judges:
        return {}
    records = json.dumps([dict(j) for j in judges], ensure_ascii=False, sort_keys=True, default=str)
    attrs: dict[str, str | Sequence[str]] = {
        f"{ATTRIBUTE_PREFIX}.judge.ids": [str(j.get("id")) for j in judges],
        f"{ATTRIBUTE_PREFIX}.judges": records,
        "langfuse.observation.metadata.judges": records,
    }
    models = [str(j["model"]) for j in judges if j.get("model")]
    if models:
        attrs[f"{ATTRIBUTE_PREFIX}.judge.models"] = models
    return attrs


def judge_metadata(judges: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A Langfuse score's ``metadata`` naming its judges: ``judge_ids``, ``judge_models``, ``judges``
    (empty for none)."""
    if not judges:
        return {}
    return {
        "judge_ids": [str(j.get("id")) for j in judges],
        "judge_models": [str(j["model"]) for j in judges if j.get("model")],
        "judges": [dict(j) for j in judges],
    }
