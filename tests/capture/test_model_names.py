"""Which model produced each assistant turn (``Message.model``), on both capture paths.

A graph with several chat models (a reviewer or planner beside the trained policy) must say
whose turn is whose, so training can keep the other models' turns out of the loss. The
callback handler is exercised on a real LangGraph graph with two LangChain chat models of
different names; the span processor on GenAI chat spans made with the OpenTelemetry SDK
(the third-party instrumentations are in ``test_otel_equivalence.py``).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from langchain_core.messages import AIMessage
from opentelemetry.sdk.trace import TracerProvider

from art_adapters._capture.assembly import ModelCall, assemble
from art_adapters._capture.langchain import TrajectoryCallbackHandler
from art_adapters._capture.otel import TrajectorySpanProcessor
from art_adapters._capture.recorder import TrajectoryRecorder
from art_adapters._trajectory import Message, Trajectory
from tests.helpers.capture_fakes import (
    POLICY_SYSTEM,
    REVIEW_SYSTEM,
    NamedFakeChatModel,
    PolicyChatModel,
    review_graph,
)

QUESTION = {"messages": [("user", "Why is the sky blue?")]}
REVIEW = "Mention Rayleigh scattering."


def answer(messages: list[Any]) -> AIMessage:
    """The policy's reply: a pure function of how much it has seen."""
    return AIMessage(content=f"Answer after {len(messages)} messages.")


def models(messages: list[Message]) -> list[tuple[str, str | None]]:
    return [(m.role, m.model) for m in messages]


def test_the_recorder_prefers_the_responses_model_name_and_ignores_placeholders() -> None:
    recorder = TrajectoryRecorder()
    user = Message(role="user", content="hi")
    recorder.start_run("root", None)
    recorder.start_model_call("m1", "root", [user], model="gpt-x")
    recorder.end_model_call("m1", Message(role="assistant", content="a"), model="gpt-x-2026-01-01")
    history = [user, Message(role="assistant", content="a"), Message(role="user", content="more")]
    recorder.start_model_call("m2", "root", history, model=lambda: "agent@3")
    recorder.end_model_call("m2", Message(role="assistant", content="b"), model=lambda: None)
    recorder.start_model_call("m3", "root", [*history, Message(role="assistant", content="b")], model="unknown")
    recorder.end_model_call("m3", Message(role="assistant", content="c"), model="  ")
    recorder.end_run("root")
    trajectory = recorder.trajectory
    assert trajectory is not None
    assert [m.model for m in trajectory.messages if m.role == "assistant"] == [
        "gpt-x-2026-01-01",  # the response's name wins over the requested one
        "agent@3",  # no name in the response: the requested one
        None,  # "unknown" and blanks are what instrumentations write when they do not know
    ]


def test_a_turn_read_by_another_model_keeps_the_name_and_id_of_the_call_that_wrote_it() -> None:
    """The planner's reply reaches the policy as input in a history of its own (another system
    prompt): there it is an input copy, and still the planner's turn, with its completion id
    (so training sees one turn, not a copy to re-tokenise in a context it was not sampled in)."""
    user = Message(role="user", content="plan and do")
    plan = Message(role="assistant", content="step 1: add", completion_id="chatcmpl-plan")
    done = Message(role="assistant", content="done")
    planner = ModelCall(
        messages=[Message(role="system", content="plan"), user], output=plan.model_copy(), model="planner"
    )
    policy_call = ModelCall(
        messages=[
            Message(role="system", content="act"),
            user,
            plan.model_copy(update={"completion_id": None}),  # inputs carry no completion id
        ],
        output=done.model_copy(),
        model="agent@1",
    )
    trajectory = assemble([planner, policy_call], [])
    assert models(trajectory.messages) == [
        ("system", None),
        ("user", None),
        ("assistant", "planner"),
        ("assistant", "agent@1"),
    ]
    assert [m.generated for m in trajectory.messages if m.role == "assistant"] == [True, True]
    assert trajectory.messages[2].completion_id == "chatcmpl-plan"
    (other,) = trajectory.additional_histories
    assert models(other.messages)[-1] == ("assistant", "planner")


