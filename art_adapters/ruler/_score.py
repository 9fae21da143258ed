"""RULER scoring: one judge call per group, scores matched by id, retried, cached.

Relative scores need no reward function: the judge compares the rollouts of one scenario. An answer
that stays invalid after its retries raises (or leaves the group unscored), never a made-up reward.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

from .._config import resolve_config
from .._errors import ConfigError, JudgeError
from .._gather import gather_or_cancel
from .._redact import redact_text
from .._trajectory import TrajectoryGroup
from ._answer import InvalidAnswer, JudgeScore, parse_answer
from ._cache import RulerCache
from ._config import RulerConfig
from ._judges import Judge, resolve_judge
from ._prompt import JudgeRequest, build_request

__all__ = ["combine_rewards", "ruler_score_group", "ruler_score_groups"]

logger = logging.getLogger(__name__)

_FEEDBACK = (
    "That answer was invalid: {reason}. Reply again with only the JSON object, one entry for "
    "each of the trajectory ids {ids}, every score a number from 0 to 1."
)

_TURN_FEEDBACK = (
    "That answer was invalid: {reason}. Reply again with only the JSON object, one entry for "
    "each of the trajectory ids {ids}, every score a number from 0 to 1, and turn_scores with "
    "one score from 0 to 1 per assistant turn, in order ({counts})."
)


def _feedback(request: JudgeRequest, reason: str) -> str:
    """What the judge is told after an invalid answer (the turn counts too when scoring per turn)."""
    ids = ", ".join(request.labels)
    if not request.per_turn:
        return _FEEDBACK.format(reason=reason, ids=ids)
    counts = ", ".join(f"{label}: {request.turns[label]} turn(s)" for label in request.labels)
    return _TURN_FEEDBACK.format(reason=reason, ids=ids, counts=counts)


def _describe(group: TrajectoryGroup) -> str:
    scenario = group.metadata.get("scenario_id")
    return f"group {group.id}" + (f" (scenario {scenario})" if scenario is not None else "")


async def _ask(
    judge: Judge, request: JudgeRequest, group: TrajectoryGroup, *, timeout_s: float | None, max_retries: int
) -> tuple[dict[str, JudgeScore], int]:
    """Ask until the answer validates; return the scores and the number of attempts.

    An invalid answer is shown back to the judge with the reason (:data:`_FEEDBACK`) on the next
    attempt; a timeout or an endpoint error is simply retried. A
    :class:`ConfigError` is raised at once; after ``max_retries`` further attempts, a
    :class:`JudgeError` listing every attempt's reason.
    """
    messages = list(request.messages)
    errors: list[str] = []
    for attempt in range(1, max_retries + 2):
        deadline = asyncio.timeout(timeout_s)
        try:
            async with deadline:
                text = await judge.complete(messages, request.schema)
            return parse_answer(text, request.labels, request.turns if request.per_turn else None), attempt
        except InvalidAnswer as exc:
            reason = str(exc)
            # Show the judge its mistake on the next attempt.
            messages = [
                *request.messages,
                {"role": "assistant", "content": text[:2000]},
                {"role": "user", "content": _feedback(request, reason)},
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
        line = f"RULER score {verdict.score:.3f}: {verdict.explanation}"
        if request.per_turn:
            assert verdict.turn_scores is not None  # parse_answer and the cache check it
            trajectory.metadata["turn_rewards"] = list(verdict.turn_scores)
            line += " (turns: " + ", ".join(f"{s:.3f}" for s in verdict.turn_scores) + ")"
        trajectory.logs.append(line)


async def ruler_score_group(
    group: TrajectoryGroup,
    judge: Any = None,
    rubric: str | None = None,
    *,
    config: RulerConfig | None = None,
    **settings: Any,
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
        rubric: how to score; overrides ``config.rubric`` (:data:`DEFAULT_RUBRIC` by default).
        config: the judge's settings (:class:`RulerConfig`: timeout, retries, cache, structured
            output, swallow_exceptions, reward_weights...); ``None``: its defaults.
        **settings: :class:`RulerConfig` fields (``max_retries=0``, ``cache=False``, ...), laid
            over ``config``.

    Returns:
        The scored copy: each trajectory's ``reward`` becomes the judge's score (also in
        ``metrics["ruler_score"]``), the reward it had before is kept as
        ``metrics["independent_reward"]``, the explanation goes to ``metadata["ruler_explanation"]``
        and ``logs``, and ``group.metadata["ruler"]`` records the status, the judge and whether the
        cache answered. :func:`combine_rewards` mixes the two rewards (or any metrics) with weights.
        With ``per_turn=True`` the judge also scores each assistant turn of every trajectory's main
        history (the turns are numbered in the prompt; an answer with another number of turn scores
        than a trajectory has turns, or one outside [0, 1], is invalid and retried like a bad score),
        and ``metadata["turn_rewards"]`` gets them: one float per assistant message of
        ``messages``, in order, for ``TrainConfig(credit="turn")``.

    Raises:
        JudgeError: no valid answer after the retries (unless ``swallow_exceptions``).
        ConfigError: an invalid argument or setting (always raised).
    """
    return await _score(group, judge, _settings(config, rubric, settings))


