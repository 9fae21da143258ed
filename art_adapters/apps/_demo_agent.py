"""The demo's task: addition questions for a LangGraph ReAct agent on the bundled calculator MCP server.

Scenarios, the agent, its verifiable reward (:func:`check`) and its rollout, small enough for a
135M model to succeed sometimes, so GRPO has signal to learn from.
"""

from __future__ import annotations

import json
import random
import re
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import BaseTool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt import ToolNode
from pydantic import BaseModel

from art_adapters import Trajectory, TrajectoryCallbackHandler

__all__ = [
    "CALCULATOR_SERVER",
    "SYSTEM_PROMPT",
    "AddScenario",
    "ScriptedPolicy",
    "TeacherModel",
    "build_agent",
    "check",
    "check_parts",
    "make_rollout",
    "make_scenarios",
    "scripted_trajectories",
    "teacher_trajectories",
]

#: The bundled calculator MCP server, started over stdio with this Python.
CALCULATOR_SERVER = [sys.executable, "-m", "mcp_tools.servers.calculator"]

SYSTEM_PROMPT = (
    "You are a careful assistant. Use the add tool for arithmetic, then answer with the result.\n\n"
    "A call of add looks like this (use the numbers of the user's question, not these):\n"
    '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>\n\n'
    "When the tool's result arrives inside <tool_response></tool_response>, use it to answer the user."
)
"""The demo agent's system prompt: the task, and how a call is written in the bundled model's
Hermes tool syntax (the foothold the backend used to inject, now where deployment sees it too)."""

#: Tools offered to the model (the server has more; fewer keeps the prompt short on CPU).
DEMO_TOOLS = ("add", "subtract")


class AddScenario(BaseModel):
    """One demo question: ``What is a + b?`` with its answer."""

    id: str
    a: int
    b: int

    @property
    def question(self) -> str:
        """The user's question."""
        return f"What is {self.a} + {self.b}?"

    @property
    def answer(self) -> int:
        """The correct sum."""
        return self.a + self.b


def make_scenarios(n: int, *, seed: int = 0, low: int = 10, high: int = 99) -> list[AddScenario]:
    """``n`` distinct addition questions with two-digit numbers, reproducible from ``seed``."""
    rng = random.Random(seed)
    pairs: list[tuple[int, int]] = []
    seen: set[tuple[int, int]] = set()
    while len(pairs) < n:
        pair = (rng.randint(low, high), rng.randint(low, high))
        if pair not in seen and pair[::-1] not in seen:
            seen.add(pair)
            pairs.append(pair)
    return [AddScenario(id=f"add-{a}-{b}", a=a, b=b) for a, b in pairs]


def _example_turns() -> list[Any]:
    return [
        HumanMessage("What is 12 + 30?"),
        AIMessage("", tool_calls=[{"name": "add", "args": {"a": 12, "b": 30}, "id": "call_example"}]),
        ToolMessage("42", tool_call_id="call_example"),
        AIMessage("12 + 30 = 42"),
    ]


def build_agent(
    chat_model: BaseChatModel, tools: Sequence[BaseTool], *, max_turns: int = 3, force_first_call: bool = True
) -> CompiledStateGraph:
    """A LangGraph ReAct loop (model -> tools -> model ...) with the worked example before the question.

    The prompt gives the 135M base model its foothold: :data:`SYSTEM_PROMPT` shows how a call of
    ``add`` is written in the model's tool syntax, and one worked example follows as real
    conversation turns (a question, an ``add`` call, the tool's result, the final answer) before
    the question. The backend injects nothing, so this prompt is exactly what a deployment of the
    trained model (``vllm serve`` with the same chat template) sees too. At most ``max_turns``
    model turns; tool calls asked for in the last turn are not run.
    """
    chosen = [t for t in tools if t.name in DEMO_TOOLS] or list(tools)
    llm = chat_model.bind_tools(chosen)
    first = chat_model.bind_tools(chosen, tool_choice="required") if force_first_call else llm
    prefix = [SystemMessage(SYSTEM_PROMPT), *_example_turns()]

    async def call_model(state: dict[str, Any]) -> dict[str, Any]:
        turn = first if not any(m.type == "ai" for m in state["messages"]) else llm
        return {"messages": [await turn.ainvoke([*prefix, *state["messages"]])]}

    def route(state: dict[str, Any]) -> str:
        messages = state["messages"]
        turns = sum(1 for m in messages if m.type == "ai")
        return "tools" if getattr(messages[-1], "tool_calls", None) and turns < max_turns else END

    graph = StateGraph(MessagesState)
    graph.add_node("model", call_model)
    graph.add_node("tools", ToolNode(chosen, handle_tool_errors=True))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", route, ["tools", END])
    graph.add_edge("tools", "model")
    return graph.compile()


