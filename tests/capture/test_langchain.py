"""TrajectoryCallbackHandler on real LangGraph graphs: every way of running them, failures, concurrency."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import ToolException, tool
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode

import art_adapters as aa
from art_adapters._capture.langchain import TrajectoryCallbackHandler
from art_adapters._trajectory import Trajectory
from tests.helpers.capture_fakes import PolicyChatModel, chain_graph, completion_id_for, react_agent

QUESTION = {"messages": [("user", "what is 2 + 3 times 4")]}

EXPECTED = [
    {"role": "system", "content": "You are a calculator."},
    {"role": "user", "content": "what is 2 + 3 times 4"},
    {
        "role": "assistant",
        "content": "Let me compute.",
        "tool_calls": [
            {
                "id": "call_add_2_3_4",
                "type": "function",
                "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'},
            },
            {
                "id": "call_mul_2_3_4",
                "type": "function",
                "function": {"name": "multiply", "arguments": '{"a": 3, "b": 4}'},
            },
        ],
    },
    {"role": "tool", "content": "5", "name": "add", "tool_call_id": "call_add_2_3_4"},
    {"role": "tool", "content": "12", "name": "multiply", "tool_call_id": "call_mul_2_3_4"},
    {"role": "assistant", "content": "The results are 5 and 12."},
]


def config(handler: TrajectoryCallbackHandler) -> dict:
    return {"callbacks": [handler]}


def assert_calculator_run(trajectory: Trajectory | None, *, ids: bool = True) -> None:
    """The agent's run on QUESTION: whole conversation, bound tools, both tool results, usage."""
    assert trajectory is not None and trajectory.error is None
    assert trajectory.openai_messages() == EXPECTED
    assert [t.name for t in trajectory.tools or []] == ["add", "multiply"]
    assert trajectory.tools[0].function["parameters"]["required"] == ["a", "b"]
    # parallel calls of one turn: in start order, which a sync run's thread pool does not fix
    records = sorted((r.call_id, r.name, r.arguments, r.result, r.is_error) for r in trajectory.tool_records)
    assert [(name, call_id, *rest) for call_id, name, *rest in records] == [
        ("add", "call_add_2_3_4", {"a": 2, "b": 3}, "5", False),
        ("multiply", "call_mul_2_3_4", {"a": 3, "b": 4}, "12", False),
    ]
    assert trajectory.metrics["model_calls"] == 2 and trajectory.metrics["tool_calls"] == 2
    assert trajectory.metrics["prompt_tokens"] > 0 and trajectory.metrics["completion_tokens"] > 0
    completion_ids = [m.completion_id for m in trajectory.messages if m.role == "assistant"]
    if ids:  # the fake model reports ids like ChatOpenAI's non-streaming path
        assert all(c is not None and c.startswith("chatcmpl-") for c in completion_ids)
        assert len(set(completion_ids)) == 2
    assert trajectory.additional_histories == []
    assert [m.generated for m in trajectory.messages if m.role == "assistant"] == [True, True]


def test_the_package_root_exports_the_handler() -> None:
    assert aa.TrajectoryCallbackHandler is TrajectoryCallbackHandler


def test_sync_invoke_of_the_prebuilt_react_agent(agent) -> None:
    handler = TrajectoryCallbackHandler()
    agent.invoke(QUESTION, config=config(handler))
    assert_calculator_run(handler.trajectory)
    assert len(handler.trajectories) == 1
    assert handler.trajectory.metadata["root_run"] == "LangGraph"


async def test_ainvoke(agent) -> None:
    handler = TrajectoryCallbackHandler()
    await agent.ainvoke(QUESTION, config=config(handler))
    assert_calculator_run(handler.trajectory)


async def test_astream_with_a_streaming_model(agent, model) -> None:
    handler = TrajectoryCallbackHandler()
    chunks = [
        chunk async for chunk in agent.astream(QUESTION, config=config(handler), stream_mode="messages")
    ]
    assert model.streamed_calls == 2 and chunks  # the model really streamed, token by token
    assert_calculator_run(handler.trajectory, ids=False)  # streamed chat completions carry no response id


