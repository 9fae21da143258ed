"""Fixtures for capture tests: calculator tools and agents on a deterministic fake chat model."""

from __future__ import annotations

import pytest
from langchain_core.tools import BaseTool

from tests.helpers.capture_fakes import PolicyChatModel, add, calculator_policy, multiply, react_agent


@pytest.fixture
def calc_tools() -> list[BaseTool]:
    """``add`` and ``multiply`` as LangChain tools."""
    return [add, multiply]


@pytest.fixture
def model() -> PolicyChatModel:
    """A fresh fake chat model following :func:`capture_fakes.calculator_policy`."""
    return PolicyChatModel(policy=calculator_policy)


@pytest.fixture
def agent(model, calc_tools):
    """The prebuilt ReAct agent on the fake model with the calculator tools."""
    return react_agent(model, calc_tools)
