"""Runner + capture + RULER end to end: a LangGraph graph replayed per scenario, judged over HTTP.

The graph's chat model is LangChain's own ``GenericFakeChatModel`` (scripted answers);
capture is our real ``TrajectoryCallbackHandler``; the judge is the scripted
OpenAI-compatible server, which scores a trajectory 1 when its answer is right.
"""

from __future__ import annotations

import re
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, MessagesState, StateGraph

import art_adapters as aa
from tests.helpers.judge_server import JudgeServer, scores

SYSTEM = "You are a careful calculator. Marker SYS-PIPE."
SCENARIOS = [{"id": "add-2-3", "a": 2, "b": 3}, {"id": "add-4-4", "a": 4, "b": 4}]
# Per scenario, the answers of its four rollouts: right, wrong, right, wrong by one.
ANSWERS = {"add-2-3": ["5", "6", "5", "4"], "add-4-4": ["8", "8", "9", "8"]}


def build_graph(answer: str) -> Any:
    model = GenericFakeChatModel(messages=iter([AIMessage(content=f"The sum is {answer}.")]))

    async def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_edge(START, "agent")
    graph.add_edge("agent", END)
    return graph.compile()


def judge_by_correctness(body: dict[str, Any]) -> dict[str, Any]:
    text = body["messages"][1]["content"]
    a, b = map(int, re.search(r"What is (\d+) \+ (\d+)\?", text).groups())
    blocks = re.findall(r'<trajectory id="(t\d+)">(.*?)</trajectory>', text, re.DOTALL)
    return {
        "content": scores(
            [(label, 1.0 if f"The sum is {a + b}." in block else 0.0) for label, block in blocks]
        )
    }


async def test_run_groups_then_ruler_on_captured_langgraph_runs(
    judge_server: JudgeServer, tmp_path: Any
) -> None:
    judge_server.reset(default=judge_by_correctness)
    calls: dict[str, int] = {}

    async def rollout(scenario: dict[str, Any]) -> aa.Trajectory:
        index = calls.get(scenario["id"], 0)
        calls[scenario["id"]] = index + 1
        handler = aa.TrajectoryCallbackHandler()
        question = f"What is {scenario['a']} + {scenario['b']}?"
        await build_graph(ANSWERS[scenario["id"]][index]).ainvoke(
            {"messages": [SystemMessage(SYSTEM), HumanMessage(question)]}, config={"callbacks": [handler]}
        )
        assert handler.trajectory is not None
        return handler.trajectory

    groups = await aa.run_groups(rollout, SCENARIOS, n=4, max_concurrency=1, progress=False)
    assert [g.metadata["scenario_id"] for g in groups] == ["add-2-3", "add-4-4"]
    assert all(len(g) == 4 for g in groups)

    judge = ChatOpenAI(base_url=judge_server.url, api_key="test", model="scripted-judge", max_retries=0)
    scored = await aa.ruler_score_groups(groups, judge=judge, cache=tmp_path)

    assert scored[0].rewards == [1.0, 0.0, 1.0, 0.0]
    assert scored[1].rewards == [1.0, 1.0, 0.0, 1.0]
    assert [g.metadata["ruler"]["distinct_trajectories"] for g in scored] == [3, 2]
    assert len(judge_server.requests) == 2  # one judge call per group
    for body in judge_server.raw_bodies:
        assert body.count("SYS-PIPE") == 1  # the captured system prompt, sent once per group
    for group in scored:
        for index, trajectory in enumerate(group.trajectories):
            assert trajectory.metadata["rollout_index"] == index
            assert trajectory.metadata["scenario_id"] == group.metadata["scenario_id"]
            assert trajectory.messages[0].role == "system" and trajectory.messages[-1].role == "assistant"
