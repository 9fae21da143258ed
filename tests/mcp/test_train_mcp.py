"""``art-adapters train-mcp`` end to end: the real command line, backend, model, MCP server and training
loop, one GRPO step with tiny settings. The judge is the scripted OpenAI-compatible judge server of the
RULER tests (scores 1, 1/2, 1/3... so every group carries signal); the real local judge is exercised by
tests/ruler and scenario generation by test_generate_local.py."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest

import art_adapters as aa
from mcp_tools import Scenario, load_scenarios, save_scenarios
from mcp_tools.servers import server_command
from tests.helpers.judge_server import JudgeServer  # the RULER tests' scripted judge

pytestmark = pytest.mark.slow

SCENARIOS = [
    Scenario(task="What is 17 + 25? Give me the number.", difficulty=1),
    Scenario(task="Add 120 and 33 for me.", difficulty=1),
]


async def _invoke(args: list[str], cache_dir: Path) -> tuple[int, str]:
    """Run the real command line in its own process (one event loop, as a user runs it)."""
    env = {**os.environ, "COLUMNS": "200", "ART_ADAPTERS_CACHE_DIR": str(cache_dir)}  # a fresh RULER cache
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "art_adapters.apps", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=env,
    )  # fmt: skip
    output, _ = await process.communicate()
    return process.returncode or 0, " ".join(output.decode().split())


async def test_train_mcp_trains_one_step_evaluates_plots_and_says_how_to_use_it(
    local_backend: aa.LocalBackend, tmp_path: Path
) -> None:
    scenarios = save_scenarios(SCENARIOS, tmp_path / "in.jsonl")
    run_dir = tmp_path / "run"
    with JudgeServer() as judge:
        judge_url = judge.url
        code, output = await _invoke(
            [
                "train-mcp",
                " ".join(server_command("calculator")),
                "--scenarios", str(scenarios),
                "--run-dir", str(run_dir),
                "--backend-url", local_backend.base_url,
                "--judge-model", "scripted-judge",
                "--judge-base-url", judge_url,
                "--steps", "1",
                "--groups-per-step", "1",
                "--val-fraction", "0.5",
                "--rollouts-per-group", "3",
                "--max-turns", "2",
                "--max-tokens", "96",  # room for a forced call: one cut by the limit does not parse
                "--model-name", "mcp-e2e",
                "--exclude-tools", "sqrt",
            ],
            tmp_path / "ruler-cache",
        )  # fmt: skip
        judged = list(judge.requests)
    assert code == 0, output
    assert (
        "6 tools; offering add, subtract, multiply, divide, power (left out: sqrt); "
        "first turn tool_choice 'required'"
    ) in output
    assert f"judge: scripted-judge at {judge_url} (--judge-model)" in output
    assert "reward: RULER's judge (the default with this judge; --reward)" in output  # RULER drives it
    assert "1 train, 1 validation" in output
    assert "eval at step 0: mean reward" in output and "eval at step 1: mean reward" in output
    assert "step 1: mean reward" in output and ", trained" in output
    assert f"run directory: {run_dir.resolve()}" in output
    assert "aa.TrainableModel(name='mcp-e2e', project='mcp-rl')" in output
    assert "model.chat_model(step=1)" in output and f"aa.RemoteBackend({local_backend.base_url!r})" in output
    # the judge saw the step-0 evaluation and the training group; the step-1 evaluation too unless its
    # rollouts did not change (then RULER's cache answered); all through RULER's json_schema
    assert len(judged) in (2, 3)
    assert all(r["response_format"]["type"] == "json_schema" for r in judged)
    # the run directory holds the scenarios (editable), the metrics and the reward plot
    assert load_scenarios(run_dir / "scenarios.jsonl") == SCENARIOS
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert {(r["split"], r["step"]) for r in rows} >= {("val", 0), ("train", 1), ("val", 1)}
    # the forced first turn: every rollout called a tool, and the console says so with the file's numbers
    (train_row,) = [r for r in rows if r["split"] == "train"]
    assert all(r["tool_call_rate"] == 1.0 for r in rows) and "tool_error_rate" in train_row, [
        {k: r.get(k) for k in ("step", "split", "tool_call_rate", "tool_calls_mean", "model_calls_mean")} for r in rows
    ]
    reward = train_row["reward_mean"]
    assert f"step 1: mean reward {reward:.3f}, tools called in 100% of rollouts" in output
    assert (run_dir / "plots" / "tool_call_rate.png").stat().st_size > 0
    assert (run_dir / "plots" / "reward.png").stat().st_size > 0
    model = aa.TrainableModel(name="mcp-e2e", project="mcp-rl")
    await model.register(local_backend)
    assert await model.get_step() == 1
