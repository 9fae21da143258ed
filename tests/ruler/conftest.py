"""Fixtures for the RULER tests: the scripted judge server and a ChatOpenAI pointed at it; and
scripted judges that score by content (agreeing, disagreeing, drifting, one that rewards length),
each on its own server, for ensembles, dimensions and judge identity."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from langchain_openai import ChatOpenAI

from tests.helpers.judge_server import JudgeServer, request_turns


@pytest.fixture(scope="module")
def judge_server() -> Iterator[JudgeServer]:
    """One scripted judge server per module on 127.0.0.1."""
    with JudgeServer() as server:
        yield server


@pytest.fixture
def server(judge_server: JudgeServer) -> JudgeServer:
    """The module's server with an empty script and no recorded requests."""
    judge_server.reset()
    return judge_server


@pytest.fixture
def judge(server: JudgeServer) -> ChatOpenAI:
    """A LangChain judge on the scripted server (the client's own retries off: ours are under test)."""
    return ChatOpenAI(
        base_url=server.url, api_key="test", model="scripted-judge", max_retries=0, temperature=0
    )


# Scripted judges that score by what they read, each on its own HTTP server on 127.0.0.1 (ensembles,
# dimensions, identity). A judge function maps one trajectory's text (its <trajectory> block) to a
# score, or to {dimension: score}; :func:`verdict_by` turns it into an answer to the request it sees.

Score = Callable[[str], "float | dict[str, float]"]


def trajectory_blocks(body: dict[str, Any]) -> dict[str, str]:
    """The request's trajectory ids -> the text of their ``<trajectory>`` blocks."""
    text = "\n".join(str(m.get("content")) for m in body["messages"])
    return dict(re.findall(r'<trajectory id="(t\d+)">(.*?)</trajectory>', text, flags=re.S))


def request_dimensions(body: dict[str, Any]) -> list[str]:
    """The dimensions a request asks for (from its schema), empty for a one-score request."""
    schema = ((body.get("response_format") or {}).get("json_schema") or {}).get("schema") or {}
    item = schema.get("properties", {}).get("scores", {}).get("items", {}).get("properties", {})
    return list(item.get("dimensions", {}).get("required", []))


def verdict_by(score: Score, explanation: str = "judged") -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A judge that answers every id of the request with ``score(its block)`` (per dimension when asked;
    a plain float then scores every dimension alike), and per turn when asked (each turn as its run)."""

    def answer(body: dict[str, Any]) -> dict[str, Any]:
        dimensions = request_dimensions(body)
        turns = request_turns(body)
        entries = []
        for label, block in trajectory_blocks(body).items():
            value = score(block)
            entry: dict[str, Any] = {"trajectory_id": label, "explanation": f"{explanation} {label}"}
            if dimensions:
                entry["dimensions"] = value if isinstance(value, dict) else {d: value for d in dimensions}
            else:
                entry["score"] = value
            if turns:
                overall = value if not isinstance(value, dict) else sum(value.values()) / len(value)
                entry["turn_scores"] = [overall] * turns[label]
            entries.append(entry)
        return {"content": json.dumps({"scores": entries})}

    return answer


def is_correct(block: str) -> bool:
    """Whether a trajectory of the test groups gave the right answer (5)."""
    return "The answer is 5" in block


def cautious(block: str) -> float:
    """Agrees with :func:`confident` on the order, with small margins (0.6 right, 0.45 wrong)."""
    return 0.6 if is_correct(block) else 0.45


def confident(block: str) -> float:
    """The right answer high, a wrong one low (0.55 and 0.5 minus a little per 100 characters)."""
    return max(0.0, (0.55 if is_correct(block) else 0.5) - 0.01 * (len(block) // 100))


def contrary(block: str) -> float:
    """Disagrees: the wrong answer high, the right one low."""
    return 0.1 if is_correct(block) else 0.8


def by_length(block: str) -> float:
    """Adversarial: rewards length (1.0 from 600 characters on), whatever the answer."""
    return min(1.0, len(block) / 600)


class Drifting:
    """Scores like :func:`cautious`, then 0.1 lower on every further request (a judge that drifts)."""

    def __init__(self) -> None:
        self.calls = 0
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            shift, self.calls = 0.1 * self.calls, self.calls + 1
        return verdict_by(lambda block: round(max(0.0, cautious(block) - shift), 6))(body)


#: The scripted judges by name: each gets its own server and a model of that name.
SCRIPTED = {
    "cautious": lambda: verdict_by(cautious),
    "confident": lambda: verdict_by(confident),
    "contrary": lambda: verdict_by(contrary),
    "by-length": lambda: verdict_by(by_length),
    "drifting": Drifting,
}


@dataclass
class ScriptedJudge:
    """One scripted judge: its server (requests recorded) and a ChatOpenAI on it."""

    server: JudgeServer
    model: ChatOpenAI

    def chat(self, **settings: Any) -> ChatOpenAI:
        """Another ChatOpenAI on the same server and model name, with other settings (temperature...)."""
        options = {"temperature": 0, **settings}
        return ChatOpenAI(
            base_url=self.server.url, api_key="test", model=self.model.model_name, max_retries=0, **options
        )


@pytest.fixture(scope="module")
def scripted_servers() -> Iterator[dict[str, JudgeServer]]:
    """One server per scripted judge, for the module."""
    servers = {name: JudgeServer().start() for name in SCRIPTED}
    try:
        yield servers
    finally:
        for server in servers.values():
            server.stop()


@pytest.fixture
def scripted(scripted_servers: dict[str, JudgeServer]) -> dict[str, ScriptedJudge]:
    """The scripted judges, reset (no requests, a fresh drift): name -> :class:`ScriptedJudge`."""
    judges = {}
    for name, make in SCRIPTED.items():
        server = scripted_servers[name]
        server.reset(default=make())
        model = ChatOpenAI(base_url=server.url, api_key="test", model=name, max_retries=0, temperature=0)
        judges[name] = ScriptedJudge(server, model)
    return judges
