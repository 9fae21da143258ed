"""End to end against a real trace server: Arize Phoenix started by the test, fed over OTLP/HTTP.

A real scored run (LangGraph agent, MCP calculator over stdio, RULER on the scripted judge)
and a training-step record are exported by our Observer, once over plain OTLP and once
through the Langfuse SDK (``LANGFUSE_BASE_URL`` = Phoenix, ``LANGFUSE_OTEL_TRACES_EXPORT_PATH
= v1/traces``); the test then reads the spans back through Phoenix's REST API and finds each
rollout's agent span, its generations (with the served model), tool and MCP calls, and scores.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import art_adapters as aa
from art_adapters import observe
from art_adapters.observe import ObserveConfig, Observer
from tests.helpers.phoenix_server import PhoenixServer, ensure_venv


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PhoenixServer]:
    python, note = ensure_venv()
    if python is None:
        pytest.skip(f"Phoenix unavailable: {note}")
    server = PhoenixServer(
        python, tmp_path_factory.mktemp("phoenix")
    ).launch()  # starts while the run is made
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def ready(phoenix: PhoenixServer, scored_groups: list[aa.TrajectoryGroup]) -> PhoenixServer:
    """Phoenix, healthy (waited for after the scored run, so its start overlaps the rollouts)."""
    phoenix.wait()
    print(f"phoenix healthy {phoenix.startup_s:.1f}s after launch")  # shown with -s
    return phoenix


def wait_for(server: PhoenixServer, project: str, count: int, timeout_s: float = 30.0) -> list[dict]:
    deadline = time.monotonic() + timeout_s
    spans: list[dict] = []
    while time.monotonic() < deadline:
        spans = server.spans(project)
        if len(spans) >= count:
            return spans
        time.sleep(0.3)
    return spans


def check_rollout_traces(
    spans: list[dict], groups: list[aa.TrajectoryGroup], trace_ids: list[str], model: str
) -> None:
    traces: dict[str, list[dict]] = {}
    for span in spans:
        traces.setdefault(span["context"]["trace_id"], []).append(span)
    trajectories = [t for g in groups for t in g.trajectories]
    assert set(trace_ids) <= set(traces)
    for trajectory, trace_id in zip(trajectories, trace_ids, strict=True):
        members = traces[trace_id]
        kinds = sorted(s["span_kind"] for s in members)
        (root,) = [s for s in members if s["parent_id"] is None]
        assert root["span_kind"] == "AGENT"  # Phoenix read our GenAI attributes
        assert root["attributes"]["art_adapters.trajectory.id"] == trajectory.id
        assert root["attributes"]["session.id"] in {g.id for g in groups}
        llm = sorted((s for s in members if s["span_kind"] == "LLM"), key=lambda s: s["start_time"])
        assert len(llm) == 2 and all(s["attributes"]["gen_ai.request.model"] == model for s in llm)
        out = json.loads(llm[0]["attributes"]["gen_ai.output.messages"])
        assert {p["name"] for p in out[0]["parts"] if p["type"] == "tool_call"} == {
            "add",
            "multiply",
            "remember",
        }
        tools = {s["name"]: s for s in members if s["span_kind"] == "TOOL"}
        assert set(tools) == {"tools/call add", "tools/call multiply", "execute_tool remember"}, kinds
        mcp = tools["tools/call add"]["attributes"]
        assert mcp["mcp.method.name"] == "tools/call" and mcp["mcp.session.id"].startswith("local-")
        assert tools["execute_tool remember"]["attributes"]["gen_ai.tool.call.result"] == "noted: started"
        scores = {
            s["attributes"]["art_adapters.score.name"]: s for s in members if s["name"].startswith("score ")
        }
        ruler = scores["ruler"]
        assert ruler["attributes"]["gen_ai.evaluation.score.value"] == trajectory.metrics["ruler_score"]
        assert (
            ruler["attributes"]["gen_ai.evaluation.explanation"] == trajectory.metadata["ruler_explanation"]
        )
        assert ruler["events"][0]["name"] == "gen_ai.evaluation.result"
        assert ruler["parent_id"] == root["context"]["span_id"]


def test_rollouts_scores_and_metrics_over_otlp_reach_phoenix(
    ready: PhoenixServer, scored_groups: list[aa.TrajectoryGroup], tmp_path: Path
) -> None:
    project = "art-adapters-otlp"
    observer = Observer(
        ObserveConfig(
            otlp_endpoint=f"{ready.url}/v1/traces", project=project, run="e2e", metrics_path=tmp_path
        )
    )
    trace_ids = observer.log_rollouts(scored_groups, step=1, model="calc@1")
    observer.log_train_metrics(1, {"loss": 0.42, "kl": 0.003})
    observer.shutdown()
    assert observer.dropped_spans == 0 and observer.exported_spans > 0
    per_rollout = 1 + 2 + 3 + 2  # agent, generations, tool calls, scores
    spans = wait_for(ready, project, per_rollout * len(trace_ids) + 1)
    check_rollout_traces(spans, scored_groups, trace_ids, "calc@1")
    (train,) = [s for s in spans if s["name"] == "train_step 1"]
    assert train["attributes"]["art_adapters.train.loss"] == 0.42
    assert train["attributes"]["art_adapters.run"] == "e2e"
    assert [r["step"] for r in observer.history.rows()] == [1, 1]


def test_langfuse_sdk_path_reaches_phoenix(
    ready: PhoenixServer, scored_groups: list[aa.TrajectoryGroup], monkeypatch: pytest.MonkeyPatch
) -> None:
    project = "art-adapters-langfuse-sdk"
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", "pk-lf-phoenix")
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", "sk-lf-phoenix")
    monkeypatch.setenv("LANGFUSE_BASE_URL", ready.url)
    monkeypatch.setenv("LANGFUSE_OTEL_TRACES_EXPORT_PATH", "v1/traces")
    observer = observe.configure(project=project, run="e2e-langfuse")  # the env vars alone turn Langfuse on
    assert observer.config.langfuse and observer.langfuse_client is not None
    trace_ids = observer.log_rollouts(scored_groups, step=2, model="calc@2")
    observer.shutdown()  # the SDK's score upload gets a 404 from Phoenix (not a Langfuse server): logged only
    spans = wait_for(ready, project, 8 * len(trace_ids))
    check_rollout_traces(spans, scored_groups, trace_ids, "calc@2")
