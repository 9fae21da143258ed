"""train-mcp as a new user runs it: the README's command, no judge endpoint, the embedded backend and
the bundled model, in its own process (issue 25).

Before, every such run stopped at step 0 with exit code 1 (the bundled judge scored every rollout of a
group alike). Now the local judge's default reward adds what the tools did (``judge+tools``), a
bundled server trains on its shipped scenarios, and the held-out evaluation is scored by the tools.
The README's command with 2 of its 4 steps and a greedy held-out evaluation (pinned here so the
test's cost stays put; the defaults' sampled evaluation and its tool-error rate are measured in the
README, "MCP-RL"): every step asked for trains, the run ends with exit code 0, and the greedy held-out
tool-error rate is no worse after training than before.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest

from mcp_tools.servers import server_command

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]  # the bundled model on a shared CPU


async def _train_mcp(tmp_path: Path, *args: str) -> tuple[int, str, list[dict]]:
    """``art-adapters train-mcp ...`` in its own process with no judge configured: (exit code, output, rows)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ART_ADAPTERS_JUDGE", "OPENAI_"))}
    env.update({"COLUMNS": "200", "ART_ADAPTERS_CACHE_DIR": str(tmp_path / "cache")})
    run_dir = tmp_path / "run"
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "art_adapters.apps", "train-mcp", *args, "--run-dir", str(run_dir),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=env,
    )  # fmt: skip
    output, _ = await process.communicate()
    metrics = run_dir / "metrics.jsonl"
    rows = [json.loads(line) for line in metrics.read_text().splitlines()] if metrics.exists() else []
    return process.returncode or 0, " ".join(output.decode().split()), rows


async def test_the_readme_command_with_no_judge_trains_every_step(tmp_path: Path) -> None:
    code, output, rows = await _train_mcp(
        tmp_path, " ".join(server_command("notes")), "--steps", "2", "--eval-temperature", "0",
        "--val-fraction", "0.25",
    )
    assert code == 0, output
    assert "judge: the base model on the backend" in output
    assert "reward: half RULER's judge, half what the tools did (the default with this judge; --reward)" in output
    assert "held-out evaluation: what the tools did" in output
    assert "no scenario writer configured: training on the 16 hand-written scenarios shipped with this server" in output
    train = [r for r in rows if r["split"] == "train"]
    # Every step asked for trained (issue 25: exit 0, no step left untrained). A batch whose groups all
    # scored alike trains nothing and is followed by the next batch (its row keeps the model's step and
    # the console says why); once in a suite run both groups of a batch did (the local judge scored
    # every rollout 0.0, and the tools' reward was alike within each group).
    steps = [r["step"] for r in train]
    trained = [step for before, step in zip([0, *steps], steps, strict=False) if step == before + 1]
    assert trained == [1, 2] and steps[-1] == 2, (steps, output)
    untrained = len(steps) - len(trained)
    assert untrained == output.count("trained nothing: nothing trainable"), output
    for row in train:
        assert row["trajectories"] == 8 and 0 <= row["tool_calls_ok_mean"] <= 1 and "first_turn_cut_mean" in row
    before, after = [r for r in rows if r["split"] == "val"]
    assert (before["step"], after["step"]) == (0, 2) and before["trajectories"] == after["trajectories"] == 4
    assert after.get("tool_error_rate", 0.0) <= before.get("tool_error_rate", 0.0), (before, after)
