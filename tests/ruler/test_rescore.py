"""Scoring a group RULER already scored (another rubric, another judge) keeps the original reward."""

from __future__ import annotations

from pathlib import Path

from langchain_openai import ChatOpenAI

import art_adapters as aa
from tests.helpers.judge_server import JudgeServer, scores
from tests.ruler.test_score import answer, make_group


async def test_rescoring_keeps_the_independent_reward(
    server: JudgeServer, judge: ChatOpenAI, tmp_path: Path
) -> None:
    group = make_group(answer("5"), answer("6"), rewards=[1.0, 0.0])
    server.reset(
        [{"content": scores([("t1", 0.9), ("t2", 0.2)])}, {"content": scores([("t1", 0.6), ("t2", 0.4)])}]
    )
    first = await aa.ruler_score_group(group, judge=judge, cache=tmp_path)
    second = await aa.ruler_score_group(first, judge=judge, rubric="Shorter is better.", cache=tmp_path)
    assert second.rewards == [0.6, 0.4]
    # The hand-written reward, not the first judge's score, is what combine_rewards mixes in.
    assert [t.metrics["independent_reward"] for t in second.trajectories] == [1.0, 0.0]
    mixed = aa.combine_rewards(second, {"ruler_score": 0.5, "independent_reward": 0.5})
    assert mixed.rewards == [0.8, 0.2]


async def test_rescoring_without_an_independent_reward_invents_none(
    server: JudgeServer, judge: ChatOpenAI, tmp_path: Path
) -> None:
    group = make_group(answer("5"), answer("6"))
    first = await aa.ruler_score_group(group, judge=judge, cache=tmp_path)
    second = await aa.ruler_score_group(first, judge=judge, rubric="Shorter is better.", cache=tmp_path)
    assert all("independent_reward" not in t.metrics for t in second.trajectories)
