"""Spans from Langfuse's own LangChain ``CallbackHandler`` become the trajectory our callback handler builds.

A real ``langfuse.Langfuse`` client writes its observations as OpenTelemetry spans into a real
provider (its exporter an in-memory one, so nothing leaves the process); Langfuse's
``CallbackHandler`` traces real LangGraph graphs on a deterministic chat model, and
TrajectorySpanProcessor, on the same provider, assembles the spans. Our ``TrajectoryCallbackHandler``
watches the same run. Both must agree on the conversation (messages, tool calls, which model wrote
each turn, usage), the tools, the histories, the tool records and the error, except what Langfuse
does not record: the provider's response id (``completion_id``) and the error's type.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import mcp_tools
from art_adapters._capture.langchain import TrajectoryCallbackHandler
from art_adapters._capture.otel import TrajectorySpanProcessor
from art_adapters._trajectory import Trajectory
from mcp_tools.servers import server_command
from tests.capture.test_langchain import QUESTION, assert_calculator_run, planner_graph, summariser_policy
from tests.capture.test_model_names import QUESTION as REVIEW_QUESTION
from tests.capture.test_model_names import REVIEW, answer
from tests.capture.test_otel_equivalence import comparable as equivalence_comparable
from tests.capture.test_otel_mcp import QUESTION as ADD_QUESTION
from tests.capture.test_otel_mcp import add_once
from tests.helpers.capture_fakes import (
    NamedFakeChatModel,
    PolicyChatModel,
    call_once,
    react_agent,
    review_graph,
)

langfuse = pytest.importorskip("langfuse", reason="the Langfuse SDK is not installed")
langfuse_langchain = pytest.importorskip("langfuse.langchain", reason="the Langfuse SDK is not installed")

#: A key no other test uses: Langfuse keeps one client per public key for the whole process.
PUBLIC_KEY = "pk-lf-art-adapters-capture-test"


class Traced:
    """The provider Langfuse writes into, our span processor on it, and Langfuse's own export."""

    def __init__(
        self, provider: TracerProvider, capture: TrajectorySpanProcessor, exported: InMemorySpanExporter
    ):
        self.provider = provider
        self.capture = capture
        self.exported = exported

    def handler(self) -> Any:
        """A Langfuse ``CallbackHandler`` on this module's client (picked by its public key)."""
        return langfuse_langchain.CallbackHandler(public_key=PUBLIC_KEY)


@pytest.fixture(scope="module")
def traced() -> Iterator[Traced]:
    """A Langfuse client on a real provider with the span processor; it exports to memory, not a server."""
    provider = TracerProvider()
    capture = TrajectorySpanProcessor()
    provider.add_span_processor(capture)
    exported = InMemorySpanExporter()
    client = langfuse.Langfuse(
        public_key=PUBLIC_KEY,
        secret_key="sk-lf-art-adapters-capture-test",
        base_url="http://127.0.0.1:9",  # never reached: the exporter below replaces the OTLP one
        tracer_provider=provider,
        span_exporter=exported,
    )
    try:
        yield Traced(provider, capture, exported)
    finally:
        client.shutdown()
        provider.shutdown()


@pytest.fixture
def lf(traced: Traced) -> Traced:
    """The module's Langfuse setup, emptied of earlier tests' trajectories."""
    traced.capture.pop_trajectories()
    return traced


def comparable(trajectory: Trajectory) -> dict:
    """What both paths must agree on, less what Langfuse does not record (response ids, the error's type)."""
    view = equivalence_comparable(trajectory)
    for messages in (view["messages"], *view["histories"]):
        for message in messages:
            message.pop("completion_id", None)
    if view["error"] is not None:
        view["error"] = re.sub(r"^\w+: ", "", view["error"])
    return view


