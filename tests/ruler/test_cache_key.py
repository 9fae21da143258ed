"""The RULER cache key covers every judge setting that changes the verdict, not only its name."""

from __future__ import annotations

from pathlib import Path

from langchain_openai import ChatOpenAI

import art_adapters as aa
from tests.helpers.judge_server import JudgeServer
from tests.ruler.test_score import answer, make_group


async def test_a_judge_with_other_sampling_settings_misses_the_cache(
    server: JudgeServer, tmp_path: Path
) -> None:
    def judge(**settings: object) -> ChatOpenAI:
        return ChatOpenAI(
            base_url=server.url, api_key="test", model="scripted-judge", max_retries=0, **settings
        )

    group = make_group(answer("5"), answer("6"))
    await aa.ruler_score_group(group, judge=judge(temperature=0), cache=tmp_path)
    again = await aa.ruler_score_group(group, judge=judge(temperature=0), cache=tmp_path)
    assert again.metadata["ruler"]["cache_hit"] is True and len(server.requests) == 1

    # Same model name and endpoint, but a hotter judge, or one with another reasoning budget: a new verdict.
    hot = await aa.ruler_score_group(group, judge=judge(temperature=1.0), cache=tmp_path)
    assert hot.metadata["ruler"]["cache_hit"] is False
    effort = await aa.ruler_score_group(
        group, judge=judge(temperature=0, reasoning_effort="high"), cache=tmp_path
    )
    assert effort.metadata["ruler"]["cache_hit"] is False
    assert len(server.requests) == 3
    assert hot.metadata["ruler"]["judge"] == again.metadata["ruler"]["judge"]  # the name shown stays short


def test_the_api_key_is_not_part_of_the_key(server: JudgeServer) -> None:
    from art_adapters.ruler._judges import LangChainJudge

    def judge(key: str) -> LangChainJudge:
        return LangChainJudge(
            ChatOpenAI(base_url=server.url, api_key=key, model="scripted-judge", temperature=0)
        )

    assert judge("sk-one").cache_id == judge("sk-two").cache_id
    assert "sk-one" not in judge("sk-one").cache_id
