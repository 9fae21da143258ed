"""RULER scoring: one judge call per group (per judge of an ensemble), scores matched by id, retried, cached.

Relative scores need no reward function: the judge compares the rollouts of one scenario. An answer
that stays invalid after its retries raises (or leaves the group unscored), never a made-up reward.
"""

from __future__ import annotations

import asyncio
import logging
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._config import resolve_config
from .._errors import ConfigError, JudgeError
from .._gather import gather_or_cancel
from .._redact import redact_text
from .._trajectory import Trajectory, TrajectoryGroup
from ._answer import InvalidAnswer, JudgeScore, parse_answer
from ._cache import RulerCache
from ._config import RulerConfig
from ._ensemble import aggregate, agreement, mean_pairwise_tau
from ._identity import adapter_identity
from ._judgement import GroupJudgement, JudgeVerdict, TrajectoryJudgement
from ._judges import Judge, resolve_judge
from ._monitor import JudgeChangeMonitor
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


_DIMENSION_FEEDBACK = (
    "That answer was invalid: {reason}. Reply again with only the JSON object, one entry for "
    "each of the trajectory ids {ids}, each with a dimensions object giving every one of {names} "
    "a score from 0 to 1{turns}."
)


def _feedback(request: JudgeRequest, reason: str) -> str:
    """What the judge is told after an invalid answer (the turn counts too when scoring per turn)."""
    ids = ", ".join(request.labels)
    counts = ", ".join(f"{label}: {request.turns.get(label, 0)} turn(s)" for label in request.labels)
    if request.dimensions is not None:
        turns = (
            f", and turn_scores with one score from 0 to 1 per assistant turn, in order ({counts})"
            if request.per_turn
            else ""
        )
        names = ", ".join(request.dimensions)
        return _DIMENSION_FEEDBACK.format(reason=reason, ids=ids, names=names, turns=turns)
    if not request.per_turn:
        return _FEEDBACK.format(reason=reason, ids=ids)
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
            turns = request.turns if request.per_turn else None
            return parse_answer(text, request.labels, turns, request.dimensions), attempt
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
        TrajectoryJudgement(
            score=verdict.score,
            explanation=verdict.explanation,
            label=verdict.trajectory_id,
            dimensions=dict(verdict.dimensions or {}),
            turn_scores=list(verdict.turn_scores or []) if request.per_turn else None,
            independent_reward=_independent_reward(trajectory),
        ).write(trajectory)
        trajectory.reward = verdict.score
        line = f"RULER score {verdict.score:.3f}: {verdict.explanation}"
        if request.per_turn:
            assert verdict.turn_scores is not None  # parse_answer and the cache check it
            line += " (turns: " + ", ".join(f"{s:.3f}" for s in verdict.turn_scores) + ")"
        trajectory.logs.append(line)


def _independent_reward(trajectory: Trajectory) -> float | None:
    """The reward to keep as the independent one: the trajectory's, unless RULER scored it before.

    Scored by RULER before (another rubric or judge), its reward is that score and the independent
    reward (if it had one) is already kept; ``None`` leaves it as it is.
    """
    return trajectory.reward if TrajectoryJudgement.read(trajectory) is None else None


def _forget_dimensions(group: TrajectoryGroup, ruler: RulerConfig) -> None:
    """Drop the scores of an earlier scoring's dimensions that this one does not score."""
    earlier = GroupJudgement.read(group)
    old = earlier.dimensions if earlier is not None else None
    stale = [name for name in old or {} if name not in (ruler.dimensions or {})]
    for trajectory in group.trajectories:
        TrajectoryJudgement.forget_dimensions(trajectory, stale)


@dataclass
class _Member:
    """One judge of the ensemble: its adapter, identity and (with ``samples`` > 1) sample index."""

    adapter: Judge
    identity: dict[str, Any]
    sample: int | None