def test_react_agent_invoke(lf: Traced, agent) -> None:
    ours = TrajectoryCallbackHandler()
    agent.invoke(QUESTION, config={"callbacks": [lf.handler(), ours]})
    otel = lf.capture.trajectory
    assert_calculator_run(otel, ids=False)  # the span side on its own is complete and right
    assert comparable(otel) == comparable(ours.trajectory)
    assert len(lf.capture.trajectories) == 1
    lf.provider.force_flush()
    kinds = {s.attributes.get("langfuse.observation.type") for s in lf.exported.get_finished_spans()}
    assert {"generation", "tool"} <= kinds  # Langfuse exported the same spans it would send to a server


def test_langchain_v1_create_agent(lf: Traced, model, calc_tools) -> None:
    agents = pytest.importorskip("langchain.agents", reason="the `langchain` package (v1) is not installed")
    agent = agents.create_agent(model, calc_tools, system_prompt="You are a calculator.")
    ours = TrajectoryCallbackHandler()
    agent.invoke(QUESTION, config={"callbacks": [lf.handler(), ours]})
    assert_calculator_run(lf.capture.trajectory, ids=False)
    assert comparable(lf.capture.trajectory) == comparable(ours.trajectory)


async def test_streamed_graph_with_a_subgraph_and_divergent_histories(lf: Traced, agent) -> None:
    graph = planner_graph(agent, PolicyChatModel(policy=summariser_policy))
    ours = TrajectoryCallbackHandler()
    async for _ in graph.astream(
        QUESTION, config={"callbacks": [lf.handler(), ours]}, stream_mode="messages"
    ):
        pass
    otel = lf.capture.trajectory
    assert otel is not None and len(otel.additional_histories) == 2
    assert comparable(otel) == comparable(ours.trajectory)


def test_a_node_that_raises(lf: Traced, agent) -> None:
    graph = planner_graph(agent, PolicyChatModel(policy=summariser_policy), fail_after_summary=True)
    ours = TrajectoryCallbackHandler()
    with pytest.raises(ValueError):
        graph.invoke(QUESTION, config={"callbacks": [lf.handler(), ours]})
    otel = lf.capture.trajectory
    assert otel is not None and otel.error == "summary rejected"
    assert comparable(otel) == comparable(ours.trajectory)


@tool
def divide(a: int, b: int) -> float:
    """Divide a by b."""
    return a / b


#: Call ``divide(1, 0)`` once, then report what the tool said.
divide_by_zero = call_once("divide", {"a": 1, "b": 0}, "call_div", lambda said: f"the tool said: {said[:40]}")


def test_a_failing_tool_is_an_error_record(lf: Traced) -> None:
    from langgraph.prebuilt import ToolNode

    agent = react_agent(PolicyChatModel(policy=divide_by_zero), ToolNode([divide], handle_tool_errors=True))
    ours = TrajectoryCallbackHandler()
    agent.invoke({"messages": [("user", "1 / 0")]}, config={"callbacks": [lf.handler(), ours]})
    otel = lf.capture.trajectory
    (record,) = otel.tool_records
    assert (record.name, record.call_id, record.is_error) == ("divide", "call_div", True)
    assert "division by zero" in (record.error or "")
    assert comparable(otel) == comparable(ours.trajectory)


async def test_concurrent_runs(lf: Traced, agent) -> None:
    ours = TrajectoryCallbackHandler()
    handler = lf.handler()
    questions = [f"what is {i} + 2 times 3" for i in range(6)]
    await asyncio.gather(
        *(
            agent.ainvoke({"messages": [("user", q)]}, config={"callbacks": [handler, ours]})
            for q in questions
        )
    )
    by_question_otel = {t.messages[1].content: comparable(t) for t in lf.capture.trajectories}
    by_question_ours = {t.messages[1].content: comparable(t) for t in ours.trajectories}
    assert set(by_question_otel) == set(questions)
    assert by_question_otel == by_question_ours


