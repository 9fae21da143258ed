"""Traces read through the Langfuse public API become the trajectories their exports give.

The server is a stand-in (tests/helpers/langfuse_api.py): a real Langfuse needs Docker, which
these machines cannot run. Its answers follow the SDK's generated models, and one test has the
SDK's own client (``langfuse.api.LangfuseAPI``) parse them. The tests check the queries the
importer sends (filter on tags, session and time window; cursor and page pagination) and that
the trajectories equal :func:`trajectories_from_langfuse` of the same traces' exports.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest

import art_adapters as aa
from art_adapters._errors import ConfigError
from art_adapters.observe import trajectories_from_langfuse_api
from tests.helpers.langfuse_api import LangfuseApiStandIn
from tests.helpers.phoenix_server import free_port
from tests.observe.test_observe_import_langfuse import langfuse_trace

KEYS = {"public_key": "pk-lf-test", "secret_key": "sk-lf-test"}
T0 = datetime.fromisoformat("2026-11-20T10:00:00+00:00")


def shifted(trace_id: str, hours: int, *, tags: list[str], session: str, reward: float) -> dict[str, Any]:
    """The export of one calculator trace, ``hours`` after T0, with its own ids, tags and session."""
    trace = copy.deepcopy(langfuse_trace(trace_id))
    trace.update(tags=tags, sessionId=session)
    trace["scores"][0]["value"] = reward

    def move(text: str) -> str:
        return (datetime.fromisoformat(text) + timedelta(hours=hours)).isoformat().replace("+00:00", "Z")

    trace["timestamp"] = move(trace["timestamp"])
    for observation in trace["observations"]:
        observation["traceId"] = trace_id
        for key in ("startTime", "endTime"):
            observation[key] = move(observation[key])
    return trace


TRACES = [
    shifted("a" * 32, 0, tags=["prod", "calc"], session="s1", reward=0.25),
    shifted("b" * 32, 1, tags=["prod", "calc"], session="s1", reward=0.5),
    shifted("c" * 32, 2, tags=["prod", "calc"], session="s1", reward=0.75),  # outside the window
    shifted("d" * 32, 1, tags=["dev"], session="s1", reward=1.0),  # not tagged prod
    shifted("e" * 32, 1, tags=["prod", "calc"], session="s2", reward=1.0),  # another session
]


@pytest.fixture
def server() -> Iterator[LangfuseApiStandIn]:
    with LangfuseApiStandIn(TRACES) as stand_in:
        yield stand_in


def dumped(trajectories: list[aa.Trajectory]) -> list[dict[str, Any]]:
    return [t.model_dump(mode="json", exclude={"id"}) for t in trajectories]


def test_tagged_session_window_reads_through_v2_observations_and_v3_scores(
    server: LangfuseApiStandIn,
) -> None:
    trajectories = trajectories_from_langfuse_api(
        tags=["prod"],
        session_id="s1",
        start="2026-11-20T09:59:00Z",
        end=T0 + timedelta(minutes=90),
        base_url=server.url,
        page_size=2,
        **KEYS,
    )
    # the same trajectories as the exports of traces a and b give (oldest first)
    assert dumped(trajectories) == dumped(aa.trajectories_from_langfuse([TRACES[0], TRACES[1]]))
    assert [t.reward for t in trajectories] == [0.25, 0.5]
    assert [m.role for m in trajectories[0].messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert trajectories[0].tool_records[0].session_id == "sess-9"  # the MCP span's metadata
    assert trajectories[0].metadata["scenario_id"] == "add-2-3"  # the trace's metadata
    assert trajectories[1].metadata["langfuse_tags"] == ["prod", "calc"]

    (roots,) = server.calls("/api/public/v2/observations")[:1]
    assert json.loads(roots["filter"][0]) == [
        {"type": "boolean", "column": "isRootObservation", "operator": "=", "value": True},
        {"type": "arrayOptions", "column": "traceTags", "operator": "all of", "value": ["prod"]},
        {"type": "string", "column": "sessionId", "operator": "=", "value": "s1"},
        {"type": "datetime", "column": "startTime", "operator": ">=", "value": "2026-11-20T09:59:00Z"},
        {"type": "datetime", "column": "startTime", "operator": "<", "value": "2026-11-20T11:30:00Z"},
    ]
    per_trace = [q for q in server.calls("/api/public/v2/observations") if "traceId" in q]
    # 5 observations a trace, 2 a page: 3 pages each, the 2nd and 3rd with the cursor of the one before
    assert [q["traceId"][0][0] for q in per_trace] == ["b"] * 3 + ["a"] * 3
    assert ["cursor" in q for q in per_trace[:3]] == [False, True, True]
    assert all("io" in q["fields"][0].split(",") and q["limit"] == ["2"] for q in per_trace)
    scores = server.calls("/api/public/v3/scores")  # 4 scores, 2 a page
    assert [q["traceId"] for q in scores] == [["b" * 32 + "," + "a" * 32]] * 2
    assert ["cursor" in q for q in scores] == [False, True] and "subject" in scores[0]["fields"][0]


def test_limit_takes_the_newest_traces(server: LangfuseApiStandIn) -> None:
    (newest,) = trajectories_from_langfuse_api(tags=["prod", "calc"], limit=1, base_url=server.url, **KEYS)
    assert newest.metadata["langfuse_trace_id"] == "c" * 32 and newest.reward == 0.75
    assert len(trajectories_from_langfuse_api(session_id="s2", base_url=server.url, **KEYS)) == 1
    assert trajectories_from_langfuse_api(tags=["nothing-has-this"], base_url=server.url, **KEYS) == []


def test_a_server_without_observations_v2_is_an_error_naming_the_legacy_option() -> None:
    with LangfuseApiStandIn(TRACES, legacy=True) as server, pytest.raises(ConfigError) as info:
        trajectories_from_langfuse_api(tags=["prod"], base_url=server.url, **KEYS)
    assert "Observations API v2" in str(info.value) and "legacy_traces_api=True" in str(info.value)
    assert not server.calls("/api/public/traces")  # the deprecated endpoint is not read unasked


def test_older_server_is_read_through_the_traces_list_page_by_page_when_asked() -> None:
    with LangfuseApiStandIn(TRACES, legacy=True) as server, pytest.warns(DeprecationWarning, match="deprecated"):
        trajectories = trajectories_from_langfuse_api(
            tags=["prod", "calc"],
            session_id="s1",
            start=T0 - timedelta(minutes=1),
            end=T0 + timedelta(minutes=90),
            base_url=server.url,
            page_size=1,
            legacy_traces_api=True,
            **KEYS,
        )
    assert dumped(trajectories) == dumped(aa.trajectories_from_langfuse([TRACES[0], TRACES[1]]))
    pages = server.calls("/api/public/traces")
    assert [q["page"] for q in pages] == [["1"], ["2"]] and all(q["limit"] == ["1"] for q in pages)
    assert pages[0]["tags"] == ["prod", "calc"] and pages[0]["sessionId"] == ["s1"]
    assert pages[0]["fromTimestamp"] == ["2026-11-20T09:59:00Z"]
    assert pages[0]["toTimestamp"] == ["2026-11-20T11:30:00Z"]
    assert server.calls(f"/api/public/traces/{'b' * 32}") and server.calls(f"/api/public/traces/{'a' * 32}")


def test_the_sdk_client_parses_the_stand_ins_answers(server: LangfuseApiStandIn) -> None:
    """The stand-in's shapes are the SDK's: its generated client validates them into its models."""
    from langfuse.api import LangfuseAPI

    client = LangfuseAPI(base_url=server.url, username=KEYS["public_key"], password=KEYS["secret_key"])
    page = client.observations.get_many(
        trace_id="a" * 32, fields="core,basic,io,metadata,model,usage,trace_context", limit=3
    )
    assert len(page.data) == 3 and page.meta.cursor
    generation = next(o for o in page.data if o.type == "GENERATION")
    assert generation.model == "qwen3-8b" and generation.usage_details and generation.tags == ["prod", "calc"]
    assert isinstance(generation.input, str)  # the v2 API's raw string
    scores = client.scores.get_many(trace_id="a" * 32, fields="details,subject")
    assert {s.name: s.value for s in scores.data} == {"reward": 0.25, "helpfulness": 1}
    assert scores.data[0].subject.id == "a" * 32


def test_bad_keys_unreachable_server_and_missing_keys_are_clear_errors(
    server: LangfuseApiStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ConfigError, match=r"refused the credentials \(401\).*LANGFUSE_PUBLIC_KEY"):
        trajectories_from_langfuse_api(base_url=server.url, public_key="pk-lf-test", secret_key="wrong")
    dead = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ConfigError, match=f"cannot reach Langfuse at {dead}/api/public/v2/observations"):
        trajectories_from_langfuse_api(base_url=dead, **KEYS)
    monkeypatch.delenv("LANGFUSE_PUBLIC_KEY", raising=False)
    monkeypatch.delenv("LANGFUSE_SECRET_KEY", raising=False)
    with pytest.raises(ConfigError, match="LANGFUSE_PUBLIC_KEY and LANGFUSE_SECRET_KEY"):
        trajectories_from_langfuse_api(base_url=server.url)
    monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", KEYS["public_key"])
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", KEYS["secret_key"])
    monkeypatch.setenv("LANGFUSE_BASE_URL", server.url)
    assert len(trajectories_from_langfuse_api(session_id="s2")) == 1  # all from the environment
    with pytest.raises(ConfigError, match="time window is empty"):
        trajectories_from_langfuse_api(start=T0, end=T0)
