"""Metrics history (append-safe JSON Lines), group statistics, PNG charts, the ``plot`` command, W&B off."""

from __future__ import annotations

import json
import logging
import statistics
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

import art_adapters as aa
from art_adapters._errors import ConfigError
from art_adapters.apps._cli import app
from art_adapters.observe import MetricsHistory, ObserveConfig, Observer, group_metrics, plot_run


def test_group_metrics_of_a_real_scored_run(scored_groups: list[aa.TrajectoryGroup]) -> None:
    row = group_metrics(scored_groups)
    rewards = [t.reward for g in scored_groups for t in g.trajectories]
    assert row["trajectories"] == 6 and row["exceptions"] == 0 and row["exception_rate"] == 0.0
    assert row["reward_mean"] == pytest.approx(statistics.fmean(rewards))
    assert row["reward_std"] == pytest.approx(statistics.pstdev(rewards)) and row["reward_std"] > 0
    assert row["reward_max"] == 1.0
    assert row["tool_calls_mean"] == 3.0 and row["model_calls_mean"] == 2.0
    calls = [r for g in scored_groups for t in g.trajectories for r in t.tool_records]
    assert row["tool_call_rate"] == 1.0
    assert row["tool_error_rate"] == pytest.approx(sum(r.is_error for r in calls) / len(calls))
    silent = aa.Trajectory(
        messages=[aa.Message(role="user", content="hi"), aa.Message(role="assistant", content="hello")]
    )
    broken = aa.Trajectory(
        messages=[aa.Message(role="user", content="hi")],
        tool_records=[aa.ToolCallRecord(name="add", is_error=True), aa.ToolCallRecord(name="add", result="3")],
    )
    unrun = aa.Trajectory(  # the model asked for a tool, but the run ended before it ran
        messages=[
            aa.Message(role="user", content="hi"),
            aa.Message(role="assistant", tool_calls=[{"id": "c", "function": {"name": "add", "arguments": "{}"}}]),
        ]
    )
    rates = group_metrics([aa.TrajectoryGroup(trajectories=[silent, broken, unrun, silent])])
    assert rates["tool_call_rate"] == 0.5 and rates["tool_error_rate"] == 0.5
    assert "tool_error_rate" not in group_metrics([aa.TrajectoryGroup(trajectories=[silent])])
    assert row["prompt_tokens_mean"] > 0 and row["duration_s_mean"] > 0
    failed = aa.TrajectoryGroup(exceptions=[aa.RolloutFailure(type="ValueError", message="x")])
    assert group_metrics([*scored_groups, failed])["exception_rate"] == pytest.approx(1 / 7)


def test_history_rows_per_step_and_split_append_safe(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    history = MetricsHistory(tmp_path / "run")  # a directory: metrics.jsonl inside
    assert history.path == tmp_path / "run" / "metrics.jsonl" and history.rows() == []

    def write(worker: int) -> None:
        for step in range(50):
            history.append(step, {"reward_mean": worker + step / 100, "blob": "x" * 2000}, split=f"w{worker}")

    threads = [threading.Thread(target=write, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    lines = history.path.read_text().splitlines()
    assert len(lines) == 200 and all(
        json.loads(line)["blob"] == "x" * 2000 for line in lines
    )  # no interleaving
    assert history.series("reward_mean", "w2") == (list(range(50)), [2 + s / 100 for s in range(50)])

    history.append(3, {"loss": float("nan"), "kl": 0.5})  # NaN kept as a gap, not invalid JSON
    with history.path.open("a") as handle:
        handle.write('{"step": 4, "split": "train", "lo')  # a torn last line (crash mid-write)
    caplog.set_level(logging.WARNING)
    assert history.series("kl") == ([3], [0.5]) and history.series("loss") == ([], [])
    assert "torn write" in caplog.text
    assert set(history.splits()) == {"w0", "w1", "w2", "w3", "train"}
    with pytest.raises(ConfigError, match="step"):
        history.append(-1, {})
    with pytest.raises(ConfigError, match="split"):
        history.append(1, {}, split="")


def fill_history(path: Path) -> MetricsHistory:
    history = MetricsHistory(path)
    for step in range(6):
        history.append(
            step, {"reward_mean": 0.1 * step, "reward_std": 0.05, "reward_min": 0.0, "reward_max": 0.2 * step}
        )
        history.append(step, {"loss": 1.0 / (step + 1), "kl": 0.01 * step}, split="train")
        if step % 2 == 0:
            history.append(
                step, {"reward_mean": 0.08 * step, "reward_std": 0.02, "exception_rate": 0.0}, split="val"
            )
        history.append(step, {"tool_call_rate": 0.5 + 0.1 * step, "tool_error_rate": 0.3}, split="train")
    return history


def test_observer_writes_rollout_and_train_rows(
    scored_groups: list[aa.TrajectoryGroup], tmp_path: Path
) -> None:
    observer = Observer(ObserveConfig(metrics_path=tmp_path / "metrics.jsonl"))
    assert not observer.enabled  # no destination: files only
    observer.log_rollouts(scored_groups, step=0)
    observer.log_rollouts(scored_groups[:1], step=0, split="val")
    observer.log_train_metrics(0, {"loss": 0.7, "kl": 0.0})
    rows = observer.history.rows()
    assert [(r["step"], r["split"]) for r in rows] == [(0, "train"), (0, "val"), (0, "train")]
    assert rows[0]["trajectories"] == 6 and rows[1]["trajectories"] == 3 and rows[2]["loss"] == 0.7


def test_plot_run_writes_readable_pngs(tmp_path: Path) -> None:
    fill_history(tmp_path / "metrics.jsonl")
    paths = plot_run(tmp_path)
    assert [p.name for p in paths] == [
        "reward.png", "loss.png", "kl.png", "exception_rate.png", "tool_call_rate.png", "tool_error_rate.png"
    ]
    for path in paths:
        data = path.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
        assert path.parent == tmp_path / "plots"


def test_plot_command(tmp_path: Path) -> None:
    fill_history(tmp_path / "run" / "metrics.jsonl")
    runner = CliRunner()
    result = runner.invoke(app, ["plot", str(tmp_path / "run"), "--out", str(tmp_path / "charts")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "charts" / "reward.png").is_file() and "reward.png" in result.output
    missing = runner.invoke(app, ["plot", str(tmp_path / "nowhere")])
    assert missing.exit_code == 2 and "no metrics history" in missing.output
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "metrics.jsonl").write_text("")
    assert runner.invoke(app, ["plot", str(empty)]).exit_code == 2
    assert "plot" in runner.invoke(app, ["plot", "--help"]).output


def test_the_retired_wandb_setting_says_what_replaced_it() -> None:
    with pytest.raises(ValueError, match="W&B .and Trackio. are trackers now"):
        ObserveConfig(wandb=True)
    with pytest.raises(ConfigError, match="trackers_from_env"):
        ObserveConfig.from_env({}, wandb=True)


def test_plot_errors_are_clear(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no metrics history"):
        plot_run(tmp_path / "missing")
    history = MetricsHistory(tmp_path / "metrics.jsonl")
    history.append(0, {"something": 1})
    with pytest.raises(ConfigError, match="no reward, loss or KL"):
        plot_run(tmp_path)
