"""Parse and validate the judge's answer: JSON, one score in [0, 1] per trajectory id.

Validation is the same for every judge adapter, and its messages are written for the judge to read
on a retry.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from pydantic import BaseModel, ConfigDict

from .._errors import JudgeError

__all__ = ["InvalidAnswer", "JudgeScore", "parse_answer"]

_FENCE = re.compile(r"^```[a-zA-Z]*\s*|\s*```$")


class InvalidAnswer(JudgeError, ValueError):
    """The judge's answer was not valid JSON of the expected shape (one attempt; the scorer retries).

    The message is one the judge can be shown on the retry ("score of t2 is 1.5, outside [0, 1]");
    the scorer turns the last one into a :class:`~art_adapters.JudgeError` naming the group.
    """


class JudgeScore(BaseModel):
    """One trajectory's verdict: its id as the judge saw it, an explanation and a score in [0, 1]."""

    model_config = ConfigDict(frozen=True)

    trajectory_id: str
    explanation: str
    score: float


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


def parse_answer(text: str, labels: list[str]) -> dict[str, JudgeScore]:
    """Validate ``text`` against ``labels``; return the scores keyed by trajectory id.

    Raises:
        InvalidAnswer: malformed JSON, a missing ``scores`` list, an unknown, duplicate
            or missing trajectory id, or a score that is not a number in [0, 1].
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
        score = item.get("score")
        if isinstance(score, str):
            try:
                score = float(score)
            except ValueError:
                pass
        if isinstance(score, bool) or not isinstance(score, int | float) or not math.isfinite(score):
            raise InvalidAnswer(f"score of {trajectory_id} must be a number, got {score!r}")
        if not 0.0 <= score <= 1.0:
            raise InvalidAnswer(f"score of {trajectory_id} is {score}, outside [0, 1]")
        explanation = item.get("explanation", "")
        found[trajectory_id] = JudgeScore(
            trajectory_id=trajectory_id,
            explanation=explanation if isinstance(explanation, str) else json.dumps(explanation),
            score=float(score),
        )
    missing = [label for label in labels if label not in found]
    if missing:
        raise InvalidAnswer(f"no score for trajectory id(s) {', '.join(missing)}")
    return found
