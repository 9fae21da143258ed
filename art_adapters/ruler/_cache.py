"""The RULER score cache: one JSON file per judge request, keyed by a content hash.

Re-scoring the same group with the same judge and rubric costs no judge call.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

from ..files import write_atomic
from ._answer import JudgeScore
from ._prompt import PROMPT_VERSION, JudgeRequest

__all__ = ["RulerCache", "default_cache_dir"]

logger = logging.getLogger(__name__)


def default_cache_dir() -> Path:
    """``$ART_ADAPTERS_CACHE_DIR/ruler``, else ``$XDG_CACHE_HOME/art-adapters/ruler``, else
    ``~/.cache/art-adapters/ruler``."""
    if root := os.environ.get("ART_ADAPTERS_CACHE_DIR"):
        return Path(root) / "ruler"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "art-adapters" / "ruler"


class RulerCache:
    """Judge answers on disk under ``directory`` (created on first write), one file per request.

    Args:
        directory: where to keep the files; :func:`default_cache_dir` when ``None``.
    """

    def __init__(self, directory: str | Path | None = None) -> None:
        self.directory = Path(directory) if directory is not None else default_cache_dir()

    @staticmethod
    def key(
        judge_id: str, request: JudgeRequest, *, identity: str | None = None, sample: int | None = None
    ) -> str:
        """The SHA-256 of the judge id, prompt version, messages, schema and (when on) per-turn scoring.

        The judge id carries the model, endpoint and sampling settings, the messages carry the rubric
        and the trajectories' content: any change to one of them misses. A per-turn request never
        shares an entry with a per-trajectory one (its answers hold turn scores the other lacks).

        ``identity`` (the ``id`` of :func:`~art_adapters.ruler.judge_identity`) and ``sample`` (the
        index of one of ``samples`` answers) are added when given: the scorer gives them when the
        identity holds more than the judge id and the messages do (``samples`` > 1, or rubric
        dimensions and their weights), so a single judge's keys stay what they always were.
        """
        fields: dict[str, Any] = {
            "v": PROMPT_VERSION, "judge": judge_id, "messages": request.messages, "schema": request.schema
        }  # fmt: skip
        if request.per_turn:  # only then: per-trajectory keys stay what they always were
            fields["per_turn"] = True
        if identity is not None:
            fields["identity"] = identity
        if sample is not None:
            fields["sample"] = sample
        payload = json.dumps(fields, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(payload.encode()).hexdigest()

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def get(
        self,
        key: str,
        labels: list[str],
        turns: dict[str, int] | None = None,
        dimensions: list[str] | None = None,
    ) -> dict[str, JudgeScore] | None:
        """The cached scores for ``key``, or ``None`` on a miss.

        An unreadable entry, or one whose ids do not match ``labels`` (with ``turns``, per-turn
        scoring: whose turn scores are not one per turn of each label; with ``dimensions``: whose
        dimension scores are not exactly those), is logged and counts as a miss (the next
        :meth:`put` overwrites it).
        """
        path = self._path(key)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            scores = {item["trajectory_id"]: JudgeScore.model_validate(item) for item in data["scores"]}
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:  # nested past the limit too
            logger.warning("ignoring unreadable RULER cache entry %s: %s: %.200s", path, type(exc).__name__, exc)
            return None
        if sorted(scores) != sorted(labels):
            logger.warning("ignoring RULER cache entry %s: its ids do not match the request", path)
            return None
        if turns is not None and any(
            s.turn_scores is None or len(s.turn_scores) != turns[label] for label, s in scores.items()
        ):
            logger.warning("ignoring RULER cache entry %s: its turn scores do not match the request", path)
            return None
        if dimensions is not None and any(
            s.dimensions is None or sorted(s.dimensions) != sorted(dimensions) for s in scores.values()
        ):
            logger.warning("ignoring RULER cache entry %s: its dimensions do not match the request", path)
            return None
        return scores

    def put(self, key: str, judge_id: str, scores: dict[str, JudgeScore]) -> None:
        """Store ``scores`` under ``key``; a failure to write is logged, not raised.

        The file is written atomically (:func:`~art_adapters.files.write_atomic`: a crash never leaves
        an empty answer behind). The cache folder is made private (``0o700``): the judge saw every
        prompt it scored.
        """
        from ..files import private_dir

        path = self._path(key)
        try:
            private_dir(self.directory)
        except OSError as exc:
            logger.warning("could not make the RULER cache %s private: %s", self.directory, exc)
        record: dict[str, Any] = {
            "judge": judge_id, "scores": [s.model_dump(exclude_none=True) for s in scores.values()]
        }  # fmt: skip
        try:
            write_atomic(path, json.dumps(record).encode("utf-8"))
        except OSError as exc:
            logger.warning("could not write the RULER cache entry %s: %s", path, exc)