async def test_a_graph_with_two_chat_models_names_each_turns_model(lf: Traced) -> None:
    reviewer = NamedFakeChatModel(model="reviewer-x", responses=[AIMessage(content=REVIEW)])
    graph = review_graph(PolicyChatModel(policy=answer, model="agent"), reviewer)
    ours = TrajectoryCallbackHandler()
    await graph.ainvoke(REVIEW_QUESTION, config={"callbacks": [lf.handler(), ours]})
    otel = lf.capture.trajectory
    assert otel is not None
    assert [m.model for m in otel.messages if m.role == "assistant"] == ["agent", "reviewer-x", "agent"]
    assert comparable(otel) == comparable(ours.trajectory)


async def test_an_mcp_tool_is_one_record_with_its_server_and_session(lf: Traced) -> None:
    """A real MCP server's ``tools/call`` span, under Langfuse's tool span, replaces that one's record."""
    tools = await mcp_tools.load_tools(server_command("calculator"), tracer_provider=lf.provider)
    agent = react_agent(PolicyChatModel(policy=add_once), [t for t in tools if t.name == "add"])
    ours = TrajectoryCallbackHandler()
    async with mcp_tools.rollout() as scope:
        await agent.ainvoke(ADD_QUESTION, config={"callbacks": [lf.handler(), ours]})
        session_id = scope.sessions[0].session_ids["calculator"]
    (otel,) = lf.capture.trajectories
    assert otel.messages[-1].content == "2 + 3 = 5"
    (record,) = otel.tool_records
    assert (record.name, record.call_id, record.result, record.source) == ("add", "call_add_2_3", "5", "mcp")
    assert (record.server, record.session_id) == ("calculator", session_id)
    assert comparable(otel) == comparable(ours.trajectory)


def test_a_partial_generation_is_skipped_with_a_log(lf: Traced, caplog: pytest.LogCaptureFixture) -> None:
    """A generation without input (masked, or recorded by hand) is counted and logged; the rest is kept."""
    client = langfuse.get_client(public_key=PUBLIC_KEY)
    caplog.set_level(logging.DEBUG, logger="art_adapters._capture.otel_langfuse")
    with client.start_as_current_observation(name="rollout", as_type="agent"):
        with client.start_as_current_observation(
            name="complete",
            as_type="generation",
            input=[{"role": "user", "content": "hi"}],
            output={"role": "assistant", "content": "hello"},
            model="m1",
            usage_details={"input": 3, "output": 2, "total": 5},
        ):
            pass
        with client.start_as_current_observation(name="partial", as_type="generation", output="no input"):
            pass
    otel = lf.capture.trajectory
    assert otel is not None
    assert otel.openai_messages() == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
    ]
    assert otel.messages[-1].model == "m1" and otel.metrics["total_tokens"] == 5
    assert otel.logs == ["1 span(s) could not be parsed and were skipped"]
    assert any("'partial' skipped: no input" in r.getMessage() for r in caplog.records)


def test_unknown_observation_types_and_langfuse_tagged_genai_spans(lf: Traced) -> None:
    """A span of an unknown observation type is no call; one with GenAI attributes too is read as GenAI."""
    tracer = lf.provider.get_tracer("test")
    with tracer.start_as_current_span("root") as root:
        root.set_attribute("langfuse.observation.type", "a-future-type")
        root.set_attribute("langfuse.observation.input", "[")
        with tracer.start_as_current_span("chat m") as span:
            span.set_attribute("langfuse.observation.type", "generation")
            span.set_attribute("langfuse.observation.input", '[{"role": "user", "content": "langfuse side"}]')
            span.set_attribute("gen_ai.operation.name", "chat")
            span.set_attribute(
                "gen_ai.input.messages",
                '[{"role": "user", "parts": [{"type": "text", "content": "genai side"}]}]',
            )
            span.set_attribute(
                "gen_ai.output.messages",
                '[{"role": "assistant", "parts": [{"type": "text", "content": "ok"}]}]',
            )
    otel = lf.capture.trajectory
    assert otel is not None and otel.logs == []
    assert otel.openai_messages() == [
        {"role": "user", "content": "genai side"},
        {"role": "assistant", "content": "ok"},
    ]


