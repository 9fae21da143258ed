"""Traces read back from a running Arize Phoenix (its REST span API) become trajectories.

One real Phoenix (tests/helpers/phoenix_server.py) serves the module. Two kinds of traffic
reach it over OTLP/HTTP, each also written to an OTLP JSON file by the same tracer provider:
a real LangGraph graph traced by OpenInference's LangChain instrumentation, and our
Observer's export of a real scored run (GenAI conventions, MCP calls, RULER scores). Imported
through Phoenix's API they must give the trajectories the file gives (and the callback
handler captured); the time window and limit select traces; ``art-adapters import
phoenix:URL`` writes them with their scenarios.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from typer.testing import CliRunner

import art_adapters as aa
from art_adapters import observe
from art_adapters._errors import ConfigError
from art_adapters.apps._cli import app
from art_adapters.observe import ObserveConfig, Observer, OtlpJsonFileExporter, trajectories_from_phoenix
from tests.capture.test_langchain import QUESTION, planner_graph, summariser_policy
from tests.helpers.capture_fakes import PolicyChatModel, add, calculator_policy, multiply, react_agent
from tests.helpers.conversations import conversation
from tests.helpers.langchain_instrumentations import instrumented_with
from tests.helpers.phoenix_fixture import started_phoenix
from tests.helpers.phoenix_server import PhoenixServer, free_port

OPENINFERENCE = "import-openinference"
OURS = "import-observer"
LIVE = "import-live-rollouts"


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PhoenixServer]:
    yield from started_phoenix(tmp_path_factory)


def wait_for_spans(server: PhoenixServer, project: str, count: int, timeout_s: float = 30.0) -> None:
    """Phoenix ingests in the background: wait until the project holds ``count`` spans."""
    deadline = time.monotonic() + timeout_s
    while len(server.spans(project)) < count:
        assert time.monotonic() < deadline, f"Phoenix holds fewer than {count} spans in {project}"
        time.sleep(0.2)


def wait_until_settled(server: PhoenixServer, project: str, roots: int, timeout_s: float = 30.0) -> None:
    """Wait until the project holds ``roots`` root spans and its span count stops growing."""
    deadline = time.monotonic() + timeout_s
    seen = -1
    while True:
        spans = server.spans(project)
        if sum(s["parent_id"] is None for s in spans) >= roots and len(spans) == seen:
            return
        assert time.monotonic() < deadline, f"Phoenix holds {len(spans)} spans in {project}, still growing"
        seen = len(spans)
        time.sleep(0.5)


def comparable(trajectory: aa.Trajectory) -> dict[str, Any]:
    """Everything but the id (new at each import unless ours) and nanoseconds (Phoenix keeps microseconds)."""
    data = trajectory.model_dump(mode="json", exclude={"id", "started_at", "finished_at"})
    data["metadata"].pop("phoenix_project", None)
    for record in data["tool_records"]:  # checked to the microsecond by timings() instead
        del record["duration_s"], record["started_at"]
    return data


def timings(trajectories: list[aa.Trajectory]) -> list[tuple[float, float]]:
    return [
        (r.duration_s or 0.0, r.started_at.timestamp() if r.started_at else 0.0)
        for t in sorted(trajectories, key=lambda t: t.metadata["trace_id"])
        for r in t.tool_records
    ]


def same_timings(imported: list[aa.Trajectory], exported: list[aa.Trajectory]) -> bool:
    pairs = list(zip(timings(imported), timings(exported), strict=True))
    return all(abs(a - b) <= 2e-6 and abs(c - d) <= 2e-6 for (a, c), (b, d) in pairs)


def provider_for(server: PhoenixServer, project: str, path: Path) -> TracerProvider:
    """A tracer provider exporting to Phoenix's project over OTLP/HTTP and to an OTLP JSON file."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    provider = TracerProvider(resource=Resource.create({"openinference.project.name": project}))
    provider.add_span_processor(SimpleSpanProcessor(OtlpJsonFileExporter(path)))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{server.url}/v1/traces")))
    return provider


