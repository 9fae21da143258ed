"""train-mcp's metrics rows count the rollouts they cover, trained on or not (issue 25, point 5).

A step whose groups all scored alike trains nothing; its row said ``"trajectories": 0`` beside six
rollouts, because the trainer's own count (trajectories it used) replaced the rollouts' count. The loop
runs on the backend app (fake engine and trainer) with train-mcp's ``--reward tools`` scorer, whose
rollouts here call no tool, so every one scores 0 and the backend drops both groups.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console

from art_adapters.apps._train_mcp import TrainMcpConfig, _train
from art_adapters.observe import MetricsHistory
from tests.helpers.fake_backend import FakeBackend
from tests.helpers.models import registered
from tests.loop.test_loop import loop_config, make_rollout, scenarios


async def test_an_untrained_steps_row_counts_its_rollouts_and_keeps_the_trainers_count_apart(
    fake_backend: FakeBackend, tmp_path: Path
) -> None:
    model = await registered(fake_backend, "mcp-rows", "loop-tests")
    loop = loop_config(tmp_path, steps=1, eval_every=0).model_copy(
        update={"rollouts_per_group": 3, "max_untrained": 1}
    )
    config = TrainMcpConfig(server="python -m mcp_tools.servers.notes", run_dir=tmp_path, loop=loop)
    console = Console(record=True, width=400, color_system=None)
    rollout = make_rollout(model)
    no_judge: Any = None  # --reward tools calls no judge
    train = scenarios("r", 4)
    result = await _train(model, rollout, rollout, train, [], no_judge, {}, config, console, reward="tools")
    (step,) = result.steps
    assert not step.trained and result.stopped
    (row,) = MetricsHistory(tmp_path).rows("train")
    assert (row["groups"], row["trajectories"], row["exceptions"]) == (2, 6, 0), row
    # what the trainer received and what it used
    assert (row["trained_groups"], row["trained_trajectories"]) == (2, 0), row
    assert step.metrics["trajectories"] == 6 and row["reward_mean"] == 0.0
    assert "step 1: mean reward 0.000" in console.export_text()