def _members(judge: Any, judges: Sequence[Any] | None, ruler: RulerConfig) -> list[_Member]:
    """The judges to ask (each ``samples`` times), or a :class:`ConfigError` saying what to pass."""
    if judges is not None and judge is not None:
        raise ConfigError("pass either judge= (one judge) or judges=[...] (an ensemble), not both")
    if judges is None:
        chosen = [judge]
    elif isinstance(judges, str) or not isinstance(judges, Sequence):
        raise ConfigError(
            f"judges must be a list of judges (LangChain chat models or litellm model strings), got "
            f"{type(judges).__name__}; for one judge pass judge="
        )
    elif not judges:
        raise ConfigError("judges is empty: list at least one judge (or pass judge=)")
    else:
        chosen = list(judges)
    adapters = [resolve_judge(j, structured=ruler.structured) for j in chosen]
    identities = [adapter_identity(adapter, ruler) for adapter in adapters]
    seen: dict[str, int] = {}
    for position, identity in enumerate(identities):
        if identity["id"] in seen:
            raise ConfigError(
                f"judges {seen[identity['id']]} and {position} are the same judge ({identity['model']}, "
                f"identity {identity['id']}): they would share cached answers; to ask one judge several "
                "times set samples=k instead"
            )
        seen[identity["id"]] = position
    samples = [None] if ruler.samples == 1 else list(range(ruler.samples))
    return [
        _Member(adapter, identity, sample)
        for adapter, identity in zip(adapters, identities, strict=True)
        for sample in samples
    ]


def _unscored(reason: str, name: str, identities: list[dict[str, Any]]) -> GroupJudgement:
    """The judgement of a group left unscored: why, and by whom."""
    return GroupJudgement(status="unscored", reason=reason, judge=name, judges=identities)


def _judge_name(members: list[_Member]) -> str:
    """:attr:`GroupJudgement.judge`: the judge's ``model_id``; for an ensemble its distinct ones, joined."""
    return ", ".join(dict.fromkeys(m.adapter.model_id for m in members))


async def _verdict(
    member: _Member,
    request: JudgeRequest,
    group: TrajectoryGroup,
    ruler: RulerConfig,
    store: RulerCache | None,
    semaphore: asyncio.Semaphore | None,
) -> tuple[dict[str, JudgeScore], int, bool]:
    """One judge's scores for the group: from the cache, else asked; with the attempts and whether cached.

    The key adds the judge's identity and sample index only when the identity holds more than the
    judge id and the messages already do (``samples`` > 1, or dimensions with their weights).
    """
    adapter = member.adapter
    extended = ruler.samples > 1 or ruler.dimensions is not None
    key = RulerCache.key(
        getattr(adapter, "cache_id", adapter.model_id),
        request,
        identity=member.identity["id"] if extended else None,
        sample=member.sample,
    )
    turns = request.turns if request.per_turn else None
    dimensions = list(request.dimensions) if request.dimensions is not None else None
    cached = store.get(key, request.labels, turns, dimensions) if store is not None else None
    if cached is not None:
        return cached, 0, True
    if semaphore is None:
        scores, attempts = await _ask(
            adapter, request, group, timeout_s=ruler.judge_timeout_s, max_retries=ruler.max_retries
        )
    else:
        async with semaphore:
            scores, attempts = await _ask(
                adapter, request, group, timeout_s=ruler.judge_timeout_s, max_retries=ruler.max_retries
            )
    if store is not None:
        store.put(key, adapter.model_id, scores)
    return scores, attempts, False


def _member_name(member: _Member) -> str:
    return member.identity["model"] + (f" #{member.sample}" if member.sample is not None else "")


def _apply_ensemble(
    group: TrajectoryGroup,
    request: JudgeRequest,
    members: list[_Member],
    verdicts: list[dict[str, JudgeScore]],
    method: str,
) -> float | None:
    """Write the ensemble's aggregate, agreement and per-judge verdicts; return the group's Kendall tau."""
    labels = [request.label_of(i) for i in range(len(group.trajectories))]
    vectors = [[verdict[label].score for label in labels] for verdict in verdicts]
    combined, agreed, tau = aggregate(vectors, method), agreement(vectors), mean_pairwise_tau(vectors)
    for index, trajectory in enumerate(group.trajectories):
        label = labels[index]
        mine = [verdict[label] for verdict in verdicts]
        pairs = list(zip(members, mine, strict=True))
        turn_scores = None
        if request.per_turn:
            turn_lists: list[list[float]] = []
            for verdict in mine:
                assert verdict.turn_scores is not None  # parse_answer and the cache check it
                turn_lists.append(verdict.turn_scores)
            turn_scores = [statistics.fmean(column) for column in zip(*turn_lists, strict=True)]
        dimensions = {
            name: statistics.fmean(v.dimensions[name] for v in mine if v.dimensions is not None)
            for name in request.dimensions or {}
        }
        TrajectoryJudgement(
            score=combined[index],
            explanation="\n".join(f"{_member_name(m)}: {v.explanation}" for m, v in pairs),
            label=label,
            dimensions=dimensions,
            turn_scores=turn_scores,
            independent_reward=_independent_reward(trajectory),
            agreement=agreed[index],
            verdicts=[
                JudgeVerdict(
                    judge=member.identity["id"], score=verdict.score, explanation=verdict.explanation,
                    sample=member.sample, dimensions=verdict.dimensions,
                )
                for member, verdict in pairs
            ],
        ).write(trajectory)  # fmt: skip
        trajectory.reward = combined[index]
        line = (
            f"RULER score {combined[index]:.3f} ({method} of {len(members)} judges, agreement "
            f"{agreed[index]:.2f}): " + "; ".join(f"{_member_name(m)} {v.score:.3f}" for m, v in pairs)
        )
        trajectory.logs.append(line)
    return tau


