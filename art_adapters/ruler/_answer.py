"""Parse and validate the judge's answer: JSON, one score in [0, 1] per trajectory id.

Validation is the same for every judge adapter, and its messages are written for the judge to read
on a retry.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from .._errors import JudgeError

__all__ = ["InvalidAnswer", "JudgeScore", "parse_answer", "weighted_score"]

_FENCE = re.compile(r"^```[a-zA-Z]*\s*|\s*```$")


class InvalidAnswer(JudgeError, ValueError):
    """The judge's answer was not valid JSON of the expected shape (one attempt; the scorer retries).

    The message is one the judge can be shown on the retry ("score of t2 is 1.5, outside [0, 1]");
    the scorer turns the last one into a :class:`~art_adapters.JudgeError` naming the group.
    """


class JudgeScore(BaseModel):
    """One trajectory's verdict: its id as the judge saw it, an explanation and a score in [0, 1].

    ``turn_scores``: with per-turn scoring, one score in [0, 1] per assistant turn of the
    trajectory's main history, in order; ``None`` otherwise.

    ``dimensions``: with rubric dimensions, the judge's score in [0, 1] per dimension name; ``score``
    is then their weighted mean (:func:`weighted_score`); ``None`` otherwise.
    """

    model_config = ConfigDict(frozen=True)

    trajectory_id: str
    explanation: str
    score: float
    turn_scores: list[float] | None = None
    dimensions: dict[str, float] | None = None


def weighted_score(scores: Mapping[str, float], weights: Mapping[str, float]) -> float:
    """``sum(w[d] * scores[d]) / sum(w)`` over the dimensions of ``weights`` (all > 0, so in [0, 1])."""
    total = float(sum(weights.values()))
    return sum(w * float(scores[name]) for name, w in weights.items()) / total


def _load(text: str) -> Any:
    stripped = _FENCE.sub("", text.strip())
    try:
        return json.loads(stripped)
    except json.JSONDecodeError:
        start, end = stripped.find("{"), stripped.rfind("}")
        if start != -1 and end > start:
            try:
                return json.loads(stripped[start : end + 1])
            except json.JSONDecodeError:
                pass
    snippet = text.strip().replace("\n", " ")[:200]
    raise InvalidAnswer(f"the answer is not valid JSON: {snippet!r}")


def _number(value: Any) -> Any:
    """A score as given, or the float a numeric string spells."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
    return value


def _is_score(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)


def _turn_scores(item: dict[str, Any], trajectory_id: str, count: int) -> list[float]:
    """The entry's ``turn_scores``, checked: exactly ``count`` numbers, each in [0, 1]."""
    raw = item.get("turn_scores")
    if not isinstance(raw, list):
        raise InvalidAnswer(
            f"{trajectory_id} needs a turn_scores list with one score per assistant turn ({count}), "
            f"got {raw!r}"
        )
    if len(raw) != count:
        raise InvalidAnswer(
            f"turn_scores of {trajectory_id} has {len(raw)} score(s), but {trajectory_id} has {count} "
            f"assistant turn(s): give exactly {count}, turn 1 first"
        )
    scores: list[float] = []
    for position, value in enumerate(raw, start=1):
        value = _number(value)
        if not _is_score(value):
            raise InvalidAnswer(
                f"turn {position} of {trajectory_id} must have a number as score, got {value!r}"
            )
        if not 0.0 <= value <= 1.0:
            raise InvalidAnswer(f"turn {position} of {trajectory_id} has score {value}, outside [0, 1]")
        scores.append(float(value))
    return scores


