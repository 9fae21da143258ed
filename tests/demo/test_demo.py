"""``art-adapters demo`` end to end with the smallest settings, in its own process (as a user runs it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.slow
def test_short_demo_prints_the_table_writes_the_plot_and_answers(tmp_path: Path) -> None:
    run_dir = tmp_path / "demo"
    env = {**os.environ, "COLUMNS": "160", "ART_ADAPTERS_JUDGE_MODEL": "", "OPENAI_API_KEY": ""}
    env.setdefault("ART_ADAPTERS_TORCH_THREADS", "1")
    command = [
        sys.executable, "-m", "art_adapters.apps", "demo", "--run-dir", str(run_dir), "--steps", "1",
        "--groups", "1", "--rollouts", "3", "--eval-size", "1", "--eval-samples", "1", "--train-size", "2",
        "--question", "What is 20 + 22?", "--dynamic-sampling", "0",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=400, check=False)
    out = done.stdout
    assert done.returncode == 0, out[-3000:] + done.stderr[-3000:]
    assert "rewards: the verifiable check" in out
    assert "held-out questions (never trained on)" in out and "correct add(a, b) call" in out
    # greedy and sampled (T=1) rows before and after, and how many GRPO steps trained
    assert "greedy: correct final answer" in out and "T=1: correct final answer" in out, out[-3000:]
    assert "GRPO steps trained" in out and "imitation" not in out
    assert (run_dir / "plots" / "reward.png").stat().st_size > 1000
    assert (run_dir / "metrics.jsonl").read_text().count('"split": "val"') >= 1
    assert "human: What is 20 + 22?" in out and "ai:" in out


def test_demo_rejects_bad_settings() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "art_adapters.apps", "demo", "--rollouts", "1"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "rollouts" in done.stdout and "greater than or equal to 2" in done.stdout


def test_the_demo_flags_are_the_config_fields_with_their_defaults_and_descriptions() -> None:
    import typer

    from art_adapters.apps import DemoConfig, app

    params = {p.name: p for p in typer.main.get_command(app).commands["demo"].params}
    assert set(params) == set(DemoConfig.model_fields)
    for name, field in DemoConfig.model_fields.items():
        assert params[name].default == field.default and params[name].help == field.description, name
    assert params["no_judge"].opts == ["--no-judge"]


def test_the_demo_says_which_judge_scores(monkeypatch: pytest.MonkeyPatch) -> None:
    from art_adapters.apps._demo import resolve_judge

    for name in ("ART_ADAPTERS_JUDGE_MODEL", "ART_ADAPTERS_JUDGE_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    assert resolve_judge()[0] is None
    monkeypatch.setenv("ART_ADAPTERS_JUDGE_MODEL", "judge-x")
    monkeypatch.setenv("ART_ADAPTERS_JUDGE_BASE_URL", "http://u:p@127.0.0.1:9/v1")
    judge, line = resolve_judge()
    assert judge.model_name == "judge-x"
    assert line == "rewards: RULER, judge judge-x at http://127.0.0.1:9/v1 ($ART_ADAPTERS_JUDGE_MODEL)"
    judge, line = resolve_judge(no_judge=True)
    assert judge is None and line.endswith("; --no-judge")
