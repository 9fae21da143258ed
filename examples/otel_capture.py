"""Capture a LangGraph agent from OpenTelemetry spans instead of LangChain callbacks.

What it shows: OpenInference's LangChain instrumentation traces a ReAct agent (the bundled
calculator MCP server's tools, the embedded backend's bundled SmolLM2-135M) into an OTel SDK
``TracerProvider``. Beside the usual exporter (here an in-memory one; in production an OTLP
exporter to Langfuse, Phoenix, ...) ``aa.TrajectorySpanProcessor`` assembles each trace into
an ``aa.Trajectory``: the same record the callback handler builds, with no change to the graph.

Run:  .venv/bin/python examples/otel_capture.py ["What is 27 + 58?"]
Time: about 20 s on a 2-core CPU (plus about a minute on the very first backend start).
"""

from __future__ import annotations

import asyncio
import sys
import warnings

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.prebuilt import create_react_agent
from openinference.instrumentation.langchain import LangChainInstrumentor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import art_adapters as aa
import mcp_tools

warnings.filterwarnings("ignore", message="create_react_agent has been moved")  # LangGraph 1.x
CALCULATOR = f"{sys.executable} -m mcp_tools.servers.calculator"
EXAMPLE = [HumanMessage("What is 12 + 30?"),  # one worked example as real turns: a 135M model's foothold
           AIMessage("", tool_calls=[{"name": "add", "args": {"a": 12, "b": 30}, "id": "call_example"}]),
           ToolMessage("42", tool_call_id="call_example"), AIMessage("12 + 30 = 42")]  # fmt: skip


async def main(question: str) -> None:
    # Tracing setup, done once at start-up: an exporter and the trajectory processor side by side.
    provider = TracerProvider()
    exporter = InMemorySpanExporter()  # or BatchSpanProcessor(OTLPSpanExporter()), ConsoleSpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    capture = aa.TrajectorySpanProcessor()
    provider.add_span_processor(capture)
    LangChainInstrumentor().instrument(tracer_provider=provider)

    async with aa.LocalBackend(run_dir=".art/examples/backend") as backend:
        model = aa.TrainableModel(name="examples-otel", project="examples")
        await model.register(backend)
        # MCP tools trace each call as a `tools/call NAME` span on the same provider.
        tools = await mcp_tools.load_tools(CALCULATOR, tracer_provider=provider)
        tools = [t for t in tools if t.name in ("add", "subtract")]
        llm = model.chat_model(temperature=0.0, max_tokens=48)
        free, must_call = llm.bind_tools(tools), llm.bind_tools(tools, tool_choice="required")
        pick = lambda state, runtime: must_call if state["messages"][-1].type == "human" else free
        agent = create_react_agent(pick, tools, prompt="Use the add tool, then state the result.")

        async with mcp_tools.rollout():  # no callbacks passed: the instrumentation sees the run
            await agent.ainvoke({"messages": [*EXAMPLE, HumanMessage(question)]})

    print(f"{len(exporter.get_finished_spans())} spans exported:")
    for span in exporter.get_finished_spans():
        print(f"  {span.name}  ({span.attributes.get('openinference.span.kind', '-')})")
    # One trajectory per trace. OpenInference never makes its spans current, so the MCP span does
    # not nest under its `add` tool span and forms a trace of its own; the graph run is the last.
    print(f"\ntrajectories by root span: {[t.metadata['root_span'] for t in capture.trajectories]}")
    trajectory = capture.trajectory  # the latest; reading waits (bounded) for the worker thread
    if trajectory is None:
        raise SystemExit("no trajectory was assembled")
    print("graph trajectory, from the question on:")
    for message in trajectory.messages[len(EXAMPLE) + 1 :]:
        calls = [f"{c.function.name}({c.function.arguments})" for c in message.tool_calls or []]
        print(f"  {message.role:9} {message.content or ''!r} {' '.join(calls)} {message.completion_id or ''}")
    print(f"tool records: {[r.model_dump(mode='json', exclude_none=True) for r in trajectory.tool_records]}")
    print(f"metrics: {trajectory.metrics}")
    provider.shutdown()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "What is 27 + 58?"))
