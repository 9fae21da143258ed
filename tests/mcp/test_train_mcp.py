"""``art-adapters train-mcp`` end to end on the real backend and model, tiny settings."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

import art_adapters as aa
from mcp_tools import Scenario, load_scenarios, save_scenarios
from mcp_tools.servers import server_command

pytestmark = pytest.mark.slow

SCENARIOS = [
    Scenario(task="What is 17 + 25? Give me the number.", difficulty=1),
    Scenario(task="Add 120 and 33 for me.", difficulty=1),
]


async def _invoke(args: list[str]) -> tuple[int, str]:
    """Run the real command line in its own process (one event loop, as a user runs it)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "art_adapters.cli", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    output, _ = await process.communicate()
    return process.returncode or 0, " ".join(output.decode().split())


async def test_train_mcp_steps_0_evaluates_the_base_model_and_says_how_to_use_it(
    local_backend: aa.LocalBackend, tmp_path: Path
) -> None:
    scenarios = save_scenarios(SCENARIOS, tmp_path / "in.jsonl")
    run_dir = tmp_path / "run"
    code, output = await _invoke(
        [
            "train-mcp",
            " ".join(server_command("calculator")),
            "--scenarios", str(scenarios),
            "--run-dir", str(run_dir),
            "--backend-url", local_backend.base_url,
            "--steps", "0",
            "--val-fraction", "0.5",
            "--rollouts-per-group", "2",
            "--max-turns", "1",
            "--max-tokens", "32",
            "--model-name", "mcp-e2e",
        ],
    )  # fmt: skip
    assert code == 0, output
    assert "6 tools (add, subtract, multiply, divide, power, sqrt)" in output
    assert "judge: the base model on the backend" in output
    assert "1 train, 1 validation" in output
    assert "step-0 mean reward on validation:" in output
    assert f"run directory: {run_dir.resolve()}" in output
    assert 'model = aa.TrainableModel(name="mcp-agent"' not in output
    assert (
        'aa.TrainableModel(name="mcp-e2e", project="mcp-rl")' in output
        and "model.chat_model(step=0)" in output
    )
    assert f'aa.RemoteBackend("{local_backend.base_url}")' in output
    assert load_scenarios(run_dir / "scenarios.jsonl") == SCENARIOS  # kept with the run, editable
