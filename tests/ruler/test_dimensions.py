"""RULER with rubric dimensions against scripted judges on 127.0.0.1: the prompt and schema, a score per
dimension validated and retried like any score, the weighted reward, the per-dimension metrics."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from langchain_openai import ChatOpenAI

import art_adapters as aa
from art_adapters._errors import ConfigError
from art_adapters.observe import MetricsHistory, group_metrics
from art_adapters.ruler import RulerConfig, build_request
from art_adapters.ruler._answer import InvalidAnswer, parse_answer
from tests.helpers.judge_server import JudgeServer
from tests.ruler.conftest import ScriptedJudge, is_correct, request_dimensions, trajectory_blocks, verdict_by
from tests.ruler.test_score import answer, make_group

DIMENSIONS = {"correctness": 3.0, "efficiency": 1.0}
RUBRICS = {"correctness": "the final answer is 5", "efficiency": "no wasted words or steps"}


def graded(block: str) -> dict[str, float]:
    """Right answers are correct, short ones efficient."""
    return {"correctness": 1.0 if is_correct(block) else 0.0, "efficiency": 1.0 if len(block) < 100 else 0.2}


def dimensional(entries: dict[str, Any]) -> str:
    """A dimensions answer: trajectory id -> its dimensions object (or whatever the test needs)."""
    return json.dumps(
        {
            "scores": [
                {"trajectory_id": i, "explanation": f"why {i}", "dimensions": d} for i, d in entries.items()
            ]
        }
    )


def quiz() -> aa.TrajectoryGroup:
    """t1 right and short, t2 right and long-winded, t3 wrong and short."""
    return make_group(
        answer("The answer is 5."), answer("Hmm, let me think. " * 8 + "The answer is 5."), answer("It is 7.")
    )


async def test_each_dimension_is_scored_kept_and_weighted_into_the_reward(
    server: JudgeServer, judge: ChatOpenAI, tmp_path: Path
) -> None:
    server.reset(default=verdict_by(graded))
    scored = await aa.ruler_score_group(
        quiz(), judge=judge, dimensions=DIMENSIONS, dimension_rubrics=RUBRICS, cache=tmp_path
    )

    (body,) = server.requests
    system = body["messages"][0]["content"]
    assert "- correctness: the final answer is 5\n- efficiency: no wasted words or steps" in system
    assert request_dimensions(body) == ["correctness", "efficiency"]
    item = body["response_format"]["json_schema"]["schema"]["properties"]["scores"]["items"]
    assert "score" not in item["properties"]
    assert item["required"] == ["trajectory_id", "explanation", "dimensions"]
    assert '"dimensions": {"correctness": <0..1>, "efficiency": <0..1>}' in body["messages"][1]["content"]

    right, verbose, wrong = scored.trajectories
    assert right.metrics["ruler_correctness"] == 1.0 and right.metrics["ruler_efficiency"] == 1.0
    assert verbose.metrics["ruler_correctness"] == 1.0 and verbose.metrics["ruler_efficiency"] == 0.2
    assert wrong.metrics["ruler_correctness"] == 0.0 and wrong.metrics["ruler_efficiency"] == 1.0
    # ruler_score (and the reward) is the weighted mean: (3 * correctness + 1 * efficiency) / 4.
    assert scored.rewards == pytest.approx([1.0, (3 + 0.2) / 4, 0.25])
    assert [t.metrics["ruler_score"] for t in scored.trajectories] == scored.rewards
    assert scored.metadata["ruler"]["dimensions"] == DIMENSIONS

    # Cached with its dimensions: scoring again asks nothing and gives the same metrics.
    again = await aa.ruler_score_group(
        quiz(), judge=judge, dimensions=DIMENSIONS, dimension_rubrics=RUBRICS, cache=tmp_path
    )
    assert len(server.requests) == 1 and again.metadata["ruler"]["cache_hit"] is True
    assert [t.metrics for t in again.trajectories] == [t.metrics for t in scored.trajectories]
    # Other weights make another reward: a new identity, a new verdict (never the cached one reweighted).
    await aa.ruler_score_group(
        quiz(), judge=judge, dimensions={"correctness": 1.0, "efficiency": 1.0},
        dimension_rubrics=RUBRICS, cache=tmp_path,
    )  # fmt: skip
    assert len(server.requests) == 2

    # Scored again with one score per trajectory: no dimension metric of the old rubric stays behind.
    server.reset()
    plain = await aa.ruler_score_group(scored, judge=judge, cache=tmp_path)
    assert sorted(plain.trajectories[0].metrics) == ["ruler_score"]
    assert "dimensions" not in plain.metadata["ruler"]


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        ({"correctness": 1.0}, "t1 has no score for dimension(s) efficiency"),
        ({"correctness": 1.0, "efficiency": 0.5, "style": 1.0}, "t1 scores unknown dimension(s) 'style'"),
        ({"correctness": 1.5, "efficiency": 0.5}, "correctness of t1 has score 1.5, outside [0, 1]"),
        ({"correctness": "high", "efficiency": 0.5}, "correctness of t1 must have a number as score"),
        (0.9, "t1 needs a dimensions object"),
    ],
)
async def test_a_bad_dimension_is_fed_back_and_retried(
    server: JudgeServer, judge: ChatOpenAI, tmp_path: Path, bad: Any, reason: str
) -> None:
    good = {"correctness": 1.0, "efficiency": 0.5}
    server.reset(
        [
            {"content": dimensional({"t1": bad, "t2": good})},
            {"content": dimensional({"t1": good, "t2": good})},
        ]
    )
    group = make_group(answer("5"), answer("6"))
    scored = await aa.ruler_score_group(group, judge=judge, dimensions=DIMENSIONS, cache=tmp_path)

    assert len(server.requests) == 2 and scored.metadata["ruler"]["attempts"] == 2
    feedback = server.requests[1]["messages"][-1]["content"]
    assert reason in feedback
    assert "a dimensions object giving every one of correctness, efficiency a score from 0 to 1" in feedback
    assert scored.rewards == [0.875, 0.875]


async def test_a_dimension_still_wrong_after_the_retries_raises_or_leaves_the_group_unscored(
    server: JudgeServer, judge: ChatOpenAI, tmp_path: Path
) -> None:
    missing = {"content": dimensional({"t1": {"correctness": 1.0}, "t2": {"correctness": 0.0}})}
    server.reset(default=missing)
    group = make_group(answer("5"), answer("6"), rewards=[1.0, 0.0])
    with pytest.raises(aa.JudgeError, match=r"after 2 attempt\(s\).*no score for dimension\(s\) efficiency"):
        await aa.ruler_score_group(group, judge=judge, dimensions=DIMENSIONS, max_retries=1, cache=tmp_path)

    kept = await aa.ruler_score_group(
        group, judge=judge, dimensions=DIMENSIONS, max_retries=0, swallow_exceptions=True, cache=tmp_path
    )
    assert kept.metadata["ruler"]["status"] == "unscored" and kept.rewards == [1.0, 0.0]
    assert all(not any(k.startswith("ruler_") for k in t.metrics) for t in kept.trajectories)


async def test_an_ensemble_averages_each_dimension(
    scripted: dict[str, ScriptedJudge], tmp_path: Path
) -> None:
    strict, lenient = scripted["cautious"], scripted["contrary"]
    strict.server.reset(default=verdict_by(graded))
    lenient.server.reset(default=verdict_by(lambda block: {"correctness": 0.5, "efficiency": 0.5}))
    scored = await aa.ruler_score_group(
        quiz(), judges=[strict.model, lenient.model], dimensions=DIMENSIONS, cache=tmp_path
    )
    right, verbose, _ = scored.trajectories
    assert verbose.metrics["ruler_correctness"] == pytest.approx(0.75)
    assert verbose.metrics["ruler_efficiency"] == pytest.approx(0.35)
    judged = [e["score"] for e in verbose.metadata["ruler_judges"]]
    assert judged == pytest.approx([3.2 / 4, 0.5])
    assert verbose.metadata["ruler_judges"][0]["dimensions"] == {"correctness": 1.0, "efficiency": 0.2}
    assert verbose.reward == pytest.approx((3.2 / 4 + 0.5) / 2)
    assert right.metrics["judge_agreement"] == pytest.approx(0.5)


async def test_dimension_metrics_reach_the_metrics_history(
    server: JudgeServer, judge: ChatOpenAI, tmp_path: Path
) -> None:
    server.reset(default=verdict_by(graded))
    scored = await aa.ruler_score_group(quiz(), judge=judge, dimensions=DIMENSIONS, cache=False)
    row = group_metrics([scored])
    assert row["ruler_correctness_mean"] == pytest.approx(2 / 3)
    assert row["ruler_efficiency_mean"] == pytest.approx((1 + 0.2 + 1) / 3)
    history = MetricsHistory(tmp_path / "metrics.jsonl")
    history.append(0, row)
    assert history.series("ruler_correctness_mean", "train") == ([0], [pytest.approx(2 / 3)])


def test_parse_answer_with_dimensions_computes_the_weighted_score() -> None:
    text = dimensional({"t1": {"correctness": "0.5", "efficiency": 1}})
    (verdict,) = parse_answer(text, ["t1"], dimensions={"correctness": 1.0, "efficiency": 3.0}).values()
    assert verdict.dimensions == {"correctness": 0.5, "efficiency": 1.0}
    assert verdict.score == pytest.approx((0.5 + 3.0) / 4)
    with pytest.raises(InvalidAnswer, match="needs a dimensions object"):
        one_score = json.dumps({"scores": [{"trajectory_id": "t1", "score": 1}]})
        parse_answer(one_score, ["t1"], dimensions=DIMENSIONS)


def test_without_dimensions_the_prompt_and_schema_are_unchanged() -> None:
    group = make_group(answer("5"), answer("6"))
    plain = build_request(group, "rubric", max_explanation_chars=400)
    assert build_request(group, "rubric", max_explanation_chars=400, dimensions=None) == plain
    assert "dimensions" not in json.dumps(plain.schema) and "dimension" not in plain.messages[0]["content"]
    with_dims = build_request(group, "rubric", dimensions=DIMENSIONS)
    trajectories = plain.messages[1]["content"].rsplit("Score every", 1)[0]
    assert with_dims.messages[1]["content"].startswith(trajectories)
    assert len(trajectory_blocks({"messages": with_dims.messages})) == 2


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"dimensions": {}}, "at least one dimension"),
        ({"dimensions": {"Correctness": 1}}, "lowercase identifier"),
        ({"dimensions": {"score": 1}}, "other than 'score'"),
        ({"dimensions": {"correctness": 0}}, "finite number > 0"),
        ({"dimensions": {"correctness": float("inf")}}, "finite number > 0"),
        ({"dimension_rubrics": {"correctness": "right"}}, "needs dimensions"),
        (
            {"dimensions": {"correctness": 1}, "dimension_rubrics": {"speed": "fast"}},
            "'speed', which dimensions lacks",
        ),
    ],
)
async def test_bad_dimension_settings_say_what_to_change(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RulerConfig(**settings)
    with pytest.raises(ConfigError, match=message):  # checked before any judge is asked
        await aa.ruler_score_group(make_group(answer("5")), judge="not/installed", **settings)
