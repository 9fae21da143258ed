"""Credentials in a judge's endpoint or settings never reach the cache files, the metadata or a cache key."""

from __future__ import annotations

from pathlib import Path

from langchain_openai import ChatOpenAI

import art_adapters as aa
from art_adapters.ruler._judges import LangChainJudge, _with_settings
from tests.helpers.judge_server import JudgeServer
from tests.ruler.test_score import answer, make_group

SECRET = "hunter2-secret"


def _with_userinfo(url: str) -> str:
    return url.replace("http://", f"http://judge-user:{SECRET}@", 1)


async def test_a_base_url_password_stays_out_of_cache_files_and_metadata(
    server: JudgeServer, tmp_path: Path
) -> None:
    judge = ChatOpenAI(base_url=_with_userinfo(server.url), api_key="test", model="scripted-judge",
                       max_retries=0, temperature=0)  # fmt: skip
    scored = await aa.ruler_score_group(make_group(answer("5"), answer("6")), judge=judge, cache=tmp_path)
    assert scored.metadata["ruler"]["status"] == "scored"
    assert scored.metadata["ruler"]["judge"] == f"ChatOpenAI:scripted-judge@{server.url}"
    assert SECRET not in scored.model_dump_json()
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert files and not any(SECRET in p.read_text() for p in files)


async def test_an_unreachable_judge_error_does_not_quote_the_password(tmp_path: Path) -> None:
    judge = ChatOpenAI(base_url=f"http://judge-user:{SECRET}@127.0.0.1:9/v1", api_key="x", model="j",
                       max_retries=0, timeout=5)  # fmt: skip
    scored = await aa.ruler_score_group(
        make_group(answer("5"), answer("6")), judge=judge, cache=False, max_retries=0, swallow_exceptions=True
    )
    assert scored.metadata["ruler"]["status"] == "unscored" and SECRET not in scored.model_dump_json()


def test_headers_extra_body_and_credentials_never_shape_the_cache_key(server: JudgeServer) -> None:
    def judge(**settings: object) -> LangChainJudge:
        return LangChainJudge(ChatOpenAI(model="scripted-judge", temperature=0, max_retries=0, **settings))

    plain = judge(base_url=server.url, api_key="one").cache_id
    assert judge(base_url=_with_userinfo(server.url), api_key="two").cache_id == plain
    assert judge(base_url=server.url, api_key="one", default_headers={"X-Key": SECRET}).cache_id == plain
    assert judge(base_url=server.url, api_key="one", extra_body={"token": SECRET}).cache_id == plain
    assert judge(base_url=server.url, api_key="one", model_kwargs={"extra_headers": {"A": SECRET}}).cache_id == plain
    assert judge(base_url=server.url, api_key="one", max_tokens=64).cache_id != plain  # a budget still does

    cloud = {"aws_access_key_id": "AKIA", "aws_secret_access_key": SECRET, "aws_session_token": SECRET,
             "azure_ad_token": SECRET, "vertex_credentials": SECRET, "api_key": SECRET,
             "api_base": f"https://u:{SECRET}@h", "extra_headers": {"k": SECRET}, "extra_body": {"k": SECRET}}  # fmt: skip
    assert _with_settings("litellm:m", cloud) == "litellm:m"
    assert _with_settings("litellm:m", {"max_tokens": 5, "temperature": 0}) != "litellm:m"
