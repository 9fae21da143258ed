"""The span processor and the callback handler agree on the same run of a real LangGraph graph.

Third-party LangChain instrumentations — OpenInference's (OpenInference conventions),
OpenLLMetry's ``opentelemetry-instrumentation-langchain`` and the official
``opentelemetry-instrumentation-genai-langchain`` (OTel GenAI conventions; message content needs
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=SPAN_ONLY``), each
switched on with its documented ``instrument(tracer_provider=...)`` — turn the run into
spans; TrajectorySpanProcessor assembles them. The callback handler watches the same run. Both must produce the same
conversation (messages, completion ids, which model wrote each turn), the same tools, histories, tool records and error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from langchain_core.messages import AIMessage
from opentelemetry.sdk.trace import TracerProvider

from art_adapters._capture.langchain import TrajectoryCallbackHandler
from art_adapters._capture.otel import TrajectorySpanProcessor
from art_adapters._trajectory import Trajectory
from tests.capture.test_langchain import QUESTION, assert_calculator_run, planner_graph, summariser_policy
from tests.capture.test_model_names import QUESTION as REVIEW_QUESTION
from tests.capture.test_model_names import REVIEW, answer
from tests.helpers.capture_fakes import NamedFakeChatModel, PolicyChatModel, calculator_policy, review_graph
from tests.helpers.conversations import conversation
from tests.helpers.langchain_instrumentations import instrumented_with


@pytest.fixture(scope="module", params=["openinference", "openllmetry", "otel-genai"])
def instrumented(request: pytest.FixtureRequest) -> Iterator[TrajectorySpanProcessor]:
    """A span processor on a real provider that a third-party LangChain instrumentation traces into.

    Instrumented once per module and instrumentation, and every wrapper it added taken off after
    (:mod:`tests.helpers.langchain_instrumentations`: OpenLLMetry's ``uninstrument()`` leaves them).
    """
    provider = TracerProvider()
    processor = TrajectorySpanProcessor()
    provider.add_span_processor(processor)
    try:
        with instrumented_with(request.param, provider):
            yield processor
    finally:
        provider.shutdown()


@pytest.fixture
def model() -> PolicyChatModel:
    """The calculator policy with a model name: the official OTel LangChain instrumentation records
    no span for a chat model whose request names none (as provider chat models always do)."""
    return PolicyChatModel(policy=calculator_policy, model="calculator")


@pytest.fixture
def capture(instrumented: TrajectorySpanProcessor) -> TrajectorySpanProcessor:
    """The module's span processor, emptied of earlier tests' trajectories."""
    instrumented.pop_trajectories()
    return instrumented


def comparable(trajectory: Trajectory) -> dict:
    """What both capture paths must agree on (not ids, timings, or where a record came from)."""
    model_calls = trajectory.metrics["model_calls"]
    return {**conversation(trajectory, errors=True, usage=True), "model_calls": model_calls}


def test_react_agent_invoke(capture: TrajectorySpanProcessor, agent) -> None:
    handler = TrajectoryCallbackHandler()
    agent.invoke(QUESTION, config={"callbacks": [handler]})
    assert_calculator_run(capture.trajectory)  # the span side on its own is complete and right
    assert comparable(capture.trajectory) == comparable(handler.trajectory)
    assert len(capture.trajectories) == 1


async def test_streamed_ainvoke_of_a_graph_with_a_subgraph_and_divergent_histories(capture, agent) -> None:
    graph = planner_graph(agent, PolicyChatModel(policy=summariser_policy, model="summariser"))
    handler = TrajectoryCallbackHandler()
    async for _ in graph.astream(QUESTION, config={"callbacks": [handler]}, stream_mode="messages"):
        pass
    otel = capture.trajectory
    assert otel is not None and len(otel.additional_histories) == 2
    assert comparable(otel) == comparable(handler.trajectory)


def test_a_node_that_raises(capture, agent) -> None:
    graph = planner_graph(agent, PolicyChatModel(policy=summariser_policy, model="summariser"), fail_after_summary=True)
    handler = TrajectoryCallbackHandler()
    with pytest.raises(ValueError):
        graph.invoke(QUESTION, config={"callbacks": [handler]})
    otel = capture.trajectory
    assert otel is not None and otel.error is not None and "summary rejected" in otel.error
    assert comparable(otel) == comparable(handler.trajectory)


async def test_concurrent_runs(capture, agent) -> None:
    handler = TrajectoryCallbackHandler()
    questions = [f"what is {i} + 2 times 3" for i in range(6)]
    await asyncio.gather(
        *(agent.ainvoke({"messages": [("user", q)]}, config={"callbacks": [handler]}) for q in questions)
    )
    by_question_otel = {t.messages[1].content: comparable(t) for t in capture.trajectories}
    by_question_handler = {t.messages[1].content: comparable(t) for t in handler.trajectories}
    assert set(by_question_otel) == set(questions)
    assert by_question_otel == by_question_handler


async def test_a_graph_with_two_chat_models_names_each_turns_model(capture) -> None:
    """The reviewer's turn, read by the policy, is the reviewer's on the span side too."""
    reviewer = NamedFakeChatModel(model="reviewer-x", responses=[AIMessage(content=REVIEW)])
    graph = review_graph(PolicyChatModel(policy=answer, model="agent"), reviewer)
    handler = TrajectoryCallbackHandler()
    await graph.ainvoke(REVIEW_QUESTION, config={"callbacks": [handler]})
    otel = capture.trajectory
    assert otel is not None
    assert [m.model for m in otel.messages if m.role == "assistant"] == ["agent", "reviewer-x", "agent"]
    assert comparable(otel) == comparable(handler.trajectory)
