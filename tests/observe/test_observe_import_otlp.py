"""OTLP JSON from a third-party instrumentation (OpenInference's LangChain instrumentor, the way an OTel
collector or backend would export it) imports into the trajectory our callback handler captured live."""

from __future__ import annotations

from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

import art_adapters as aa
from art_adapters.observe import OtlpJsonFileExporter
from tests.capture.test_langchain import QUESTION, planner_graph, summariser_policy
from tests.helpers.capture_fakes import PolicyChatModel, add, calculator_policy, multiply, react_agent
from tests.helpers.conversations import conversation
from tests.helpers.langchain_instrumentations import instrumented_with


async def test_openinference_spans_exported_as_otlp_json_import_as_the_captured_trajectory(
    tmp_path: Path,
) -> None:
    path = tmp_path / "collector-export.jsonl"
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OtlpJsonFileExporter(path)))
    try:
        with instrumented_with("openinference", provider):
            agent = react_agent(PolicyChatModel(policy=calculator_policy), [add, multiply])
            graph = planner_graph(agent, PolicyChatModel(policy=summariser_policy))
            handler = aa.TrajectoryCallbackHandler()
            await graph.ainvoke(QUESTION, config={"callbacks": [handler]})
            await graph.ainvoke(
                {"messages": [("user", "what is 5 + 1 times 6")]}, config={"callbacks": [handler]}
            )
    finally:
        provider.shutdown()
    imported = aa.trajectories_from_otlp_json(path)
    assert len(imported) == 2 and all(len(t.additional_histories) == 2 for t in imported)
    captured = [conversation(t, usage=True) for t in handler.trajectories]
    assert [conversation(t, usage=True) for t in imported] == captured
    assert imported[0].tool_records[0].source == "otel" and imported[0].metadata["capture"] == "otel"
