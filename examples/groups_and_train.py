"""Replay scenarios in groups, score them with your own reward, and train one GRPO step.

What it shows: ``aa.run_groups`` runs a LangGraph ReAct agent (calculator MCP tools, the
embedded backend's bundled SmolLM2-135M) 4 times on each of 3 addition questions; a
hand-written reward scores every rollout (no judge model needed); ``await model.train(groups)``
trains one LoRA step on the exact sampled tokens; the new checkpoint then answers a question.

Run:  .venv/bin/python examples/groups_and_train.py
Time: about 1.5 minutes on a 2-core CPU (plus about a minute on the very first backend start).
      A rerun continues training the same model (data in .art/examples/backend).
"""

from __future__ import annotations

import asyncio
import re
import sys
import warnings

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.prebuilt import create_react_agent

import art_adapters as aa
import mcp_tools

warnings.filterwarnings("ignore", message="create_react_agent has been moved")  # LangGraph 1.x
CALCULATOR = f"{sys.executable} -m mcp_tools.servers.calculator"
SCENARIOS = [{"id": "add-38-17", "a": 38, "b": 17}, {"id": "add-64-29", "a": 64, "b": 29},
             {"id": "add-75-48", "a": 75, "b": 48}]  # fmt: skip
EXAMPLE = [HumanMessage("What is 12 + 30?"),  # one worked example as real turns: a 135M model's foothold
           AIMessage("", tool_calls=[{"name": "add", "args": {"a": 12, "b": 30}, "id": "call_example"}]),
           ToolMessage("42", tool_call_id="call_example"), AIMessage("12 + 30 = 42")]  # fmt: skip


def build_agent(llm, tools):  # the "existing" agent; a 135M model must call a tool on its first turn
    free, must_call = llm.bind_tools(tools), llm.bind_tools(tools, tool_choice="required")
    pick = lambda state, runtime: must_call if state["messages"][-1].type == "human" else free
    return create_react_agent(pick, tools, prompt="Use the add tool for arithmetic, then state the result.")


def reward(trajectory: aa.Trajectory, a: int, b: int) -> float:
    """0.5 for an add(a, b) MCP call, 0.5 for a final answer whose last number is a + b."""
    turns = [m for m in trajectory.messages if m.role == "assistant"]
    called = any(r.name == "add" and {r.arguments.get("a"), r.arguments.get("b")} == {a, b}
                 for r in trajectory.tool_records)  # fmt: skip
    numbers = re.findall(r"-?\d+", turns[-1].content or "") if turns and not turns[-1].tool_calls else []
    return 0.5 * called + 0.5 * (bool(numbers) and int(numbers[-1]) == a + b)


async def main() -> None:
    async with aa.LocalBackend(run_dir=".art/examples/backend") as backend:
        model = aa.TrainableModel(name="examples-train", project="examples")
        await model.register(backend)
        print(f"model {model.name} at step {await model.get_step()}")
        tools = [t for t in await mcp_tools.load_tools(CALCULATOR) if t.name in ("add", "subtract")]
        agent = build_agent(model.chat_model(temperature=1.0, max_tokens=48), tools)  # sample: variety

        async def rollout(scenario: dict) -> aa.Trajectory:  # one captured run, scored by hand
            handler = aa.TrajectoryCallbackHandler()
            async with mcp_tools.rollout():
                question = f"What is {scenario['a']} + {scenario['b']}?"
                await agent.ainvoke({"messages": [*EXAMPLE, HumanMessage(question)]},
                                    config={"callbacks": [handler], "recursion_limit": 8})  # fmt: skip
            trajectory = handler.trajectory
            trajectory.reward = reward(trajectory, scenario["a"], scenario["b"])
            return trajectory

        groups = await aa.run_groups(rollout, SCENARIOS, n=4, max_concurrency=12, timeout_s=300)
        for group in groups:  # GRPO learns from the differences inside a group
            print(group.metadata["scenario_id"], [t.reward for t in group.trajectories], group.exceptions)

        result = await model.train(groups, config=aa.TrainConfig(learning_rate=5e-4))
        print(result.model_dump_json(indent=2))  # trained=False + reason when no group had variance

        greedy = build_agent(model.chat_model(temperature=0.0, max_tokens=48), tools)  # latest step
        async with mcp_tools.rollout():
            state = await greedy.ainvoke({"messages": [*EXAMPLE, HumanMessage("What is 345 + 278?")]})
        print(f"step {await model.get_step()} answers: {state['messages'][-1].content!r}")


if __name__ == "__main__":
    asyncio.run(main())