@pytest.fixture(scope="module")
def openinference_run(
    phoenix: PhoenixServer, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, list[aa.Trajectory]]:
    """Two runs of a LangGraph graph traced by OpenInference: (OTLP JSON file, the handler's trajectories)."""
    path = tmp_path_factory.mktemp("openinference") / "spans.jsonl"
    provider = provider_for(phoenix, OPENINFERENCE, path)
    handler = aa.TrajectoryCallbackHandler()

    async def run() -> None:
        agent = react_agent(PolicyChatModel(policy=calculator_policy), [add, multiply])
        graph = planner_graph(agent, PolicyChatModel(policy=summariser_policy))
        await graph.ainvoke(QUESTION, config={"callbacks": [handler]})
        await asyncio.sleep(0.05)  # the two traces' start times apart, for the time window
        await graph.ainvoke(
            {"messages": [("user", "what is 5 + 1 times 6")]}, config={"callbacks": [handler]}
        )

    try:
        with instrumented_with("openinference", provider):
            asyncio.run(run())
    finally:
        provider.shutdown()
    wait_for_spans(phoenix, OPENINFERENCE, sum(1 for _ in path.open()))  # one span a line
    return path, handler.trajectories


def test_openinference_traces_read_from_phoenix_equal_the_otlp_export_and_the_capture(
    phoenix: PhoenixServer, openinference_run: tuple[Path, list[aa.Trajectory]]
) -> None:
    path, captured = openinference_run
    imported = trajectories_from_phoenix(phoenix.url, project=OPENINFERENCE, page_size=7)  # several pages
    from_file = aa.trajectories_from_otlp_json(path)
    assert len(imported) == 2 and all(t.metadata["phoenix_project"] == OPENINFERENCE for t in imported)
    assert [comparable(t) for t in imported] == [comparable(t) for t in from_file]
    assert same_timings(imported, from_file)
    assert [conversation(t) for t in imported] == [conversation(t) for t in captured]
    assert imported[1].messages[1].content == "what is 5 + 1 times 6"


def test_time_window_and_limit_select_traces(
    phoenix: PhoenixServer, openinference_run: tuple[Path, list[aa.Trajectory]]
) -> None:
    first, second = trajectories_from_phoenix(phoenix.url, project=OPENINFERENCE)
    assert first.finished_at is not None and second.started_at > first.finished_at
    between = first.finished_at + (second.started_at - first.finished_at) / 2
    (late,) = trajectories_from_phoenix(phoenix.url, project=OPENINFERENCE, start=between)
    (early,) = trajectories_from_phoenix(phoenix.url, project=OPENINFERENCE, end=between.isoformat())
    (newest,) = trajectories_from_phoenix(phoenix.url, project=OPENINFERENCE, limit=1)
    trace = [t.metadata["trace_id"] for t in (late, early, newest, first, second)]
    assert trace[:3] == [trace[4], trace[3], trace[4]]
    after = second.started_at + timedelta(seconds=1)
    assert trajectories_from_phoenix(phoenix.url + "/v1/traces", project=OPENINFERENCE, start=after) == []


def test_our_observers_rollouts_read_from_phoenix_keep_ids_rewards_and_scores(
    phoenix: PhoenixServer, scored_groups: list[aa.TrajectoryGroup], tmp_path: Path
) -> None:
    path = tmp_path / "observer.jsonl"
    observer = Observer(
        ObserveConfig(otlp_endpoint=f"{phoenix.url}/v1/traces", project=OURS, run="import"),
        span_processors=[SimpleSpanProcessor(OtlpJsonFileExporter(path))],
    )
    trace_ids = observer.log_rollouts(scored_groups, step=2, model="calc@2")
    observer.shutdown()
    wait_for_spans(
        phoenix,
        OURS,
        sum(len(json.loads(line)["resourceSpans"][0]["scopeSpans"][0]["spans"]) for line in path.open()),
    )
    imported = trajectories_from_phoenix(phoenix.url, project=OURS)
    from_file = aa.trajectories_from_otlp_json(path)
    originals = [t for g in scored_groups for t in g.trajectories]

    def by_trace(trajectories: list[aa.Trajectory]) -> list[dict[str, Any]]:  # start-time ties: µs vs ns
        return [comparable(t) for t in sorted(trajectories, key=lambda t: t.metadata["trace_id"])]

    assert by_trace(imported) == by_trace(from_file) and same_timings(imported, from_file)
    assert sorted(t.metadata["trace_id"] for t in imported) == sorted(trace_ids)
    by_id = {t.id: t for t in imported}
    assert set(by_id) == {t.id for t in originals}  # our trajectory ids came back
    for original in originals:
        back = by_id[original.id]
        assert (
            back.reward == original.reward and back.metrics["ruler_score"] == original.metrics["ruler_score"]
        )
        assert back.metadata["ruler_explanation"] == original.metadata["ruler_explanation"]
        assert back.metadata["step"] == 2 and back.metadata["model"] == "calc@2"
        assert [m.content for m in back.messages if m.role == "user"] == [
            m.content for m in original.messages if m.role == "user"
        ]
        assert {(r.name, r.source) for r in back.tool_records} == {
            (r.name, r.source) for r in original.tool_records
        }