def _dimension_scores(item: dict[str, Any], trajectory_id: str, names: Sequence[str]) -> dict[str, float]:
    """The entry's ``dimensions``, checked: exactly the dimensions ``names``, each a number in [0, 1]."""
    raw = item.get("dimensions")
    wanted = ", ".join(names)
    if not isinstance(raw, dict):
        raise InvalidAnswer(
            f"{trajectory_id} needs a dimensions object with one score per dimension ({wanted}), got {raw!r}"
        )
    unknown = [str(name) for name in raw if name not in names]
    if unknown:
        raise InvalidAnswer(
            f"{trajectory_id} scores unknown dimension(s) {', '.join(map(repr, unknown))}; "
            f"the dimensions are {wanted}"
        )
    missing = [name for name in names if name not in raw]
    if missing:
        raise InvalidAnswer(f"{trajectory_id} has no score for dimension(s) {', '.join(missing)}")
    scores: dict[str, float] = {}
    for name in names:
        value = _number(raw[name])
        if not _is_score(value):
            raise InvalidAnswer(f"{name} of {trajectory_id} must have a number as score, got {value!r}")
        if not 0.0 <= value <= 1.0:
            raise InvalidAnswer(f"{name} of {trajectory_id} has score {value}, outside [0, 1]")
        scores[name] = float(value)
    return scores


def parse_answer(
    text: str,
    labels: list[str],
    turns: Mapping[str, int] | None = None,
    dimensions: Mapping[str, float] | None = None,
) -> dict[str, JudgeScore]:
    """Validate ``text`` against ``labels``; return the scores keyed by trajectory id.

    ``turns`` (per-turn scoring: label -> its number of assistant turns) also requires each entry's
    ``turn_scores``: exactly that many numbers in [0, 1]. ``dimensions`` (rubric dimensions: name ->
    weight) requires each entry's ``dimensions`` object instead of its ``score``: one number in [0, 1]
    per dimension, no other; the entry's ``score`` becomes their weighted mean.

    Raises:
        InvalidAnswer: malformed JSON, a missing ``scores`` list, an unknown, duplicate
            or missing trajectory id, or a score that is not a number in [0, 1]; with
            ``turns``, a missing ``turn_scores`` list, one of another length than the
            trajectory's turns, or a turn score that is not a number in [0, 1]; with
            ``dimensions``, a missing ``dimensions`` object, a missing or unknown dimension,
            or a dimension's score that is not a number in [0, 1].
    """
    data = _load(text)
    if not isinstance(data, dict) or not isinstance(data.get("scores"), list):
        raise InvalidAnswer('the answer must be a JSON object with a "scores" list')
    expected = set(labels)
    found: dict[str, JudgeScore] = {}
    for item in data["scores"]:
        if not isinstance(item, dict):
            raise InvalidAnswer(f"every entry of scores must be an object, got {item!r}")
        raw_id = item.get("trajectory_id")
        trajectory_id = str(raw_id) if raw_id is not None else ""
        if trajectory_id not in expected:
            raise InvalidAnswer(f"unknown trajectory_id {raw_id!r}; the ids are {', '.join(labels)}")
        if trajectory_id in found:
            raise InvalidAnswer(f"trajectory_id {trajectory_id} is scored more than once")
        by_dimension = None
        if dimensions is not None:
            by_dimension = _dimension_scores(item, trajectory_id, list(dimensions))
            score = weighted_score(by_dimension, dimensions)
        else:
            score = _number(item.get("score"))
            if not _is_score(score):
                raise InvalidAnswer(f"score of {trajectory_id} must be a number, got {score!r}")
            if not 0.0 <= score <= 1.0:
                raise InvalidAnswer(f"score of {trajectory_id} is {score}, outside [0, 1]")
        explanation = item.get("explanation", "")
        found[trajectory_id] = JudgeScore(
            trajectory_id=trajectory_id,
            explanation=explanation if isinstance(explanation, str) else json.dumps(explanation),
            score=float(score),
            turn_scores=None if turns is None else _turn_scores(item, trajectory_id, turns[trajectory_id]),
            dimensions=by_dimension,
        )
    missing = [label for label in labels if label not in found]
    if missing:
        raise InvalidAnswer(f"no score for trajectory id(s) {', '.join(missing)}")
    return found
