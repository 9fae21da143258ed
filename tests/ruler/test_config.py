"""RulerConfig: one settings object for ruler_score_group(s) and the loop's RULER scorers; keyword
settings override it; a bad setting is a ConfigError carrying pydantic's message."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from langchain_openai import ChatOpenAI

import art_adapters as aa
from art_adapters._scorers import ruler_scorer, unscored_reason
from art_adapters.ruler import DEFAULT_RUBRIC, RulerCache


def group() -> aa.TrajectoryGroup:
    prefix = [aa.Message(role="user", content="What is 2 + 3?")]
    return aa.TrajectoryGroup(
        trajectories=[
            aa.Trajectory(messages=[*prefix, aa.Message(role="assistant", content=text)])
            for text in ("5", "6")
        ]
    )


def verdict(first: float, second: float) -> dict[str, Any]:
    pairs = [("t1", first), ("t2", second)]
    entries = [{"trajectory_id": i, "explanation": "e", "score": s} for i, s in pairs]
    return {"content": json.dumps({"scores": entries})}


def test_defaults_and_cache_forms(tmp_path: Path) -> None:
    config = aa.RulerConfig()
    assert (config.rubric, config.judge_timeout_s, config.max_retries, config.max_concurrency) == (
        DEFAULT_RUBRIC, 120.0, 2, 4
    )  # fmt: skip
    assert isinstance(config.cache_store(), RulerCache)
    assert aa.RulerConfig(cache=False).cache_store() is None
    assert aa.RulerConfig(cache=None).cache_store() is None
    assert aa.RulerConfig(cache=str(tmp_path)).cache_store().directory == tmp_path  # type: ignore[union-attr]
    store = RulerCache(tmp_path)
    assert aa.RulerConfig(cache=store).cache_store() is store


@pytest.mark.parametrize(
    ("settings", "match"),
    [
        ({"max_retries": -1}, "max_retries"),
        ({"max_retries": True}, "max_retries"),
        ({"judge_timeout_s": 0}, "judge_timeout_s"),
        ({"max_explanation_chars": 0}, "max_explanation_chars"),
        ({"max_concurrency": 0}, "max_concurrency"),
        ({"structured": "xml"}, "structured"),
        ({"cache": 3}, "cache"),
        ({"rubric": "  "}, "rubric"),
        ({"max_retrys": 1}, "max_retrys"),  # a misspelt setting
        ({"config": {"max_retries": 1}}, "RulerConfig"),
    ],
)
async def test_bad_settings_are_config_errors(settings: dict[str, Any], match: str) -> None:
    judge = ChatOpenAI(api_key="x")
    with pytest.raises(aa.ConfigError, match=match):
        await aa.ruler_score_group(group(), judge, **settings)
    with pytest.raises(aa.ConfigError, match=match):
        await aa.ruler_score_groups([group()], judge, **settings)


async def test_keyword_settings_and_the_rubric_override_the_config(server: Any, judge: ChatOpenAI) -> None:
    config = aa.RulerConfig(rubric="Prefer French.", cache=False, max_retries=0, swallow_exceptions=True)
    server.reset([verdict(0.2, 0.8)])
    scored = await aa.ruler_score_group(group(), judge, config=config)
    assert scored.rewards == [0.2, 0.8]
    assert "Prefer French." in server.requests[0]["messages"][0]["content"]

    server.reset([verdict(0.4, 0.6)])
    await aa.ruler_score_group(group(), judge, "Prefer German.", config=config)
    assert "Prefer German." in server.requests[0]["messages"][0]["content"]

    server.reset([{"content": "not json"}] * 3)
    unscored = await aa.ruler_score_group(group(), judge, config=config)  # swallowed, one attempt
    assert unscored.metadata["ruler"]["status"] == "unscored" and len(server.requests) == 1
    server.reset([{"content": "not json"}] * 3)
    with pytest.raises(aa.JudgeError):
        await aa.ruler_score_group(group(), judge, config=config, swallow_exceptions=False, max_retries=1)
    assert len(server.requests) == 2
    assert config.max_retries == 0  # the caller's config is unchanged


async def test_the_loop_scorer_takes_a_ruler_config(server: Any, judge: ChatOpenAI) -> None:
    server.reset([verdict(0.3, 0.7)])
    score = ruler_scorer(judge, aa.RulerConfig(cache=False, reward_weights={"ruler_score": 1.0}))
    (scored,) = await score([group()], [None])
    assert scored.rewards == [0.3, 0.7] and scored.metadata["reward_weights"] == {"ruler_score": 1.0}

    server.reset([{"content": "not json"}])
    (unscored,) = await ruler_scorer(judge, aa.RulerConfig(cache=False), max_retries=0)([group()], [None])
    assert (unscored_reason(unscored) or "").startswith("judge:")  # the loop's scorer swallows by default

    server.reset([{"content": "not json"}])
    strict = ruler_scorer(judge, aa.RulerConfig(cache=False, max_retries=0, swallow_exceptions=False))
    with pytest.raises(aa.JudgeError):
        await strict([group()], [None])
    with pytest.raises(aa.ConfigError, match="max_retries"):
        ruler_scorer(judge, max_retries=-1)  # checked when the scorer is made, not at the first step
