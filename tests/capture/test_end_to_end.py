"""End to end: a LangGraph ReAct agent on our backend's model calls the bundled calculator MCP server.

The trajectory the callback handler captures must link each assistant turn to the
backend's exact-token record (its completion id), and those token ids must decode to
what the turn says; the MCP call must be in the trajectory with its real result.
"""

from __future__ import annotations

import json
import warnings

import pytest

import mcp_tools
from art_adapters import LocalBackend, TrainableModel, TrajectoryCallbackHandler
from mcp_tools.servers import server_command
from mcp_tools.servers.calculator import format_number

pytestmark = pytest.mark.slow

SYSTEM = (
    "You are a calculator assistant. Use the tools for arithmetic.\n"
    "Example: to add 7 and 5 you call add with a=7 and b=5, read the result 12, then answer: 7 + 5 = 12."
)


async def test_react_agent_on_the_backend_calls_the_mcp_calculator(local_backend: LocalBackend) -> None:
    from langgraph.prebuilt import create_react_agent

    model = TrainableModel(name="e2e-capture", project="tests")
    await model.register(local_backend)
    tools = await mcp_tools.load_tools(server_command("calculator"))
    llm = model.chat_model(temperature=0.0, max_tokens=40)  # room for the constrained add(...) call
    answer_llm = model.chat_model(temperature=0.0, max_tokens=16)  # a short answer keeps the test fast

    def pick_model(state, runtime):
        # A tiny base model needs a foothold: the first turn is constrained to an `add` call (the backend's
        # grammar-constrained decoding), the answer turn may not call tools. Still one ReAct agent.
        if any(m.type == "tool" for m in state["messages"]):
            return answer_llm.bind_tools(tools, tool_choice="none")
        return llm.bind_tools(tools, tool_choice="add")

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        agent = create_react_agent(pick_model, tools, prompt=SYSTEM)
    handler = TrajectoryCallbackHandler()
    async with mcp_tools.rollout():
        await agent.ainvoke(
            {"messages": [("user", "What is 2 + 3?")]}, config={"callbacks": [handler], "recursion_limit": 8}
        )

    trajectory = handler.trajectory
    assert trajectory is not None and trajectory.error is None
    assert [m.role for m in trajectory.messages] == ["system", "user", "assistant", "tool", "assistant"]
    call_turn, tool_turn, answer_turn = trajectory.messages[2:]
    (call,) = call_turn.tool_calls
    arguments = json.loads(call.function.arguments)
    assert call.function.name == "add" and set(arguments) == {"a", "b"}

    (record,) = trajectory.tool_records
    expected = format_number(float(arguments["a"]) + float(arguments["b"]))
    assert (record.source, record.server, record.name, record.call_id) == (
        "mcp",
        "calculator",
        "add",
        call.id,
    )
    assert record.result == expected == tool_turn.content
    assert [t.name for t in trajectory.tools] == ["add", "subtract", "multiply", "divide", "power", "sqrt"]
    assert trajectory.metrics["prompt_tokens"] > 0 and trajectory.metrics["completion_tokens"] > 0

    from art_adapters_backend.bundled import load_tokenizer, resolve_model_path

    tokenizer = load_tokenizer(resolve_model_path("smollm2-135m-instruct"))
    for turn in (call_turn, answer_turn):
        assert turn.completion_id is not None and turn.completion_id.startswith("chatcmpl-")
        assert turn.model == "e2e-capture@0"  # the checkpoint that produced the turn, as the response names it
        token_record = await local_backend.get_token_record(turn.completion_id)
        assert token_record["id"] == turn.completion_id and token_record["trained_model"] == "e2e-capture"
        choice = token_record["choices"][0]
        assert choice["completion_token_ids"] and len(choice["logprobs"]) == len(
            choice["completion_token_ids"]
        )
        decoded = tokenizer.decode(choice["completion_token_ids"], skip_special_tokens=True)
        assert "What is 2 + 3?" in tokenizer.decode(token_record["prompt_token_ids"])
        if turn is call_turn:
            assert token_record["constrained"] is True
            assert "add" in decoded and all(str(v) in decoded for v in arguments.values())
        else:
            assert decoded.strip() == str(turn.content).strip() != ""


async def test_a_streamed_turn_on_the_backend_links_to_its_token_record(local_backend: LocalBackend) -> None:
    """``chat_model()`` keeps the backend's completion-id header, so streamed turns keep their exact tokens."""
    model = TrainableModel(name="e2e-stream", project="tests")
    await model.register(local_backend)
    llm = model.chat_model(temperature=0.0, max_tokens=12, stream_usage=True)
    handler = TrajectoryCallbackHandler()
    chunks = [c async for c in llm.astream("Say hello.", config={"callbacks": [handler]})]
    text = "".join(str(c.content) for c in chunks)

    reply = handler.trajectory.messages[-1]
    assert reply.role == "assistant" and reply.content == text
    assert reply.completion_id is not None and reply.completion_id.startswith("chatcmpl-")
    assert reply.model == "e2e-stream@0"  # "e2e-stream" resolved to its latest checkpoint
    record = await local_backend.get_token_record(reply.completion_id)
    assert record["id"] == reply.completion_id and record["choices"][0]["text"] == text
