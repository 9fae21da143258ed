"""Every RULER score records who judged it; the cache never crosses judge identities (while a single
judge's old entries stay valid); a run whose judge changes mid-way says so (JudgeChangeMonitor)."""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

import pytest
from langchain_openai import ChatOpenAI

import art_adapters as aa
from art_adapters.ruler import (
    DEFAULT_RUBRIC,
    JudgeChangeMonitor,
    RulerCache,
    RulerConfig,
    build_request,
    judge_identity,
)
from art_adapters.ruler._judges import LangChainJudge
from tests.helpers.judge_server import JudgeServer
from tests.ruler.conftest import ScriptedJudge
from tests.ruler.test_score import answer, make_group


def chat(url: str, api_key: str = "test", **settings: object) -> ChatOpenAI:
    return ChatOpenAI(base_url=url, api_key=api_key, model="judge-x", **settings)  # type: ignore[arg-type]


def test_the_identity_names_model_endpoint_sampling_and_rubric_without_credentials() -> None:
    url = "https://alice:hunter2-secret@judge.example:8443/v1?api-key=hunter2-secret&region=eu"
    identity = judge_identity(chat(url, temperature=0.3, api_key="sk-hunter2-secret"), RulerConfig(samples=2))
    assert set(identity) == {"model", "endpoint", "temperature", "samples", "rubric_sha256", "id"}
    assert identity["model"] == "judge-x"
    assert identity["endpoint"] == "https://judge.example:8443/v1"  # no userinfo, no query
    assert identity["temperature"] == 0.3 and identity["samples"] == 2
    assert identity["rubric_sha256"] == hashlib.sha256(DEFAULT_RUBRIC.encode()).hexdigest()[:16]
    assert "hunter2" not in str(identity)
    assert len(identity["id"]) == 12

    local = chat("http://127.0.0.1:9/v1", temperature=0)
    base = judge_identity(local)
    assert base == judge_identity(chat("http://127.0.0.1:9/v1", temperature=0, api_key="other-key"))  # stable
    assert base["temperature"] == 0.0 and base["samples"] == 1
    assert judge_identity(chat("http://127.0.0.1:9/v1"))["temperature"] is None  # the judge sets none
    others = [
        judge_identity(chat("http://127.0.0.1:9/v1", temperature=0.7)),
        judge_identity(chat("http://127.0.0.1:9/v1", temperature=0, max_tokens=64)),  # any verdict setting
        judge_identity(chat("http://127.0.0.1:8/v1", temperature=0)),
        judge_identity(local, RulerConfig(rubric="Shorter is better.")),
        judge_identity(local, RulerConfig(samples=3)),
        judge_identity(local, RulerConfig(dimensions={"correctness": 1})),
        judge_identity(local, RulerConfig(dimensions={"correctness": 2})),
    ]
    assert len({base["id"], *(o["id"] for o in others)}) == 1 + len(others)
    assert others[5]["rubric_sha256"] != base["rubric_sha256"] != others[3]["rubric_sha256"]
    assert judge_identity(LangChainJudge(chat("http://127.0.0.1:9/v1", temperature=0))) == base


async def test_every_scored_and_unscored_group_carries_its_judges_identity(
    server: JudgeServer, judge: ChatOpenAI, tmp_path: Path
) -> None:
    group = make_group(answer("5"), answer("6"))
    scored = await aa.ruler_score_group(group, judge=judge, cache=tmp_path)
    assert scored.metadata["ruler"]["judges"] == [judge_identity(judge)]
    assert scored.metadata["ruler"]["judges"][0]["endpoint"] == server.url
    cached = await aa.ruler_score_group(group, judge=judge, cache=tmp_path)
    assert cached.metadata["ruler"]["cache_hit"] is True
    assert cached.metadata["ruler"]["judges"] == scored.metadata["ruler"]["judges"]

    server.reset(default={"content": "no"})
    failed = await aa.ruler_score_group(
        make_group(answer("7")), judge=judge, rubric="Be strict.", max_retries=0, swallow_exceptions=True,
        cache=tmp_path,
    )  # fmt: skip
    assert failed.metadata["ruler"]["status"] == "unscored"
    assert failed.metadata["ruler"]["judges"] == [judge_identity(judge, RulerConfig(rubric="Be strict."))]


