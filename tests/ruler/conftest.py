"""Fixtures for the RULER tests: the scripted judge server and a ChatOpenAI pointed at it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from langchain_openai import ChatOpenAI

from tests.helpers.judge_server import JudgeServer


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