async def test_rollouts_traced_live_by_run_groups_read_back_as_run_groups_returned_them(
    phoenix: PhoenixServer,
) -> None:
    """Rollouts traced live into Phoenix (one trace each, under its rollout span) come back whole."""
    import mcp_tools
    from mcp_tools.servers import server_command

    tools = await mcp_tools.load_tools(server_command("calculator"))
    agent = react_agent(PolicyChatModel(policy=calculator_policy), tools)

    async def rollout(scenario: dict[str, Any]) -> aa.Trajectory:
        handler = aa.TrajectoryCallbackHandler()
        async with mcp_tools.rollout():
            await agent.ainvoke({"messages": [("user", scenario["q"])]}, config={"callbacks": [handler]})
        assert handler.trajectory is not None
        handler.trajectory.reward = 1.0 if scenario["id"] == "calc-a" else 0.0
        return handler.trajectory

    observer = Observer(ObserveConfig(otlp_endpoint=f"{phoenix.url}/v1/traces", project=LIVE))
    scenarios = [
        {"id": "calc-a", "q": "what is 2 + 3 times 4"},
        {"id": "calc-b", "q": "what is 5 + 1 times 6"},
    ]
    tracing = observe.RolloutTracing(observer=observer, step=1, policy="calc@1")
    groups = await aa.run_groups(rollout, scenarios, n=2, progress=False, tracing=tracing)
    observer.shutdown()
    originals = {t.metadata["trace_id"]: t for g in groups for t in g.trajectories}
    wait_until_settled(phoenix, LIVE, roots=4)
    imported = trajectories_from_phoenix(phoenix.url, project=LIVE)
    assert {t.metadata["trace_id"] for t in imported} == set(originals)
    for back in imported:
        original = originals[back.metadata["trace_id"]]
        assert back.id == original.id and back.reward == original.reward
        # the exported generations name the policy version that wrote them (the fake model gave none)
        assert {m.model for m in back.messages if m.role == "assistant"} == {"calc@1"}
        for message in back.messages:
            message.model = None
        assert conversation(back) == conversation(original)
        for key in ("scenario_id", "group_id", "rollout_index", "step"):
            assert back.metadata[key] == original.metadata.get(key, 1 if key == "step" else None), key
    assert sorted(t.reward for t in imported) == [0.0, 0.0, 1.0, 1.0]


def test_unknown_project_and_unreachable_server_are_clear_errors(phoenix: PhoenixServer) -> None:
    with pytest.raises(ConfigError, match="has no project 'no-such-project'"):
        trajectories_from_phoenix(phoenix.url, project="no-such-project")
    dead = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ConfigError, match=f"cannot reach Phoenix at {dead}/v1/projects/default/spans"):
        trajectories_from_phoenix(dead)
    with pytest.raises(ConfigError, match="http:// or https://"):
        trajectories_from_phoenix("localhost:6006")


def test_cli_imports_from_phoenix_with_scenarios(
    phoenix: PhoenixServer, openinference_run: tuple[Path, list[aa.Trajectory]], tmp_path: Path
) -> None:
    out = tmp_path / "prod.jsonl"
    result = CliRunner().invoke(
        app, ["import", f"phoenix:{phoenix.url}", str(out), "--project", OPENINFERENCE]
    )
    assert result.exit_code == 0, result.output
    assert "2 trajectories" in result.output and "2 scenarios" in result.output
    trajectories = [aa.Trajectory.model_validate_json(line) for line in out.read_text().splitlines()]
    assert [conversation(t) for t in trajectories] == [conversation(t) for t in openinference_run[1]]
    import mcp_tools

    scenarios = mcp_tools.load_scenarios(tmp_path / "prod.scenarios.jsonl")  # train-mcp reads it as is
    assert [s.task for s in scenarios] == ["what is 2 + 3 times 4", "what is 5 + 1 times 6"]
    assert [s.metadata["trace_id"] for s in scenarios] == [t.metadata["trace_id"] for t in trajectories]
    assert all(s.difficulty == 2 and s.metadata["source"] == f"phoenix:{phoenix.url}" for s in scenarios)