def _args(arguments: Any) -> dict[str, Any]:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return {}
    return arguments if isinstance(arguments, dict) else {}


def _number(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def check_parts(trajectory: Trajectory, scenario: AddScenario) -> tuple[bool, bool]:
    """``(add_call_ok, answer_ok)``: a correct ``add`` call was made; the final answer states the sum.

    Only the agent's own turns after the question count (the worked example is skipped).
    """
    messages = trajectory.messages
    start = max((i for i, m in enumerate(messages) if m.role == "user"), default=-1) + 1
    mine = [m for m in messages[start:] if m.role == "assistant"]
    want = {float(scenario.a), float(scenario.b)}
    called = False
    for message in mine:
        for call in message.tool_calls or []:
            args = _args(call.function.arguments)
            values = {_number(args.get("a")), _number(args.get("b"))}
            if call.function.name == "add" and values == want:
                called = True
    final = mine[-1] if mine and not mine[-1].tool_calls else None
    text = final.content if final is not None and isinstance(final.content, str) else ""
    numbers = re.findall(r"-?\d+(?:\.\d+)?", text)
    answered = bool(numbers) and _number(numbers[-1]) == float(scenario.answer)
    return called, answered


def check(trajectory: Trajectory, scenario: AddScenario) -> float:
    """The verifiable reward in [0, 1]: 0.5 for an ``add`` call whose arguments are the question's two
    numbers (in either order), 0.5 for a final answer that states the sum."""
    called, answered = check_parts(trajectory, scenario)
    return 0.5 * called + 0.5 * answered


def make_rollout(agent: CompiledStateGraph) -> Callable[[AddScenario], Awaitable[Trajectory]]:
    """``async def rollout(scenario) -> Trajectory`` for ``run_groups``: runs the agent, captures, checks.

    The trajectory's ``reward`` is left unset (the scorer sets it); the verifiable check is
    stored as ``metrics`` ``add_call_ok``, ``answer_ok`` and ``correct`` (both), for the tables.
    """
    async def rollout(scenario: AddScenario) -> Trajectory:
        handler = TrajectoryCallbackHandler()
        config = {"callbacks": [handler], "recursion_limit": 12}
        await agent.ainvoke({"messages": [("user", scenario.question)]}, config=config)
        trajectory = handler.trajectory
        if trajectory is None:
            raise RuntimeError(f"the agent run on {scenario.id} produced no trajectory")
        called, answered = check_parts(trajectory, scenario)
        trajectory.metrics["add_call_ok"] = float(called)
        trajectory.metrics["answer_ok"] = float(answered)
        trajectory.metrics["correct"] = float(called and answered)
        return trajectory

    return rollout


class ScriptedPolicy(BaseChatModel):
    """A hand-written policy for the demo's task, not a model: it answers like the worked example, always right.

    Asked ``What is a + b?`` it reads the two numbers with a regex and calls ``add(a, b)``; given the
    tool's result it answers ``a + b = result``. SFT on its runs (``DemoConfig.scripted_imitation``)
    is imitation of a script, not distillation: no model's knowledge is transferred. Real
    distillation trains on another model's rollouts (``art-adapters sft``).
    """

    @property
    def _llm_type(self) -> str:
        return "art-adapters-demo-scripted-policy"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedPolicy:
        """The script knows its one tool already; binding changes nothing."""
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        last = messages[-1]
        if isinstance(last, ToolMessage):
            question = next(m for m in reversed(messages) if isinstance(m, HumanMessage))
            a, b = re.findall(r"-?\d+", str(question.content))[:2]
            reply = AIMessage(f"{a} + {b} = {last.content}")
        else:
            a, b = (int(x) for x in re.findall(r"-?\d+", str(last.content))[:2])
            call = {"name": "add", "args": {"a": a, "b": b}, "id": f"call_{a}_{b}", "type": "tool_call"}
            reply = AIMessage("", tool_calls=[call])
        return ChatResult(generations=[ChatGeneration(message=reply)])


async def scripted_trajectories(scenarios: Sequence[AddScenario], tools: Sequence[BaseTool]) -> list[Trajectory]:
    """The scripted policy's runs of ``scenarios`` through the demo's own agent graph, captured: SFT data
    for imitating the script.

    Same graph, prompt, tools and MCP server as the trained agent, so the trajectories hold the
    exact conversation the policy will see; their turns carry no sampled tokens, so the backend
    renders them with the model's chat template when it trains on them.
    """
    rollout = make_rollout(build_agent(ScriptedPolicy(), tools))
    return [await rollout(scenario) for scenario in scenarios]


#: Deprecated names of :class:`ScriptedPolicy` and :func:`scripted_trajectories` (it was never a teacher model).
TeacherModel = ScriptedPolicy
teacher_trajectories = scripted_trajectories