async def ruler_score_group(
    group: TrajectoryGroup,
    judge: Any = None,
    rubric: str | None = None,
    *,
    judges: Sequence[Any] | None = None,
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
        judges: an ensemble instead of ``judge`` (pass exactly one of them): a list of judges, each
            asked about the group (``samples`` times each) with the same prompt; each has its own
            cache entries. Their scores are aggregated by ``config.aggregate``; the same judge twice
            is a :class:`ConfigError` (use ``samples``).
        config: the judge's settings (:class:`RulerConfig`: timeout, retries, cache, structured
            output, swallow_exceptions, reward_weights, samples, aggregate, dimensions...);
            ``None``: its defaults.
        **settings: :class:`RulerConfig` fields (``max_retries=0``, ``cache=False``, ...), laid
            over ``config``.

    Returns:
        The scored copy: each trajectory's ``reward`` becomes the judge's score (also in
        ``metrics["ruler_score"]``), the reward it had before is kept as
        ``metrics["independent_reward"]``, the explanation goes to ``metadata["ruler_explanation"]``
        and ``logs``, and ``group.metadata["ruler"]`` records the status, the judge, its identity
        (``"judges"``: one :func:`~art_adapters.ruler.judge_identity` record per judge) and whether
        the cache answered. :func:`combine_rewards` mixes the two rewards (or any metrics) with weights.
        With ``per_turn=True`` the judge also scores each assistant turn of every trajectory's main
        history (the turns are numbered in the prompt; an answer with another number of turn scores
        than a trajectory has turns, or one outside [0, 1], is invalid and retried like a bad score),
        and ``metadata["turn_rewards"]`` gets them: one float per assistant message of
        ``messages``, in order, for ``TrainConfig(credit="turn")``.
        With ``dimensions`` the judge scores each dimension (validated and retried the same way),
        each lands in ``metrics["ruler_<name>"]`` and ``ruler_score`` is their weighted mean.
        With an ensemble (several ``judges`` or ``samples`` > 1), ``ruler_score`` is the aggregate,
        ``metrics["judge_agreement"]`` is ``1 - (max - min)`` of the judges' scores,
        ``metadata["ruler_judges"]`` lists each judge's score and explanation, dimensions and turn
        scores are the judges' means, and ``group.metadata["ruler"]`` adds ``"aggregate"`` and
        ``"kendall_tau"`` (the mean pairwise Kendall tau-b of the judges' scores; ``None`` when
        undefined). One judge failing fails the group (raised, or unscored with
        ``swallow_exceptions``). Read all of it back typed with :meth:`GroupJudgement.read` and
        :meth:`TrajectoryJudgement.read`.

    Raises:
        JudgeError: no valid answer after the retries (unless ``swallow_exceptions``).
        ConfigError: an invalid argument or setting (always raised).
    """
    ruler = _settings(config, rubric, settings)
    semaphore = asyncio.Semaphore(ruler.max_concurrency) if judges is not None or ruler.samples > 1 else None
    return await _score(group, judge, judges, ruler, semaphore)


def _settings(config: RulerConfig | None, rubric: str | None, settings: dict[str, Any]) -> RulerConfig:
    """``config`` with the rubric argument and the keyword settings laid over it."""
    return resolve_config(RulerConfig, config, settings if rubric is None else {**settings, "rubric": rubric})


async def _score(
    group: TrajectoryGroup,
    judge: Any,
    judges: Sequence[Any] | None,
    ruler: RulerConfig,
    semaphore: asyncio.Semaphore | None,
) -> TrajectoryGroup:
    """Score one group with validated settings (the judge adapters are made per group, as before)."""
    members = _members(judge, judges, ruler)
    identities = [m.identity for m in members]
    store = ruler.cache_store()
    scored = group.model_copy(deep=True)
    name = _judge_name(members)
    if not scored.trajectories:
        reason = f"no trajectories to score ({len(scored.exceptions)} rollout(s) failed)"
        _unscored(reason, name, identities).write(scored)
        logger.warning("RULER: %s has %s", _describe(group), reason)
        return scored

    request = build_request(
        scored,
        ruler.rubric,
        max_explanation_chars=ruler.max_explanation_chars,
        per_turn=ruler.per_turn,
        dimensions=ruler.dimensions,
        dimension_rubrics=ruler.dimension_rubrics,
    )
    try:
        if len(members) == 1:
            results = [await _verdict(members[0], request, group, ruler, store, semaphore)]
        else:
            results = await gather_or_cancel(
                [asyncio.create_task(_verdict(m, request, group, ruler, store, semaphore)) for m in members]
            )
    except JudgeError as exc:
        if not ruler.swallow_exceptions:
            raise
        _unscored(str(exc), name, identities).write(scored)
        return scored
    _forget_dimensions(scored, ruler)
    _judged(scored, request, members, results, ruler).write(scored)
    if ruler.reward_weights is not None:
        scored = combine_rewards(scored, ruler.reward_weights)
    return scored


def _judged(
    scored: TrajectoryGroup,
    request: JudgeRequest,
    members: Sequence[_Member],
    results: Sequence[tuple[dict[str, JudgeScore], int, bool]],
    ruler: RulerConfig,
) -> GroupJudgement:
    """Put the judges' scores on ``scored``'s trajectories (one judge's, or the ensemble's aggregate);
    the group's judgement: who judged, from the cache or not, in how many attempts."""
    hits = [hit for _, _, hit in results]
    name = _judge_name(members)
    judgement = GroupJudgement(
        status="scored",
        judge=name,
        cache_hit=all(hits),
        attempts=sum(attempts for _, attempts, _ in results),
        distinct_trajectories=len(request.labels),
        shared_prefix_messages=request.prefix_messages,
    )
    if len(members) == 1:
        _apply(scored, request, results[0][0])
    else:
        tau = _apply_ensemble(scored, request, members, [scores for scores, _, _ in results], ruler.aggregate)
        judgement.aggregate, judgement.kendall_tau, judgement.cache_hits = ruler.aggregate, tau, sum(hits)
    judgement.judges = [m.identity for m in members]
    if request.per_turn:
        judgement.per_turn = True
    if request.dimensions is not None:
        judgement.dimensions = dict(request.dimensions)
    return judgement


