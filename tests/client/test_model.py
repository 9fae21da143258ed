"""TrainableModel against the backend app (on the fake engine): registration, steps, and the LangChain chat
model in LangGraph."""

from __future__ import annotations

import asyncio
import json

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode

from art_adapters import BackendRequestError, ConfigError, TrainableModel
from tests.helpers.fake_backend import FakeBackend


async def test_register_serves_step_zero_under_both_names(fake_backend: FakeBackend) -> None:
    model = TrainableModel(name="agent-a", project="tests")
    await model.register(fake_backend)
    await model.register(fake_backend)  # idempotent
    assert await model.get_step() == 0
    served = {m["id"] for m in (await fake_backend.request("GET", "/v1/models"))["data"]}
    assert {"agent-a", "agent-a@0"} <= served


async def test_register_with_another_base_model_conflicts(fake_backend: FakeBackend) -> None:
    await TrainableModel(name="agent-b", project="tests").register(fake_backend)
    other = TrainableModel(name="agent-b", project="tests", base_model="/some/other/model")
    with pytest.raises(BackendRequestError) as info:
        await other.register(fake_backend)
    assert info.value.status_code == 409


def test_invalid_names_are_rejected_with_a_clear_message() -> None:
    with pytest.raises(ValueError, match="not a valid name"):
        TrainableModel(name="bad@name")
    with pytest.raises(ConfigError, match="register"):
        TrainableModel(name="fine").chat_model()


async def test_chat_model_answers_and_is_bound_to_the_step(fake_backend: FakeBackend) -> None:
    model = TrainableModel(name="agent-c", project="tests")
    await model.register(fake_backend)
    llm = model.chat_model(step=0, temperature=0.0, max_tokens=12)
    assert llm.model_name == "agent-c@0"
    reply = await llm.ainvoke("Say hello.")
    assert isinstance(reply, AIMessage) and reply.content.strip()
    chunks = [chunk async for chunk in model.chat_model(max_tokens=8).astream("Count: one, two,")]
    assert "".join(str(c.content) for c in chunks).strip()


def test_backend_client_and_chat_models_work_in_one_event_loop_after_another(fake_backend: FakeBackend) -> None:
    """A script may call ``asyncio.run`` several times (``run_groups_sync`` does): nothing is tied to a dead loop."""
    model = TrainableModel(name="agent-loops", project="tests")

    async def one_loop() -> str:
        await model.register(fake_backend)  # the backend's own HTTP client, made in an earlier loop
        reply = await model.chat_model(temperature=0.0, max_tokens=6).ainvoke("Say hi.")
        return str(reply.content)

    replies = [asyncio.run(one_loop()) for _ in range(3)]
    assert replies[0].strip() and replies == [replies[0]] * 3  # greedy: the same answer each time


async def test_chat_model_drives_a_langgraph_tool_loop(fake_backend: FakeBackend) -> None:
    @tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    model = TrainableModel(name="agent-d", project="tests")
    await model.register(fake_backend)
    # Forcing the tool makes the outcome deterministic: the backend constrains decoding to a valid call.
    llm = model.chat_model(temperature=0.0, max_tokens=48).bind_tools([add], tool_choice="add")

    async def call_model(state: MessagesState) -> dict[str, list[AIMessage]]:
        return {"messages": [await llm.ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("model", call_model)
    graph.add_node("tools", ToolNode([add]))
    graph.add_edge(START, "model")
    graph.add_edge("model", "tools")
    result = await graph.compile().ainvoke({"messages": [("user", "What is 2 + 3? Use the add tool.")]})

    ai, tool_result = result["messages"][1], result["messages"][2]
    assert isinstance(ai, AIMessage) and ai.tool_calls and ai.tool_calls[0]["name"] == "add"
    args = ai.tool_calls[0]["args"]
    assert set(args) == {"a", "b"} and all(isinstance(v, int) for v in args.values())
    assert isinstance(tool_result, ToolMessage)
    assert json.loads(tool_result.content) == args["a"] + args["b"]
