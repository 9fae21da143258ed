"""The ``art-adapters demo`` main job (interim version: serve and answer with a tool).

It starts the embedded backend, registers a trainable model, and runs a real LangGraph
agent whose model is ``model.chat_model()`` and whose tool is a calculator, printing the
conversation. The training demo (issue 5) replaces this.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from langgraph.graph.state import CompiledStateGraph
    from rich.console import Console

    from .model import TrainableModel

__all__ = ["build_calculator_agent", "run_demo"]

logger = logging.getLogger(__name__)

SYSTEM_PROMPT = (
    "You are a careful assistant. Use the add tool for arithmetic, then answer with the result."
)


def build_calculator_agent(model: TrainableModel, *, step: int | None = None, **chat_kwargs: Any) -> CompiledStateGraph:
    """A two-node LangGraph ReAct loop (model -> tools -> model) with an ``add`` tool."""
    from langchain_core.messages import SystemMessage
    from langchain_core.tools import tool
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    @tool
    def add(a: float, b: float) -> float:
        """Add two numbers and return the sum."""
        return a + b

    llm = model.chat_model(step=step, **chat_kwargs).bind_tools([add])

    async def call_model(state: MessagesState) -> dict[str, Any]:
        messages = [SystemMessage(SYSTEM_PROMPT), *state["messages"]]
        return {"messages": [await llm.ainvoke(messages)]}

    graph = StateGraph(MessagesState)
    graph.add_node("model", call_model)
    graph.add_node("tools", ToolNode([add]))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition)
    graph.add_edge("tools", "model")
    return graph.compile()


async def run_demo(*, run_dir: Path, question: str, console: Console) -> None:
    """Start the backend, register ``demo-agent`` and let the agent answer ``question``."""
    from .backends import LocalBackend
    from .model import TrainableModel

    started = time.monotonic()
    with console.status("starting the embedded backend (the first start converts the bundled model)"):
        backend = await LocalBackend(run_dir=run_dir / "backend").start()
    try:
        console.print(f"backend serving at [bold]{backend.base_url}[/bold] ({time.monotonic() - started:.1f} s)")
        model = TrainableModel(name="demo-agent", project="demo")
        await model.register(backend)
        console.print(f"registered [bold]{model.name}[/bold] at step {await model.get_step()}")
        agent = build_calculator_agent(model, temperature=0.0, max_tokens=96)
        with console.status("the agent is thinking"):
            result = await agent.ainvoke({"messages": [("user", question)]}, {"recursion_limit": 8})
        for message in result["messages"]:
            calls = getattr(message, "tool_calls", None)
            text = message.content if isinstance(message.content, str) else str(message.content)
            console.print(f"[bold]{message.type}[/bold]: {text}" + (f"  tool_calls={calls}" if calls else ""))
    finally:
        await backend.close()