async def ruler_score_groups(
    groups: Sequence[TrajectoryGroup],
    judge: Any = None,
    rubric: str | None = None,
    *,
    judges: Sequence[Any] | None = None,
    config: RulerConfig | None = None,
    monitor: JudgeChangeMonitor | None = None,
    **settings: Any,
) -> list[TrajectoryGroup]:
    """Score many groups concurrently (at most ``max_concurrency`` judge calls at once).

    Takes the arguments of :func:`ruler_score_group` (``judge`` or ``judges``, ``config`` and
    keyword settings, of which ``max_concurrency`` applies here, counting every judge call of an
    ensemble); returns the scored copies in the input's order. Without ``swallow_exceptions`` the
    first :class:`JudgeError` cancels the other calls and is raised; with it, failed groups come
    back marked unscored, never dropped.

    ``monitor``: the run's :class:`~art_adapters.ruler.JudgeChangeMonitor`; the scored groups are
    checked against the judges it recorded first, and a change of judge is logged as a warning.
    """
    ruler = _settings(config, rubric, settings)
    _members(judge, judges, ruler)  # fail fast on a bad judge
    semaphore = asyncio.Semaphore(ruler.max_concurrency)

    scored = await gather_or_cancel(
        [asyncio.create_task(_score(group, judge, judges, ruler, semaphore)) for group in groups]
    )
    if monitor is not None:
        monitor.check(scored)
    return scored


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