def _settings(config: RulerConfig | None, rubric: str | None, settings: dict[str, Any]) -> RulerConfig:
    """``config`` with the rubric argument and the keyword settings laid over it."""
    return resolve_config(RulerConfig, config, settings if rubric is None else {**settings, "rubric": rubric})


async def _score(group: TrajectoryGroup, judge: Any, ruler: RulerConfig) -> TrajectoryGroup:
    """Score one group with validated settings (the judge adapter is made per group, as before)."""
    adapter = resolve_judge(judge, structured=ruler.structured)
    store = ruler.cache_store()
    scored = group.model_copy(deep=True)
    if not scored.trajectories:
        reason = f"no trajectories to score ({len(scored.exceptions)} rollout(s) failed)"
        scored.metadata["ruler"] = {"status": "unscored", "reason": reason, "judge": adapter.model_id}
        logger.warning("RULER: %s has %s", _describe(group), reason)
        return scored

    request = build_request(
        scored, ruler.rubric, max_explanation_chars=ruler.max_explanation_chars, per_turn=ruler.per_turn
    )
    key = RulerCache.key(getattr(adapter, "cache_id", adapter.model_id), request)
    turns = request.turns if request.per_turn else None
    try:
        cached = store.get(key, request.labels, turns) if store is not None else None
        if cached is not None:
            scores, attempts = cached, 0
        else:
            scores, attempts = await _ask(
                adapter, request, group, timeout_s=ruler.judge_timeout_s, max_retries=ruler.max_retries
            )
            if store is not None:
                store.put(key, adapter.model_id, scores)
    except JudgeError as exc:
        if not ruler.swallow_exceptions:
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
    if request.per_turn:
        scored.metadata["ruler"]["per_turn"] = True
    if ruler.reward_weights is not None:
        scored = combine_rewards(scored, ruler.reward_weights)
    return scored


async def ruler_score_groups(
    groups: Sequence[TrajectoryGroup],
    judge: Any = None,
    rubric: str | None = None,
    *,
    config: RulerConfig | None = None,
    **settings: Any,
) -> list[TrajectoryGroup]:
    """Score many groups concurrently (at most ``max_concurrency`` judge calls at once).

    Takes the arguments of :func:`ruler_score_group` (``config`` and keyword settings, of which
    ``max_concurrency`` applies here); returns the scored copies in the input's order. Without
    ``swallow_exceptions`` the first :class:`JudgeError` cancels the other calls and is raised;
    with it, failed groups come back marked unscored, never dropped.
    """
    ruler = _settings(config, rubric, settings)
    resolve_judge(judge, structured=ruler.structured)  # fail fast on a bad judge
    semaphore = asyncio.Semaphore(ruler.max_concurrency)

    async def one(group: TrajectoryGroup) -> TrajectoryGroup:
        async with semaphore:
            return await _score(group, judge, ruler)

    return await gather_or_cancel([asyncio.create_task(one(group)) for group in groups])


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