async def test_a_single_judges_cache_key_is_unchanged_and_other_identities_miss(
    server: JudgeServer, judge: ChatOpenAI, tmp_path: Path
) -> None:
    group = make_group(answer("5"), answer("6"))
    # The key a single judge always used: its cache id and the request (no identity, no sample index).
    request = build_request(group, DEFAULT_RUBRIC, max_explanation_chars=400)
    old_key = RulerCache.key(LangChainJudge(judge).cache_id, request)
    await aa.ruler_score_group(group, judge=judge, cache=tmp_path)
    assert (tmp_path / old_key[:2] / f"{old_key}.json").is_file()  # entries written before stay valid

    # The same model, endpoint and rubric sampled 3 times is another identity: it does not reuse that entry.
    sampled = await aa.ruler_score_group(group, judge=judge, samples=3, cache=tmp_path)
    assert sampled.metadata["ruler"]["cache_hits"] == 0 and len(server.requests) == 4
    # Another temperature is another identity too.
    hotter = ChatOpenAI(
        base_url=server.url, api_key="test", model="scripted-judge", max_retries=0, temperature=0.9
    )
    hot = await aa.ruler_score_group(group, judge=hotter, cache=tmp_path)
    assert hot.metadata["ruler"]["cache_hit"] is False
    assert len(server.requests) == 5
    assert len(list(tmp_path.rglob("*.json"))) == 5


async def test_score_groups_warns_when_the_runs_judge_changes(
    scripted: dict[str, ScriptedJudge], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    drifting = scripted["drifting"]
    monitor = JudgeChangeMonitor(run="run-7")
    groups = [make_group(answer("The answer is 5."), answer("It is 7.")) for _ in range(2)]
    with caplog.at_level(logging.WARNING, logger="art_adapters.ruler"):
        await aa.ruler_score_groups(groups, judge=drifting.model, monitor=monitor, cache=tmp_path)
        same = drifting.chat()  # another object, the same judge
        await aa.ruler_score_groups(groups, judge=same, monitor=monitor, cache=tmp_path)
        assert monitor.changes == [] and not caplog.records
        assert monitor.baseline == [judge_identity(drifting.model)]

        # Mid-run the judge is sampled hotter: the scores drift, and the run says so once.
        hot = drifting.chat(temperature=0.8)
        changed = await aa.ruler_score_groups(groups, judge=hot, monitor=monitor, cache=tmp_path)
        await aa.ruler_score_groups(groups, judge=hot, monitor=monitor, cache=tmp_path)
    assert len(monitor.changes) == 1 and len(caplog.records) == 1
    line = caplog.records[0].getMessage()
    assert "judge changed mid-run in run run-7" in line and changed[0].id in line
    assert judge_identity(hot)["id"] in line and judge_identity(drifting.model)["id"] in line
    # The groups themselves say who judged them.
    assert changed[0].metadata["ruler"]["judges"][0]["temperature"] == 0.8


def test_the_monitor_skips_groups_without_identities_and_can_be_seeded() -> None:
    monitor = JudgeChangeMonitor()
    old = aa.TrajectoryGroup(metadata={"ruler": {"status": "scored", "judge": "ChatOpenAI:j"}})
    assert monitor.check([old, aa.TrajectoryGroup()]) == [] and monitor.baseline is None
    first = aa.TrajectoryGroup(metadata={"ruler": {"judges": [{"model": "a", "id": "aaa"}]}})
    pair = [{"model": "a", "id": "aaa"}, {"model": "b", "id": "bbb"}]
    second = aa.TrajectoryGroup(metadata={"ruler": {"judges": pair}})
    assert monitor.check([first]) == []  # a resumed run's scored groups set the baseline
    (line,) = monitor.check([second, second])
    assert "a (aaa), b (bbb)" in line and "earlier groups by a (aaa)" in line