async def test_astream_events(agent, model) -> None:
    handler = TrajectoryCallbackHandler()
    kinds = {
        event["event"] async for event in agent.astream_events(QUESTION, config=config(handler), version="v2")
    }
    assert {"on_chat_model_stream", "on_tool_end"} <= kinds and model.streamed_calls == 2
    assert_calculator_run(handler.trajectory, ids=False)


def test_sync_stream_updates(agent) -> None:
    handler = TrajectoryCallbackHandler()
    steps = list(agent.stream(QUESTION, config=config(handler), stream_mode="updates"))
    assert [next(iter(step)) for step in steps] == [
        "agent",
        "tools",
        "tools",
        "agent",
    ]  # one update per tool call
    assert_calculator_run(handler.trajectory)


def test_langchain_v1_create_agent(model, calc_tools) -> None:
    agents = pytest.importorskip(
        "langchain.agents", reason="the `langchain` package (v1 create_agent) is not installed"
    )
    agent = agents.create_agent(model, calc_tools, system_prompt="You are a calculator.")
    handler = TrajectoryCallbackHandler()
    agent.invoke(QUESTION, config=config(handler))
    assert_calculator_run(handler.trajectory)


def test_a_model_called_directly_is_its_own_root(model) -> None:
    handler = TrajectoryCallbackHandler()
    reply = model.invoke([HumanMessage("what is 1 + 1 times 1")], config=config(handler))
    trajectory = handler.trajectory
    assert trajectory is not None and trajectory.metrics["model_calls"] == 1
    assert trajectory.messages[-1].tool_calls[0].function.name == "add"
    assert trajectory.messages[-1].completion_id == reply.response_metadata["id"]


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    summary: str


#: A hand-written worked example the agent puts before the real question (a few-shot foothold).
FEW_SHOT = [
    SystemMessage("You are a calculator. Worked example:"),
    HumanMessage("what is 1 + 1"),
    AIMessage(
        content="I will add.",
        tool_calls=[{"name": "add", "args": {"a": 1, "b": 1}, "id": "example_add", "type": "tool_call"}],
    ),
    ToolMessage("2", tool_call_id="example_add", name="add"),
    AIMessage(content="The answer is 2."),
]


def few_shot_graph(model: PolicyChatModel, tools: list) -> Any:
    """agent (FEW_SHOT + the conversation, tools bound) <-> tools, a hand-built LangGraph graph."""
    bound = model.bind_tools(tools)

    def agent(state: State) -> dict:
        return {"messages": [bound.invoke([*FEW_SHOT, *state["messages"]])]}

    def route(state: State) -> str:
        return "tools" if state["messages"][-1].tool_calls else END

    builder = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode(tools))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route, ["tools", END])
    builder.add_edge("tools", "agent")
    return builder.compile()


async def test_few_shot_assistant_turns_in_the_prompt_are_marked_not_generated(model, calc_tools) -> None:
    handler = TrajectoryCallbackHandler()
    await few_shot_graph(model, calc_tools).ainvoke(QUESTION, config=config(handler))
    trajectory = handler.trajectory
    assert trajectory is not None and trajectory.error is None and trajectory.additional_histories == []
    assistant = [m for m in trajectory.messages if m.role == "assistant"]
    assert [(m.content, m.generated) for m in assistant] == [
        ("I will add.", False),  # the example's tool call: only ever model input
        ("The answer is 2.", False),
        ("Let me compute.", True),  # the model's outputs in this run
        ("The results are 5 and 12.", True),
    ]
    assert [m.completion_id is not None for m in assistant] == [False, False, True, True]
    assert all("generated" not in m for m in trajectory.openai_messages())  # not an OpenAI field
    # the marker survives JSON (what save_groups / load_groups write and read)
    again = Trajectory.model_validate_json(trajectory.model_dump_json())
    assert [m.generated for m in again.messages] == [m.generated for m in trajectory.messages]


