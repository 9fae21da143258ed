"""What keeps a train-mcp run with no judge endpoint short (issue 25: the README's command within 15 minutes).

The embedded backend's torch threads leave cores to the MCP servers and the agent (``--threads``); the
held-out evaluation with the local judge is scored by what the tools did, with no judge call (a group of
one greedy rollout gives RULER nothing to rank). The evaluation runs on the backend app (fake engine and
trainer) with a real scripted judge on 127.0.0.1 that counts the calls it gets.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from langchain_openai import ChatOpenAI
from rich.console import Console

import art_adapters as aa
from art_adapters.apps import TrainMcpConfig
from art_adapters.apps._cli import TRAIN_MCP_OPTIONS
from art_adapters.apps._mcp_reward import eval_reward_of
from art_adapters.apps._options import build_config
from art_adapters.apps._train_mcp import _train
from art_adapters.apps._train_mcp_config import THREADS_ENV, backend_threads
from art_adapters.observe import MetricsHistory
from tests.helpers.fake_backend import FakeBackend
from tests.helpers.judge_server import JudgeServer
from tests.loop.test_loop import loop_config, make_rollout, scenarios

SERVER = "python -m mcp_tools.servers.notes"


def test_the_backends_threads_are_the_flag_else_the_environment_else_half_the_cores(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(THREADS_ENV, raising=False)
    assert backend_threads(TrainMcpConfig(server=SERVER)) == max(1, (os.cpu_count() or 2) // 2)
    monkeypatch.setenv(THREADS_ENV, "3")
    assert backend_threads(TrainMcpConfig(server=SERVER)) == 3
    assert backend_threads(TrainMcpConfig(server=SERVER, threads=2)) == 2
    monkeypatch.setenv(THREADS_ENV, "many")  # not a count: the default (the backend would refuse it)
    assert backend_threads(TrainMcpConfig(server=SERVER)) == max(1, (os.cpu_count() or 2) // 2)
    assert build_config(TrainMcpConfig, {"server": SERVER, "threads": 1}, TRAIN_MCP_OPTIONS).threads == 1
    with pytest.raises(ValueError, match="threads"):
        TrainMcpConfig(server=SERVER, threads=0)


def test_only_judge_plus_tools_with_the_local_judge_evaluates_by_the_tools() -> None:
    assert eval_reward_of("judge+tools", local_judge=True) == "tools"
    assert eval_reward_of("judge+tools", local_judge=False) == "judge+tools"  # a real judge keeps judging
    assert eval_reward_of("judge", local_judge=True) == "judge"  # asked for explicitly
    assert eval_reward_of("tools", local_judge=True) == "tools"


async def test_an_evaluation_scored_by_the_tools_makes_no_judge_call(
    fake_backend: FakeBackend, tmp_path: Path
) -> None:
    model = aa.TrainableModel(name="mcp-eval-tools", project="loop-tests")
    await model.register(fake_backend)
    loop = loop_config(tmp_path, steps=0, eval_every=0).model_copy(update={"eval_rollouts": 1})
    config = TrainMcpConfig(server=SERVER, run_dir=tmp_path, loop=loop)
    rollout = make_rollout(model)
    console = Console(record=True, width=400, color_system=None)
    with JudgeServer() as server:
        judge = ChatOpenAI(base_url=server.url, api_key="t", model="j", max_retries=0, temperature=0)
        options = {"cache": False, "max_retries": 0}
        result = await _train(
            model, rollout, rollout, scenarios("t", 2), scenarios("v", 3), judge, options, config, console,
            reward="judge+tools", eval_reward="tools",
        )  # fmt: skip
        assert server.requests == []
        (row,) = MetricsHistory(tmp_path).rows("val")
        assert row["trajectories"] == 3 and row["first_call_parsed_mean"] == 0.0  # the tools' reward parts
        assert result.evals[0].reward_mean == 0.0 and result.evals[0].scored == 3

        # the same evaluation scored by the training reward asks the judge about each held-out group
        await _train(
            model, rollout, rollout, scenarios("t", 2), scenarios("v", 3), judge, options, config, console,
            reward="judge+tools",
        )  # fmt: skip
        assert len(server.requests) == 3
