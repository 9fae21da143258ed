"""structured='auto' against an OpenAI-compatible endpoint that rejects json_schema response formats."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_openai import ChatOpenAI

import art_adapters as aa
from tests.helpers.judge_server import JudgeServer, good_answer
from tests.ruler.test_score import answer, make_group


def rejects_response_format(body: dict[str, Any]) -> dict[str, Any]:
    """Like llama.cpp / TGI builds without json_schema support: 400 on a response_format."""
    return {"status": 400} if "response_format" in body else good_answer(body)


async def test_auto_falls_back_to_plain_json_when_the_endpoint_rejects_the_schema(
    server: JudgeServer, judge: ChatOpenAI
) -> None:
    server.reset(default=rejects_response_format)
    scored = await aa.ruler_score_group(make_group(answer("5"), answer("6")), judge=judge, cache=False)
    assert scored.metadata["ruler"]["status"] == "scored"
    assert scored.rewards == [1.0, 0.5]
    assert "response_format" in server.requests[0] and "response_format" not in server.requests[-1]


async def test_json_schema_mode_does_not_fall_back(server: JudgeServer, judge: ChatOpenAI) -> None:
    server.reset(default=rejects_response_format)
    with pytest.raises(aa.JudgeError):
        await aa.ruler_score_group(
            make_group(answer("5"), answer("6")),
            judge=judge,
            structured="json_schema",
            max_retries=0,
            cache=False,
        )
    assert all("response_format" in body for body in server.requests)
