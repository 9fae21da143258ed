"""Capture an existing LangGraph ReAct agent and its MCP tool calls as an ``aa.Trajectory``.

What it shows: the agent is plain ``langgraph.prebuilt.create_react_agent`` on
``model.chat_model()`` (the embedded backend's bundled SmolLM2-135M) with the bundled
calculator MCP server's tools; nothing in the graph changes. ``aa.TrajectoryCallbackHandler``
records the run, ``mcp_tools.rollout()`` gives it its own MCP session, and the backend keeps
the exact tokens it sampled for every assistant turn (looked up by ``completion_id``).

Run:  .venv/bin/python examples/capture_agent.py ["What is 19 + 23?"]
Time: about 15 s on a 2-core CPU (the very first backend start also converts the bundled
      model, about a minute more). Backend data goes to .art/examples/backend.
"""

from __future__ import annotations

import asyncio
import json
import sys
import warnings

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.prebuilt import create_react_agent

import art_adapters as aa
import mcp_tools

# create_react_agent is deprecated in LangGraph 1.x in favour of langchain.agents.create_agent,
# but it is what many existing agents use; both are captured the same way.
warnings.filterwarnings("ignore", message="create_react_agent has been moved")

CALCULATOR = f"{sys.executable} -m mcp_tools.servers.calculator"  # a stdio MCP server, started per session

# One worked example as real conversation turns: a 135M model needs the foothold.
EXAMPLE = [
    HumanMessage("What is 12 + 30?"),
    AIMessage("", tool_calls=[{"name": "add", "args": {"a": 12, "b": 30}, "id": "call_example"}]),
    ToolMessage("42", tool_call_id="call_example"),
    AIMessage("12 + 30 = 42"),
]


async def main(question: str) -> None:
    async with aa.LocalBackend(run_dir=".art/examples/backend") as backend:  # stopped on exit
        model = aa.TrainableModel(name="examples-capture", project="examples")
        await model.register(backend)  # step 0: the base weights

        # The existing agent: a LangGraph ReAct loop over the MCP server's tools.
        tools = [t for t in await mcp_tools.load_tools(CALCULATOR) if t.name in ("add", "subtract")]
        llm = model.chat_model(temperature=0.0, max_tokens=64)
        free, must_call = llm.bind_tools(tools), llm.bind_tools(tools, tool_choice="required")

        def pick_model(state: dict, runtime: object) -> object:  # a 135M model needs a nudge:
            return must_call if state["messages"][-1].type == "human" else free  # call a tool first

        agent = create_react_agent(pick_model, tools, prompt="Use the add tool, then state the result.")

        # Capture: a callback handler on the run, one MCP session for the rollout.
        handler = aa.TrajectoryCallbackHandler()
        async with mcp_tools.rollout():
            await agent.ainvoke(
                {"messages": [*EXAMPLE, HumanMessage(question)]},
                config={"callbacks": [handler], "recursion_limit": 8},
            )
        trajectory = handler.trajectory
        if trajectory is None:
            raise SystemExit("the run produced no trajectory")
        print(json.dumps(trajectory.model_dump(mode="json", exclude_none=True), indent=2))

        # Every assistant turn the backend sampled carries a completion id -> its exact tokens.
        final = [m for m in trajectory.messages if m.role == "assistant" and m.completion_id][-1]
        record = await backend.get_token_record(final.completion_id)
        choice = record["choices"][0]
        print(f"\ntoken record {record['id']} (model {record['model']}, step {record['step']}):")
        print(f"  prompt tokens:     {len(record['prompt_token_ids'])}")
        print(f"  completion tokens: {choice['completion_token_ids']}")
        print(f"  their logprobs:    {[round(lp, 3) for lp in choice['logprobs']]}")
        print(f"  raw text:          {choice['text']!r}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "What is 19 + 23?"))