def summariser_policy(messages):
    return AIMessage(content=f"summary of {len(messages) - 1} messages")


def planner_graph(agent, summariser: PolicyChatModel, *, fail_after_summary: bool = False):
    """plan (its own model, own prompt) -> the ReAct agent as a subgraph -> summarise (divergent history)."""

    def plan(state: State) -> dict:
        reply = summariser.invoke([SystemMessage("plan the work"), state["messages"][0]])
        return {"summary": str(reply.content)}

    def summarise(state: State) -> dict:
        reply = summariser.invoke([SystemMessage("summarise"), *state["messages"][1:]])
        if fail_after_summary:
            raise ValueError("summary rejected")
        return {"summary": str(reply.content)}

    return chain_graph(State, ("plan", plan), ("agent", agent), ("summarise", summarise))


async def test_subgraph_and_several_model_nodes_keep_every_history(agent) -> None:
    graph = planner_graph(agent, PolicyChatModel(policy=summariser_policy))
    handler = TrajectoryCallbackHandler()
    await graph.ainvoke(QUESTION, config=config(handler))
    trajectory = handler.trajectory
    assert len(handler.trajectories) == 1  # the subgraph is part of the root run
    assert trajectory.openai_messages() == EXPECTED
    assert trajectory.metrics["model_calls"] == 4
    others = [[m.to_openai() for m in h.messages] for h in trajectory.additional_histories]
    assert others == [
        [
            {"role": "system", "content": "plan the work"},
            {"role": "user", "content": "what is 2 + 3 times 4"},
            {"role": "assistant", "content": "summary of 1 messages"},
        ],
        [
            {"role": "system", "content": "summarise"},
            *EXPECTED[2:],
            {"role": "assistant", "content": "summary of 4 messages"},
        ],
    ]
    assert all(h.messages[-1].completion_id for h in trajectory.additional_histories)


def test_a_node_that_raises_keeps_the_trajectory_with_the_error(agent) -> None:
    graph = planner_graph(agent, PolicyChatModel(policy=summariser_policy), fail_after_summary=True)
    handler = TrajectoryCallbackHandler()
    with pytest.raises(ValueError, match="summary rejected"):
        graph.invoke(QUESTION, config=config(handler))
    trajectory = handler.trajectory
    assert trajectory is not None
    assert trajectory.error == "ValueError: summary rejected"
    assert trajectory.openai_messages() == EXPECTED
    assert len(trajectory.additional_histories) == 2


async def test_a_failing_model_call_is_logged_and_the_run_error_kept(calc_tools) -> None:
    def broken(messages):
        raise ConnectionError("backend down")

    agent = react_agent(PolicyChatModel(policy=broken), calc_tools)
    handler = TrajectoryCallbackHandler()
    with pytest.raises(ConnectionError):
        await agent.ainvoke(QUESTION, config=config(handler))
    trajectory = handler.trajectory
    assert trajectory.error == "ConnectionError: backend down"
    assert trajectory.logs == ["model call failed: ConnectionError: backend down"]
    assert [m.role for m in trajectory.messages] == ["system", "user"]  # the input is kept


@tool
def divide(a: int, b: int) -> float:
    """Divide a by b."""
    if b == 0:
        raise ToolException("cannot divide by zero")
    return a / b


@tool
def explode(a: int, b: int) -> int:
    """Always fails with an unexpected error."""
    raise RuntimeError("tool bug")


async def test_tool_errors_are_recorded() -> None:
    def policy(messages):
        if messages[-1].type == "human":
            return AIMessage(
                content="",
                tool_calls=[
                    {"name": "divide", "args": {"a": 1, "b": 0}, "id": "d1", "type": "tool_call"},
                    {"name": "explode", "args": {"a": 1, "b": 2}, "id": "e1", "type": "tool_call"},
                ],
            )
        return AIMessage(content="both failed")

    divide.handle_tool_error = True
    agent = react_agent(PolicyChatModel(policy=policy), ToolNode([divide, explode], handle_tool_errors=True))
    handler = TrajectoryCallbackHandler()
    await agent.ainvoke(QUESTION, config=config(handler))
    records = {r.call_id: r for r in handler.trajectory.tool_records}
    assert (
        records["d1"].is_error
        and records["d1"].result == "cannot divide by zero"
        and records["d1"].error is None
    )
    assert records["e1"].is_error and records["e1"].error == "RuntimeError: tool bug"
    tool_messages = [m for m in handler.trajectory.messages if m.role == "tool"]
    assert [m.tool_call_id for m in tool_messages] == ["d1", "e1"]  # the model saw both errors


