"""Who judged: a judge's identity (model, endpoint, sampling, rubric) as a small stable record.

Every scored group carries the identities of its judges (:attr:`GroupJudgement.judges`), so
a score can be traced to the judge that gave it and a run that changed judges can be told apart
from one that did not (:class:`~art_adapters.ruler.JudgeChangeMonitor`). Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ._config import RulerConfig
from ._judges import Judge, resolve_judge

__all__ = ["judge_identity", "rubric_sha256"]


def _endpoint(url: str | None) -> str | None:
    """``url`` without credentials: no ``user:password@``, no query, no fragment."""
    if not url:
        return None
    try:
        parts = urlsplit(url)
    except ValueError:
        return None  # not a URL: nothing safe to write down
    if not parts.netloc:
        return None
    return urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, "", ""))


def _sha256(payload: Any) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


def rubric_sha256(config: RulerConfig) -> str:
    """The first 16 hex digits of the SHA-256 of the rubric (and of the dimensions, when named).

    Without dimensions it is the hash of the rubric's text alone; with them, of the rubric, the
    dimensions with their weights and the dimension rubrics (a change of weight changes the reward).
    """
    if config.dimensions is None:
        return hashlib.sha256(config.rubric.encode()).hexdigest()[:16]
    payload = {
        "rubric": config.rubric,
        "dimensions": config.dimensions,
        "dimension_rubrics": config.dimension_rubrics or {},
    }
    return _sha256(payload)[:16]


def adapter_identity(adapter: Judge, config: RulerConfig) -> dict[str, Any]:
    """:func:`judge_identity` of a judge already resolved to its adapter."""
    sampling = dict(getattr(adapter, "sampling", {}) or {})
    temperature = sampling.get("temperature")
    record: dict[str, Any] = {
        "model": str(getattr(adapter, "model_name", adapter.model_id)),
        "endpoint": _endpoint(getattr(adapter, "endpoint", None)),
        "temperature": float(temperature) if isinstance(temperature, int | float) else None,
        "samples": config.samples,
        "rubric_sha256": rubric_sha256(config),
    }
    # The id also covers what the record leaves out: the adapter kind and every other verdict setting
    # (token and reasoning budgets...) that the cache id carries.
    record["id"] = _sha256({**record, "cache_id": getattr(adapter, "cache_id", adapter.model_id)})[:12]
    return record


def judge_identity(judge: Any, config: RulerConfig | None = None) -> dict[str, Any]:
    """The identity of ``judge`` scoring with ``config``: what a score's reader needs to trust it.

    Args:
        judge: what ``ruler_score_group(judge=...)`` takes (a LangChain chat model, a litellm model
            string, or a judge adapter).
        config: the RULER settings (their rubric, dimensions and ``samples`` are part of the
            identity); ``None``: the defaults.

    Returns:
        ``{"model", "endpoint", "temperature", "samples", "rubric_sha256", "id"}``: the model's name;
        its endpoint without credentials (no ``user:password@``, no query) or ``None``; the sampling
        temperature (``None`` when the judge sets none); ``config.samples``; the first 16 hex digits
        of the SHA-256 of the rubric (and dimensions, :func:`rubric_sha256`); and ``id``, 12 hex
        digits of a hash of all of these plus the judge's other verdict settings (token and
        reasoning budgets...), equal for two judges exactly when all of that is.

    Raises:
        ConfigError: ``judge`` is not a judge.
    """
    settings = config if config is not None else RulerConfig()
    return adapter_identity(resolve_judge(judge, structured=settings.structured), settings)