def test_a_run_traced_by_langfuse_and_another_instrumentation_counts_each_call_once(lf: Traced) -> None:
    """Langfuse's handler beside OpenLLMetry: each call twice, in parallel span trees of one trace.

    Written here with plain SDK tracers of the two scopes (OpenLLMetry keeps the tracer of its
    first ``instrument()``, so it cannot be pointed at this module's provider).
    """
    from opentelemetry import trace

    langfuse_tracer = lf.provider.get_tracer("langfuse-sdk")
    genai_tracer = lf.provider.get_tracer("opentelemetry.instrumentation.langchain")
    user = {"role": "user", "content": "what is 2 + 3"}
    call = {"name": "add", "args": {"a": 2, "b": 3}, "id": "call_1", "type": "tool_call"}
    with genai_tracer.start_as_current_span("invoke_agent") as root:
        root.set_attribute("gen_ai.operation.name", "invoke_agent")
        for turn in range(2):
            with genai_tracer.start_as_current_span("chat m") as chat:
                messages = [{"role": "user", "parts": [{"type": "text", "content": user["content"]}]}]
                if turn:
                    messages += [
                        {
                            "role": "assistant",
                            "parts": [
                                {
                                    "type": "tool_call",
                                    "id": "call_1",
                                    "name": "add",
                                    "arguments": {"a": 2, "b": 3},
                                }
                            ],
                        },
                        {
                            "role": "tool",
                            "parts": [{"type": "tool_call_response", "id": "call_1", "response": "5"}],
                        },
                    ]
                chat.set_attribute("gen_ai.operation.name", "chat")
                chat.set_attribute("gen_ai.input.messages", json.dumps(messages))
                reply = (
                    {"type": "text", "content": "5"}
                    if turn
                    else {"type": "tool_call", "id": "call_1", "name": "add", "arguments": {"a": 2, "b": 3}}
                )
                chat.set_attribute(
                    "gen_ai.output.messages", json.dumps([{"role": "assistant", "parts": [reply]}])
                )
                chat.set_attribute("gen_ai.response.id", f"chatcmpl-{turn}")
                with langfuse_tracer.start_as_current_span(
                    "m", context=trace.set_span_in_context(root)
                ) as gen:
                    history = (
                        [user]
                        if not turn
                        else [
                            user,
                            {"role": "assistant", "content": "", "tool_calls": [call]},
                            {"role": "tool", "content": "5", "tool_call_id": "call_1"},
                        ]
                    )
                    gen.set_attribute("langfuse.observation.type", "generation")
                    gen.set_attribute("langfuse.observation.input", json.dumps(history))
                    output = (
                        {"role": "assistant", "content": "5"}
                        if turn
                        else {"role": "assistant", "content": "", "tool_calls": [call]}
                    )
                    gen.set_attribute("langfuse.observation.output", json.dumps(output))
            if not turn:
                with genai_tracer.start_as_current_span("execute_tool add") as tool_span:
                    tool_span.set_attribute("gen_ai.operation.name", "execute_tool")
                    tool_span.set_attribute("gen_ai.tool.name", "add")
                    tool_span.set_attribute("gen_ai.tool.call.id", "call_1")
                    tool_span.set_attribute("gen_ai.tool.call.result", "5")
                    with langfuse_tracer.start_as_current_span(
                        "add", context=trace.set_span_in_context(root)
                    ) as t:
                        t.set_attribute("langfuse.observation.type", "tool")
                        t.set_attribute("langfuse.observation.input", '{"a": 2, "b": 3}')
                        t.set_attribute("langfuse.observation.metadata.tool_call_id", '"call_1"')
                        t.set_attribute("langfuse.observation.output", "5")
    (otel,) = lf.capture.trajectories
    assert otel.metrics["model_calls"] == 2 and len(otel.tool_records) == 1
    assert [m.completion_id for m in otel.messages if m.role == "assistant"] == ["chatcmpl-0", "chatcmpl-1"]