@pytest.mark.parametrize("stream", [False, True], ids=["invoke", "astream"])
async def test_a_graph_with_two_chat_models_records_whose_turn_is_whose(stream: bool) -> None:
    policy = PolicyChatModel(policy=answer, model="agent")
    reviewer = NamedFakeChatModel(model="reviewer-x", responses=[AIMessage(content=REVIEW)])
    graph = review_graph(policy, reviewer)
    handler = TrajectoryCallbackHandler()
    if stream:
        async for _ in graph.astream(QUESTION, config={"callbacks": [handler]}, stream_mode="messages"):
            pass
    else:
        await graph.ainvoke(QUESTION, config={"callbacks": [handler]})
    trajectory = handler.trajectory
    assert trajectory is not None and trajectory.error is None
    assert [(m.role, m.content, m.model) for m in trajectory.messages] == [
        ("system", POLICY_SYSTEM, None),
        ("user", "Why is the sky blue?", None),
        ("assistant", "Answer after 2 messages.", "agent"),
        ("assistant", REVIEW, "reviewer-x"),  # the reviewer's turn, read by the policy
        ("assistant", "Answer after 4 messages.", "agent"),
    ]
    (review_history,) = trajectory.additional_histories
    assert [(m.content, m.model) for m in review_history.messages if m.role == "assistant"] == [
        ("Answer after 2 messages.", "agent"),
        (REVIEW, "reviewer-x"),
    ]
    assert review_history.messages[0].content == REVIEW_SYSTEM
    # the reviewer's copy of the draft is the same turn (the fake's streamed replies carry no id)
    draft_id = trajectory.messages[2].completion_id
    assert review_history.messages[2].completion_id == draft_id and (draft_id is None) == stream
    # Not an OpenAI field; a lossless JSON round trip.
    assert all("model" not in m for m in trajectory.openai_messages())
    again = Trajectory.model_validate_json(trajectory.model_dump_json())
    assert models(again.messages) == models(trajectory.messages)
    assert Message.model_validate({"role": "assistant", "content": "old JSON"}).model is None


async def test_the_name_a_response_reports_is_the_turns_model() -> None:
    """``ChatOpenAI`` reports the served model (``response_metadata["model_name"]``), which may
    differ from the requested alias; the handler keeps the served one, streamed or not."""
    policy = PolicyChatModel(policy=answer, model="gpt-x", served_model="gpt-x-2026-01-01")
    handler = TrajectoryCallbackHandler()
    await policy.ainvoke("hi", config={"callbacks": [handler]})
    [chunk async for chunk in policy.astream("hi again", config={"callbacks": [handler]})]
    assert [t.messages[-1].model for t in handler.trajectories] == ["gpt-x-2026-01-01"] * 2


def genai_chat(tracer: Any, user: str, reply: str, **models: str) -> None:
    """One GenAI chat span (``gen_ai.request.model`` / ``gen_ai.response.model`` as given)."""
    with tracer.start_as_current_span("chat") as span:
        span.set_attribute("gen_ai.operation.name", "chat")
        for key, value in models.items():
            span.set_attribute(f"gen_ai.{key}.model", value)
        span.set_attribute(
            "gen_ai.input.messages", json.dumps([{"role": "user", "parts": [{"type": "text", "content": user}]}])
        )
        span.set_attribute(
            "gen_ai.output.messages",
            json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": reply}]}]),
        )


def test_genai_spans_name_each_turns_model() -> None:
    provider = TracerProvider()
    capture = TrajectorySpanProcessor()
    provider.add_span_processor(capture)
    tracer = provider.get_tracer("test")
    try:
        with tracer.start_as_current_span("invoke_agent two models") as root:
            root.set_attribute("gen_ai.operation.name", "invoke_agent")
            genai_chat(tracer, "plan", "p", request="planner", response="planner-2026")
            genai_chat(tracer, "act", "a", request="agent@2")
            genai_chat(tracer, "sum", "s", request="unknown", response="unknown")  # OpenLLMetry's placeholder
    finally:
        provider.shutdown()
    trajectory = capture.trajectory
    assert trajectory is not None
    histories = [trajectory.messages, *(h.messages for h in trajectory.additional_histories)]
    by_reply = {h[-1].content: h[-1].model for h in histories}
    assert by_reply == {"p": "planner-2026", "a": "agent@2", "s": None}