async def test_concurrent_runs_sharing_one_handler_get_their_own_trajectories(agent) -> None:
    handler = TrajectoryCallbackHandler()
    questions = [f"what is {i} + {i + 1} times {i + 2}" for i in range(12)]
    await asyncio.gather(
        *(agent.ainvoke({"messages": [("user", q)]}, config=config(handler)) for q in questions)
    )
    trajectories = handler.trajectories
    assert len(trajectories) == 12
    by_question = {t.messages[1].content: t for t in trajectories}
    assert set(by_question) == set(questions)
    for i, question in enumerate(questions):
        trajectory = by_question[question]
        assert len(trajectory.messages) == 6
        assert sorted((r.name, r.result) for r in trajectory.tool_records) == [
            ("add", str(2 * i + 1)),
            ("multiply", str((i + 1) * (i + 2))),
        ]
        assert trajectory.messages[-1].content == f"The results are {2 * i + 1} and {(i + 1) * (i + 2)}."
        assert trajectory.messages[2].completion_id == completion_id_for(
            [SystemMessage("You are a calculator."), HumanMessage(question)]
        )


def test_concurrent_sync_runs_on_threads(agent) -> None:
    handler = TrajectoryCallbackHandler()

    def run(i: int) -> None:
        agent.invoke({"messages": [("user", f"what is {i} + 1 times 2")]}, config=config(handler))

    with ThreadPoolExecutor(max_workers=8) as pool:
        for future in [pool.submit(run, i) for i in range(8)]:
            future.result()  # re-raises a run's failure here
    results = sorted(next(r.result for r in t.tool_records if r.name == "add") for t in handler.trajectories)
    assert results == sorted(str(i + 1) for i in range(8))


def test_trajectories_round_trip_through_json(agent) -> None:
    handler = TrajectoryCallbackHandler()
    agent.invoke(QUESTION, config=config(handler))
    trajectory = handler.trajectory
    assert Trajectory.model_validate_json(trajectory.model_dump_json()) == trajectory


def test_on_trajectory_callback_and_recorder_options(agent) -> None:
    seen: list[Trajectory] = []
    handler = TrajectoryCallbackHandler(on_trajectory=seen.append, max_finished=1)
    agent.invoke(QUESTION, config=config(handler))
    agent.invoke(QUESTION, config=config(handler))
    assert len(seen) == 2 and handler.trajectories == seen[1:]
    assert handler.pop_trajectories() == seen[1:] and handler.trajectory is None
    with pytest.raises(aa.ConfigError):
        TrajectoryCallbackHandler(recorder=handler.recorder, max_finished=3)


async def test_a_stream_abandoned_midway_or_a_cancelled_run_still_yields_its_trajectory(agent) -> None:
    handler = TrajectoryCallbackHandler()
    stream = agent.astream(QUESTION, config=config(handler))
    async for _ in stream:
        break  # the consumer stops after the first step
    await stream.aclose()
    trajectory = handler.trajectory
    assert trajectory is not None and trajectory.error == "GeneratorExit"
    assert [m.role for m in trajectory.messages] == ["system", "user", "assistant"]

    cancelled = TrajectoryCallbackHandler()
    task = asyncio.create_task(agent.ainvoke(QUESTION, config=config(cancelled)))
    for _ in range(3):
        await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cancelled.trajectory is not None and cancelled.trajectory.error == "CancelledError"
    assert cancelled.recorder.active_runs == 0 and handler.recorder.active_runs == 0
