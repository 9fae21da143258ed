"""train-mcp as a new user runs it: no judge endpoint, the real backend and bundled model (issue 25).

Before, every such run stopped at step 0 with exit code 1: the bundled judge scored every rollout of a
group alike. With the local judge the default reward adds what the tools did (``judge+tools``), a bundled
server trains on its shipped scenarios. (On mcp-server-time, ``--reward tools`` at T=1.0 left a step of
2 x 3 rollouts untrained: every sampled timezone was invalid, so every rollout scored 0.2.)"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest

import art_adapters as aa
from mcp_tools.servers import server_command

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]  # the bundled model on a shared CPU

async def _train_mcp(backend: aa.LocalBackend, tmp_path: Path, *args: str) -> tuple[int, str, list[dict]]:
    """``art-adapters train-mcp ...`` in its own process with no judge configured: (exit code, output, rows)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ART_ADAPTERS_JUDGE", "OPENAI_"))}
    env.update({"COLUMNS": "200", "ART_ADAPTERS_CACHE_DIR": str(tmp_path / "cache")})
    run_dir = tmp_path / "run"
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "art_adapters.apps", "train-mcp", *args,
        "--run-dir", str(run_dir), "--backend-url", backend.base_url, "--model-name", f"defaults-{tmp_path.name[-20:]}",
        "--steps", "1", "--groups-per-step", "2", "--rollouts-per-group", "3", "--val-fraction", "0",
        "--max-turns", "2",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=env,
    )  # fmt: skip
    output, _ = await process.communicate()
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return process.returncode or 0, " ".join(output.decode().split()), rows


async def test_the_readme_command_with_no_judge_trains_on_the_shipped_scenarios(
    local_backend: aa.LocalBackend, tmp_path: Path
) -> None:
    code, output, rows = await _train_mcp(local_backend, tmp_path, " ".join(server_command("notes")))
    assert code == 0, output
    assert "judge: the base model on the backend" in output
    assert "reward: half RULER's judge, half what the tools did (the default with this judge; --reward)" in output
    assert "no scenario writer configured: training on the 16 hand-written scenarios shipped with this server" in output
    (train,) = [r for r in rows if r["split"] == "train"]
    assert train["step"] == 1 and "step 1: mean reward" in output and ", trained" in output
    assert 0 <= train["tool_calls_ok_mean"] <= 1 and "first_turn_cut_mean" in train  # the parts are in the rows
