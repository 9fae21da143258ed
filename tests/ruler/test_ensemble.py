"""RULER judge ensembles against scripted judges on 127.0.0.1: several models, or one sampled k times;
mean and rank-mean aggregation, per-trajectory agreement, Kendall tau, cache and dedup per judge."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

import art_adapters as aa
from art_adapters._errors import ConfigError
from art_adapters.ruler import judge_identity
from art_adapters.ruler._ensemble import (
    aggregate,
    agreement,
    kendall_tau_b,
    mean_pairwise_tau,
    normalised_ranks,
)
from tests.ruler.conftest import ScriptedJudge, trajectory_blocks
from tests.ruler.test_score import answer, make_group

#: A long-winded wrong answer: the length-rewarding judge's favourite.
VERBOSE = "Let me think about this very carefully, step by step, before I answer. " * 10 + "The answer is 6."


def quiz() -> aa.TrajectoryGroup:
    """t1 right and short, t2 wrong and long, t3 wrong and short."""
    right, verbose, wrong = answer("The answer is 5."), answer(VERBOSE), answer("It is 7.")
    return make_group(right, verbose, wrong, rewards=[1.0, 0.0, 0.0])


# --- the pure aggregation and agreement functions ---


def test_kendall_tau_b_by_hand() -> None:
    assert kendall_tau_b([1, 2, 3], [10, 20, 30]) == 1.0
    assert kendall_tau_b([1, 2, 3], [3, 2, 1]) == -1.0
    # 6 pairs: 4 concordant, 0 discordant, one tied in x, one in y: 4 / sqrt(5 * 5).
    assert kendall_tau_b([1, 2, 2, 3], [1, 3, 2, 3]) == pytest.approx(0.8)
    assert kendall_tau_b([0.5, 0.5, 0.5], [0.1, 0.2, 0.3]) is None  # a constant judge: undefined
    assert kendall_tau_b([0.3], [0.9]) is None
    assert mean_pairwise_tau([[1, 2, 3], [1, 2, 3], [3, 2, 1]]) == pytest.approx((1 - 1 - 1) / 3)
    assert mean_pairwise_tau([[1, 1], [2, 2]]) is None
    with pytest.raises(ValueError, match="differ in length"):
        kendall_tau_b([1, 2], [1])


def test_ranks_aggregate_and_agreement_by_hand() -> None:
    assert normalised_ranks([0.2, 0.9, 0.9, 0.1]) == pytest.approx([1 / 3, 2.5 / 3, 2.5 / 3, 0.0])
    assert normalised_ranks([0.7]) == [0.5]
    judges = [[0.6, 0.45, 0.45], [0.0, 1.0, 0.2]]
    assert aggregate(judges, "mean") == pytest.approx([0.3, 0.725, 0.325])
    ranked = [(1.0 + 0.0) / 2, (0.25 + 1.0) / 2, (0.25 + 0.5) / 2]
    assert aggregate(judges, "rank_mean") == pytest.approx(ranked)
    # One trajectory: no ordering, so the mean.
    assert aggregate([[0.4], [0.8]], "rank_mean") == pytest.approx([0.6])
    assert agreement(judges) == pytest.approx([0.4, 0.45, 0.75])
    with pytest.raises(ValueError, match="'mean' or 'rank_mean'"):
        aggregate(judges, "median")


# --- ensembles over HTTP ---


async def test_two_agreeing_judges_are_averaged_and_agree(
    scripted: dict[str, ScriptedJudge], tmp_path: Path
) -> None:
    cautious, confident = scripted["cautious"], scripted["confident"]
    scored = await aa.ruler_score_group(quiz(), judges=[cautious.model, confident.model], cache=tmp_path)

    # Each judge got exactly one request, and the same prompt.
    (first,), (second,) = cautious.server.requests, confident.server.requests
    assert first["messages"] == second["messages"]
    ruler = scored.metadata["ruler"]
    assert ruler["status"] == "scored" and ruler["aggregate"] == "mean" and ruler["cache_hit"] is False
    assert ruler["judges"] == [judge_identity(cautious.model), judge_identity(confident.model)]
    # cautious [0.6, 0.45, 0.45], confident ranks t1 > t3 > t2: 2 concordant pairs, 1 tied in cautious.
    assert ruler["kendall_tau"] == pytest.approx(2 / 6**0.5)
    ids = [j["id"] for j in ruler["judges"]]
    for trajectory in scored.trajectories:
        entries = trajectory.metadata["ruler_judges"]
        assert [e["judge"] for e in entries] == ids
        judged = [e["score"] for e in entries]
        assert trajectory.metrics["ruler_score"] == pytest.approx(sum(judged) / 2) == trajectory.reward
        assert trajectory.metrics["judge_agreement"] == pytest.approx(1 - (max(judged) - min(judged)))
        assert trajectory.metrics["judge_agreement"] > 0.9  # they agree to within 0.1 everywhere
    assert [e["score"] for e in scored.trajectories[0].metadata["ruler_judges"]] == [0.6, 0.55]
    assert [t.metrics["independent_reward"] for t in scored.trajectories] == [1.0, 0.0, 0.0]
    assert scored.trajectories[0].metadata["ruler_explanation"] == "cautious: judged t1\nconfident: judged t1"
    assert "(mean of 2 judges, agreement 0.95)" in scored.trajectories[0].logs[-1]


async def test_disagreeing_judges_show_in_agreement_and_tau(
    scripted: dict[str, ScriptedJudge], tmp_path: Path
) -> None:
    scored = await aa.ruler_score_group(
        quiz(), judges=[scripted["cautious"].model, scripted["contrary"].model], cache=tmp_path
    )
    assert scored.metadata["ruler"]["kendall_tau"] == pytest.approx(-1.0)
    agreement = [t.metrics["judge_agreement"] for t in scored.trajectories]
    assert agreement == pytest.approx([1 - 0.5, 1 - 0.35, 1 - 0.35])


async def test_rank_mean_resists_a_judge_that_rewards_length(
    scripted: dict[str, ScriptedJudge], tmp_path: Path
) -> None:
    """Two cautious judges prefer the right answer by small margins; one rewards length by a large one."""
    judges = [scripted[name].model for name in ("cautious", "confident", "by-length")]
    by_mean = await aa.ruler_score_group(quiz(), judges=judges, cache=tmp_path)
    by_rank = await aa.ruler_score_group(quiz(), judges=judges, aggregate="rank_mean", cache=tmp_path)

    # The mean is fooled: the long wrong answer wins on the length judge's margin.
    assert max(range(3), key=lambda i: by_mean.rewards[i]) == 1
    # The rank mean is not: ranks cautious (1, .25, .25), confident (1, 0, .5), by-length (.5, 1, 0).
    assert by_rank.rewards == pytest.approx([2.5 / 3, 1.25 / 3, 0.75 / 3])
    assert by_rank.metadata["ruler"]["aggregate"] == "rank_mean"
    # The second scoring was answered from each judge's cache: the aggregate is not part of a verdict.
    assert all(len(scripted[n].server.requests) == 1 for n in ("cautious", "confident", "by-length"))
    assert by_rank.metadata["ruler"]["cache_hit"] is True and by_rank.metadata["ruler"]["cache_hits"] == 3
    # The long answer is where the judges disagree most.
    worst = min(by_rank.trajectories, key=lambda t: t.metrics["judge_agreement"])
    assert worst.id == by_rank.trajectories[1].id and worst.metrics["judge_agreement"] < 0.5


async def test_one_judge_sampled_k_times_is_an_ensemble_cached_per_sample(
    scripted: dict[str, ScriptedJudge], tmp_path: Path
) -> None:
    drifting = scripted["drifting"]
    group = make_group(answer("The answer is 5."), answer("It is 7."))
    scored = await aa.ruler_score_group(group, judge=drifting.model, samples=3, cache=tmp_path)

    assert len(drifting.server.requests) == 3  # three samples, three calls, one prompt
    assert len({str(body["messages"]) for body in drifting.server.requests}) == 1
    ruler = scored.metadata["ruler"]
    assert len(ruler["judges"]) == 3 and all(j == ruler["judges"][0] for j in ruler["judges"])
    assert ruler["judges"][0]["samples"] == 3
    entries = scored.trajectories[0].metadata["ruler_judges"]
    assert sorted(e["sample"] for e in entries) == [0, 1, 2]
    assert sorted(e["score"] for e in entries) == pytest.approx([0.4, 0.5, 0.6])  # the drift, 0.1 per call
    assert scored.rewards == pytest.approx([0.5, 0.35])
    assert scored.trajectories[0].metrics["judge_agreement"] == pytest.approx(0.8)

    # Each sample is cached under its own index: scoring again asks nothing and gives the same scores.
    again = await aa.ruler_score_group(group, judge=drifting.model, samples=3, cache=tmp_path)
    assert len(drifting.server.requests) == 3
    assert again.metadata["ruler"]["cache_hits"] == 3
    assert again.trajectories[0].metadata["ruler_judges"] == entries
    # The same judge unsampled is another identity: it shares no entry with the samples.
    single = await aa.ruler_score_group(group, judge=drifting.model, cache=tmp_path)
    assert len(drifting.server.requests) == 4 and single.metadata["ruler"]["cache_hit"] is False
    assert "judge_agreement" not in single.trajectories[0].metrics  # one judge: no ensemble fields
    assert "ruler_judges" not in single.trajectories[0].metadata
    assert "kendall_tau" not in single.metadata["ruler"]


async def test_cache_and_dedup_work_per_judge(scripted: dict[str, ScriptedJudge], tmp_path: Path) -> None:
    cautious, contrary = scripted["cautious"], scripted["contrary"]
    # t1 and t3 are identical: each judge reads them once and scores them alike.
    group = make_group(answer("The answer is 5."), answer("It is 7."), answer("The answer is 5."))
    alone = await aa.ruler_score_group(group, judge=cautious.model, cache=tmp_path)
    ensemble = await aa.ruler_score_group(group, judges=[cautious.model, contrary.model], cache=tmp_path)

    # The cautious judge alone and inside the ensemble is one identity: its answer came from the cache.
    assert len(cautious.server.requests) == 1 and len(contrary.server.requests) == 1
    assert ensemble.metadata["ruler"]["cache_hits"] == 1 and ensemble.metadata["ruler"]["cache_hit"] is False
    assert len(trajectory_blocks(contrary.server.requests[0])) == 2
    assert ensemble.metadata["ruler"]["distinct_trajectories"] == 2
    assert ensemble.rewards[0] == ensemble.rewards[2]
    assert [e["score"] for e in ensemble.trajectories[0].metadata["ruler_judges"]] == [alone.rewards[0], 0.1]


async def test_per_turn_scores_of_an_ensemble_are_averaged(
    scripted: dict[str, ScriptedJudge], tmp_path: Path
) -> None:
    scored = await aa.ruler_score_group(
        quiz(), judges=[scripted["cautious"].model, scripted["contrary"].model], per_turn=True, cache=tmp_path
    )
    assert scored.trajectories[0].metadata["turn_rewards"] == pytest.approx([(0.6 + 0.1) / 2])
    assert scored.trajectories[1].metadata["turn_rewards"] == pytest.approx([(0.45 + 0.8) / 2])


async def test_one_failing_judge_fails_the_group(
    scripted: dict[str, ScriptedJudge], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    broken = scripted["contrary"]
    broken.server.reset(default={"content": "no idea"})
    judges = [scripted["cautious"].model, broken.model]
    with pytest.raises(aa.JudgeError, match="contrary"):
        await aa.ruler_score_group(quiz(), judges=judges, max_retries=1, cache=tmp_path)
    assert len(broken.server.requests) == 2

    with caplog.at_level(logging.WARNING):
        kept = await aa.ruler_score_group(
            quiz(), judges=judges, max_retries=0, swallow_exceptions=True, cache=tmp_path
        )
    assert kept.metadata["ruler"]["status"] == "unscored"
    assert "not valid JSON" in kept.metadata["ruler"]["reason"]
    assert [j["model"] for j in kept.metadata["ruler"]["judges"]] == ["cautious", "contrary"]
    assert kept.rewards == [1.0, 0.0, 0.0]  # untouched, not silently zeroed
    assert all("ruler_score" not in t.metrics for t in kept.trajectories)


async def test_score_groups_takes_judges(scripted: dict[str, ScriptedJudge], tmp_path: Path) -> None:
    cautious, confident = scripted["cautious"], scripted["confident"]
    groups = [quiz(), make_group(answer("It is 7."), answer("The answer is 5.")), aa.TrajectoryGroup()]
    scored = await aa.ruler_score_groups(
        groups, judges=[cautious.model, confident.model], max_concurrency=1, cache=tmp_path
    )
    assert [g.id for g in scored] == [g.id for g in groups]
    assert [g.metadata["ruler"]["status"] for g in scored] == ["scored", "scored", "unscored"]
    assert scored[1].rewards == pytest.approx([(0.45 + 0.5) / 2, (0.6 + 0.55) / 2])
    assert len(cautious.server.requests) == 2 and len(confident.server.requests) == 2
    assert len(scored[2].metadata["ruler"]["judges"]) == 2


async def test_bad_ensemble_arguments(scripted: dict[str, ScriptedJudge]) -> None:
    cautious = scripted["cautious"].model
    with pytest.raises(ConfigError, match="not both"):
        await aa.ruler_score_group(quiz(), judge=cautious, judges=[cautious])
    with pytest.raises(ConfigError, match="judges is empty"):
        await aa.ruler_score_groups([quiz()], judges=[])
    with pytest.raises(ConfigError, match="must be a list of judges"):
        await aa.ruler_score_group(quiz(), judges="openai/gpt-4.1-mini")
    with pytest.raises(ConfigError, match="same judge.*samples=k"):
        await aa.ruler_score_group(quiz(), judges=[cautious, scripted["cautious"].chat()])
    with pytest.raises(ConfigError, match="aggregate"):
        await aa.ruler_score_group(quiz(), judges=[cautious], aggregate="median")
    with pytest.raises(ConfigError, match="samples"):
        await aa.ruler_score_group(quiz(), judge=cautious, samples=0)
    assert not scripted["cautious"].server.requests  # nothing was sent
