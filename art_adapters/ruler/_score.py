"""RULER scoring: one judge call per group, scores matched by id, retried, cached.

::

    judge = ChatOpenAI(base_url="http://127.0.0.1:8000/v1", model="judge", api_key="-")
    scored = await aa.ruler_score_group(group, judge=judge)
    groups = await aa.ruler_score_groups(groups, judge=judge, swallow_exceptions=True)

A scored group is a copy of the input: each trajectory's ``reward`` becomes the judge's
score (also in ``metrics["ruler_score"]``), the reward it had before is kept as
``metrics["independent_reward"]``, the explanation goes to
``metadata["ruler_explanation"]`` and ``logs``, and ``group.metadata["ruler"]`` records
the status, the judge and whether the cache answered. :func:`combine_rewards` mixes the
two rewards (or any metrics) with weights.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .._errors import ConfigError, JudgeError
from .._redact import redact_text
from .._trajectory import TrajectoryGroup
from ._answer import InvalidAnswer, JudgeScore, parse_answer
from ._cache import RulerCache
from ._judges import Judge, StructuredMode, resolve_judge
from ._prompt import DEFAULT_RUBRIC, JudgeRequest, build_request

__all__ = ["combine_rewards", "ruler_score_group", "ruler_score_groups"]

logger = logging.getLogger(__name__)

_FEEDBACK = (
    "That answer was invalid: {reason}. Reply again with only the JSON object, one entry for "
    "each of the trajectory ids {ids}, every score a number from 0 to 1."
)


def _resolve_cache(cache: bool | str | Path | RulerCache | None) -> RulerCache | None:
    if cache is None or cache is False:
        return None
    if cache is True:
        return RulerCache()
    if isinstance(cache, RulerCache):
        return cache
    if isinstance(cache, str | Path):
        return RulerCache(cache)
    raise ConfigError(f"cache must be True, False, a directory or a RulerCache, got {type(cache).__name__}")


def _describe(group: TrajectoryGroup) -> str:
    scenario = group.metadata.get("scenario_id")
    return f"group {group.id}" + (f" (scenario {scenario})" if scenario is not None else "")


async def _ask(
    judge: Judge, request: JudgeRequest, group: TrajectoryGroup, *, timeout_s: float | None, max_retries: int
) -> tuple[dict[str, JudgeScore], int]:
    """Ask until the answer validates; return the scores and the number of attempts."""
    messages = list(request.messages)
    errors: list[str] = []
    for attempt in range(1, max_retries + 2):
        deadline = asyncio.timeout(timeout_s)
        try:
            async with deadline:
                text = await judge.complete(messages, request.schema)
            return parse_answer(text, request.labels), attempt
        except InvalidAnswer as exc:
            reason = str(exc)
            # Show the judge its mistake on the next attempt.
            messages = [
                *request.messages,
                {"role": "assistant", "content": text[:2000]},
                {"role": "user", "content": _FEEDBACK.format(reason=reason, ids=", ".join(request.labels))},
            ]
        except TimeoutError as exc:
            expired = deadline.expired() and timeout_s is not None
            reason = (
                f"no answer within judge_timeout_s={timeout_s:g} s" if expired else f"TimeoutError: {exc}"
            )
        except ConfigError:
            raise
        except Exception as exc:  # noqa: BLE001 - the judge endpoint failed (HTTP error, connection reset...): retried
            reason = redact_text(f"{type(exc).__name__}: {exc}")  # no https://user:pass@ of the endpoint
        errors.append(f"attempt {attempt}: {reason}")
        logger.warning("RULER judge %s on %s, %s", judge.model_id, _describe(group), errors[-1])
    raise JudgeError(
        f"RULER judge {judge.model_id} gave no valid scores for {_describe(group)} after "
        f"{max_retries + 1} attempt(s): "
        + "; ".join(errors)
        + ". Check the judge endpoint, give it a larger judge_timeout_s, or pass swallow_exceptions=True "
        "to keep the group unscored."
    )


def _apply(group: TrajectoryGroup, request: JudgeRequest, scores: dict[str, JudgeScore]) -> None:
    for index, trajectory in enumerate(group.trajectories):
        verdict = scores[request.label_of(index)]
        # Scored by RULER before (another rubric or judge): its reward is that score, and the
        # independent reward (if it had one) is already kept; do not overwrite it with the old score.
        if trajectory.reward is not None and "ruler_score" not in trajectory.metrics:
            trajectory.metrics["independent_reward"] = trajectory.reward
        trajectory.metrics["ruler_score"] = verdict.score
        trajectory.reward = verdict.score
        trajectory.metadata["ruler_explanation"] = verdict.explanation
        trajectory.metadata["ruler_label"] = verdict.trajectory_id
        trajectory.logs.append(f"RULER score {verdict.score:.3f}: {verdict.explanation}")


async def ruler_score_group(
    group: TrajectoryGroup,
    judge: Any = None,
    rubric: str = DEFAULT_RUBRIC,
    *,
    judge_timeout_s: float | None = 120.0,
    max_retries: int = 2,
    cache: bool | str | Path | RulerCache | None = True,
    structured: StructuredMode = "auto",
    swallow_exceptions: bool = False,
    reward_weights: Mapping[str, float] | None = None,
    max_explanation_chars: int | None = 400,
) -> TrajectoryGroup:
    """Score the trajectories of ``group`` relative to each other with an LLM judge (RULER).

    The judge reads the messages every trajectory shares once, then each distinct
    trajectory's remainder once (identical trajectories share one entry and one score),
    and answers ``{"scores": [{"trajectory_id", "explanation", "score"}]}`` (schema-
    constrained where the endpoint supports ``response_format`` json_schema).

    Args:
        group: the group; it is not modified, a scored copy is returned.
        judge: a LangChain chat model (e.g. ``ChatOpenAI`` on any OpenAI-compatible
            endpoint, or ``model.chat_model()`` of our backend), or a litellm model string
            (needs ``pip install 'art-adapters[litellm]'``).
        rubric: how to score; :data:`DEFAULT_RUBRIC` when not given.
        judge_timeout_s: seconds one judge call may take (then retried); ``None``: no limit.
        max_retries: further attempts after a malformed answer, out-of-range score,
            missing/duplicate/unknown id, timeout or endpoint error.
        cache: ``True`` caches answers under :func:`~art_adapters.ruler._cache.default_cache_dir`,
            a path caches there, ``False`` disables it.
        structured: ``auto`` (json_schema when the model supports it), ``json_schema``, ``none``.
        swallow_exceptions: on failure return the group unscored (``metadata["ruler"]``
            has ``status="unscored"`` and the reason) instead of raising.
        reward_weights: if given, the final reward is :func:`combine_rewards` of these metrics.
        max_explanation_chars: longest explanation the answer schema allows (``maxLength``);
            ``None`` for no bound.

    Returns:
        The scored copy (see the module docstring for where everything goes).

    Raises:
        JudgeError: no valid answer after the retries (unless ``swallow_exceptions``).
        ConfigError: an invalid argument (always raised).
    """
    adapter = resolve_judge(judge, structured=structured)
    if not isinstance(rubric, str) or not rubric.strip():
        raise ConfigError("rubric must be a non-empty string (or leave it out for the default rubric)")
    if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
        raise ConfigError(f"max_retries must be an int >= 0, got {max_retries!r}")
    if judge_timeout_s is not None and not (judge_timeout_s > 0 and math.isfinite(judge_timeout_s)):
        raise ConfigError(f"judge_timeout_s must be a positive number or None, got {judge_timeout_s!r}")
    store = _resolve_cache(cache)

    scored = group.model_copy(deep=True)
    if not scored.trajectories:
        reason = f"no trajectories to score ({len(scored.exceptions)} rollout(s) failed)"
        scored.metadata["ruler"] = {"status": "unscored", "reason": reason, "judge": adapter.model_id}
        logger.warning("RULER: %s has %s", _describe(group), reason)
        return scored

    if max_explanation_chars is not None and (
        isinstance(max_explanation_chars, bool)
        or not isinstance(max_explanation_chars, int)
        or max_explanation_chars < 1
    ):
        raise ConfigError(f"max_explanation_chars must be an int >= 1 or None, got {max_explanation_chars!r}")
    request = build_request(scored, rubric, max_explanation_chars=max_explanation_chars)
    key = RulerCache.key(getattr(adapter, "cache_id", adapter.model_id), request)
    try:
        cached = store.get(key, request.labels) if store is not None else None
        if cached is not None:
            scores, attempts = cached, 0
        else:
            scores, attempts = await _ask(
                adapter, request, group, timeout_s=judge_timeout_s, max_retries=max_retries
            )
            if store is not None:
                store.put(key, adapter.model_id, scores)
    except JudgeError as exc:
        if not swallow_exceptions:
            raise
        scored.metadata["ruler"] = {"status": "unscored", "reason": str(exc), "judge": adapter.model_id}
        return scored

    _apply(scored, request, scores)
    scored.metadata["ruler"] = {
        "status": "scored",
        "judge": adapter.model_id,
        "cache_hit": cached is not None,
        "attempts": attempts,
        "distinct_trajectories": len(request.labels),
        "shared_prefix_messages": request.prefix_messages,
    }
    if reward_weights is not None:
        scored = combine_rewards(scored, reward_weights)
    return scored


async def ruler_score_groups(
    groups: Sequence[TrajectoryGroup],
    judge: Any = None,
    rubric: str = DEFAULT_RUBRIC,
    *,
    max_concurrency: int = 4,
    **kwargs: Any,
) -> list[TrajectoryGroup]:
    """Score many groups concurrently (at most ``max_concurrency`` judge calls at once).

    Takes the keyword arguments of :func:`ruler_score_group`; returns the scored copies in
    the input's order. Without ``swallow_exceptions`` the first :class:`JudgeError`
    cancels the other calls and is raised; with it, failed groups come back marked
    unscored, never dropped.
    """
    if isinstance(max_concurrency, bool) or not isinstance(max_concurrency, int) or max_concurrency < 1:
        raise ConfigError(f"max_concurrency must be an int >= 1, got {max_concurrency!r}")
    resolve_judge(judge, structured=kwargs.get("structured", "auto"))  # fail fast on a bad judge
    semaphore = asyncio.Semaphore(max_concurrency)

    async def one(group: TrajectoryGroup) -> TrajectoryGroup:
        async with semaphore:
            return await ruler_score_group(group, judge, rubric, **kwargs)

    tasks = [asyncio.create_task(one(group)) for group in groups]
    try:
        pending: set[asyncio.Task[TrajectoryGroup]] = set(tasks)
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()  # raises the first failure; the finally cancels the rest
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return [task.result() for task in tasks]


def combine_rewards(group: TrajectoryGroup, weights: Mapping[str, float]) -> TrajectoryGroup:
    """Set each trajectory's reward to the weighted mean of the named metrics.

    ``weights`` maps metric names (``"ruler_score"``, ``"independent_reward"``, or any
    metric your rollout records) to non-negative weights with a positive sum; the
    reward becomes ``sum(w * metric) / sum(w)``. Returns a copy; the input is unchanged.

    Raises:
        ConfigError: a negative or all-zero weight, or a trajectory lacking a metric
            (naming which; e.g. ``independent_reward`` exists only where the trajectory
            had a reward before RULER scored it).
    """
    if not weights:
        raise ConfigError(
            "weights must name at least one metric, e.g. {'ruler_score': 0.8, 'independent_reward': 0.2}"
        )
    for name, weight in weights.items():
        if (
            isinstance(weight, bool)
            or not isinstance(weight, int | float)
            or not math.isfinite(weight)
            or weight < 0
        ):
            raise ConfigError(f"weight of {name!r} must be a finite number >= 0, got {weight!r}")
    total = float(sum(weights.values()))
    if total <= 0:
        raise ConfigError("the weights sum to 0; give at least one metric a positive weight")
    combined = group.model_copy(deep=True)
    for trajectory in combined.trajectories:
        missing = [name for name in weights if name not in trajectory.metrics]
        if missing:
            raise ConfigError(
                f"trajectory {trajectory.id} of {_describe(group)} has no metric {', '.join(map(repr, missing))}; "
                f"it has {sorted(trajectory.metrics) or 'none'}"
            )
        trajectory.reward = sum(w * float(trajectory.metrics[name]) for name, w in weights.items()) / total
    combined.metadata["reward_weights"] = dict(weights)
    return combined
