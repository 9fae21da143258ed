"""Per-call token usage: each model call's usage stays on the assistant message it produced (issue 3).

Both capture paths are exercised for real: the callback handler on a LangGraph graph whose
LangChain fake chat models report ``usage_metadata`` (a different count on every call), and
the span processor on GenAI chat spans made with the OpenTelemetry SDK.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, TypedDict

from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, AnyMessage, SystemMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, tools_condition
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from art_adapters._capture.langchain import TrajectoryCallbackHandler
from art_adapters._capture.otel import TrajectorySpanProcessor
from art_adapters._trajectory import Trajectory
from tests.helpers.capture_fakes import add


def usage(prompt: int, completion: int) -> dict[str, int]:
    """LangChain ``usage_metadata`` of one call."""
    return {"input_tokens": prompt, "output_tokens": completion, "total_tokens": prompt + completion}


def openai_usage(prompt: int, completion: int) -> dict[str, int]:
    """The same usage as capture records it."""
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    summary: str


def agent_graph(agent: FakeMessagesListChatModel, summariser: FakeMessagesListChatModel) -> Any:
    """agent <-> tools until the agent answers, then a summariser call with its own prompt (a second history)."""

    def call_agent(state: State) -> dict:
        return {"messages": [agent.invoke([SystemMessage("You are a calculator."), *state["messages"]])]}

    def summarise(state: State) -> dict:
        prompt = [SystemMessage("Summarise the answer."), state["messages"][-1]]
        return {"summary": str(summariser.invoke(prompt).content)}

    graph = StateGraph(State)
    graph.add_node("agent", call_agent)
    graph.add_node("tools", ToolNode([add]))
    graph.add_node("summarise", summarise)
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition, {"tools": "tools", END: "summarise"})
    graph.add_edge("tools", "agent")
    graph.add_edge("summarise", END)
    return graph.compile()


def fake_models() -> tuple[FakeMessagesListChatModel, FakeMessagesListChatModel]:
    call = {"name": "add", "args": {"a": 2, "b": 3}, "id": "call_add", "type": "tool_call"}
    agent = FakeMessagesListChatModel(
        responses=[
            AIMessage(content="", tool_calls=[call], usage_metadata=usage(11, 7)),
            AIMessage(content="2 + 3 = 5", usage_metadata=usage(30, 4)),
        ]
    )
    summariser = FakeMessagesListChatModel(responses=[AIMessage(content="Five.", usage_metadata=usage(9, 2))])
    return agent, summariser


def test_each_assistant_message_keeps_the_usage_of_its_own_call() -> None:
    handler = TrajectoryCallbackHandler()
    agent, summariser = fake_models()
    agent_graph(agent, summariser).invoke({"messages": [("user", "what is 2 + 3")]}, {"callbacks": [handler]})

    trajectory = handler.trajectory
    assert trajectory is not None and trajectory.error is None
    assert [m.role for m in trajectory.messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert [m.usage for m in trajectory.messages] == [
        None,
        None,
        openai_usage(11, 7),
        None,
        openai_usage(30, 4),
    ]
    [summary] = trajectory.additional_histories
    assert [(m.role, m.content, m.usage) for m in summary.messages] == [
        ("system", "Summarise the answer.", None),
        ("assistant", "2 + 3 = 5", None),  # only input of this call: the usage is on the main history's turn
        ("assistant", "Five.", openai_usage(9, 2)),
    ]

    # the totals are the sum of the per-message usage, each call counted once
    per_message = [m.usage for h in trajectory.histories() for m in h.messages if m.usage is not None]
    assert len(per_message) == trajectory.metrics["model_calls"] == 3
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
        assert trajectory.metrics[key] == sum(u[key] for u in per_message)
    assert (trajectory.metrics["prompt_tokens"], trajectory.metrics["completion_tokens"]) == (50, 13)

    # not an OpenAI field: never sent to a model, a chat template or the judge
    assert all("usage" not in m for m in trajectory.openai_messages())
    assert all("usage" not in m.to_openai() for h in trajectory.histories() for m in h.messages)

    # JSON keeps it; JSON written before the field existed still loads
    assert Trajectory.model_validate_json(trajectory.model_dump_json()) == trajectory
    old = json.loads(trajectory.model_dump_json())
    for message in old["messages"]:
        message.pop("usage")
    assert all(m.usage is None for m in Trajectory.model_validate(old).messages)


def test_a_call_that_reports_no_usage_leaves_its_message_without_one() -> None:
    handler = TrajectoryCallbackHandler()
    model = FakeMessagesListChatModel(responses=[AIMessage(content="hi")])
    model.invoke("hello", config={"callbacks": [handler]})
    trajectory = handler.trajectory
    assert trajectory is not None and trajectory.messages[-1].content == "hi"
    assert trajectory.messages[-1].usage is None


def genai_chat(tracer: trace.Tracer, inputs: list[dict], output: dict, tokens: tuple[int, int]) -> None:
    """End one GenAI chat span reporting ``tokens`` = (input, output)."""
    with tracer.start_as_current_span("chat tiny") as span:
        span.set_attribute("gen_ai.operation.name", "chat")
        span.set_attribute("gen_ai.input.messages", json.dumps(inputs))
        span.set_attribute("gen_ai.output.messages", json.dumps([output]))
        span.set_attribute("gen_ai.usage.input_tokens", tokens[0])
        span.set_attribute("gen_ai.usage.output_tokens", tokens[1])


def test_a_genai_chat_spans_usage_lands_on_its_output_message() -> None:
    provider = TracerProvider()
    capture = TrajectorySpanProcessor()
    provider.add_span_processor(capture)
    tracer = provider.get_tracer("test")
    user = {"role": "user", "parts": [{"type": "text", "content": "add 1 and 2"}]}
    call = {
        "role": "assistant",
        "parts": [{"type": "tool_call", "id": "c1", "name": "add", "arguments": {"a": 1, "b": 2}}],
    }
    result = {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1", "response": "3"}]}
    final = {"role": "assistant", "parts": [{"type": "text", "content": "1 + 2 = 3"}]}
    try:
        with tracer.start_as_current_span("invoke_agent calc") as root:
            root.set_attribute("gen_ai.operation.name", "invoke_agent")
            genai_chat(tracer, [user], call, (10, 5))
            genai_chat(tracer, [user, call, result], final, (25, 6))
    finally:
        provider.shutdown()

    trajectory = capture.trajectory
    assert trajectory is not None
    assert [(m.role, m.usage) for m in trajectory.messages] == [
        ("user", None),
        ("assistant", openai_usage(10, 5)),
        ("tool", None),
        ("assistant", openai_usage(25, 6)),
    ]
    assert (trajectory.metrics["prompt_tokens"], trajectory.metrics["completion_tokens"]) == (35, 11)
    assert all("usage" not in m for m in trajectory.openai_messages())
