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

    from art_adapters.apps import DemoConfig, app, default_demo_loop
    from art_adapters.apps._demo_config import DEMO_LOOP_SETTINGS

    params = {p.name: p for p in typer.main.get_command(app).commands["demo"].params}
    own = {name: field for name, field in DemoConfig.model_fields.items() if name != "loop"}
    loop_params = {setting.name: setting for setting in DEMO_LOOP_SETTINGS.values()}
    assert set(params) == set(own) | set(loop_params) and not set(own) & set(loop_params)
    for name, field in own.items():
        assert params[name].default == field.default and params[name].help == field.description, name
        assert params[name].opts == [f"--{name.replace('_', '-')}"], name
    loop = DemoConfig().loop
    assert loop == DemoConfig(loop=default_demo_loop()).loop
    for flag, setting in DEMO_LOOP_SETTINGS.items():  # each flag keeps its name and sets the loop field
        param, value = params[setting.name], loop
        for part in setting.path.split(".")[1:]:
            value = getattr(value, part)
        assert param.opts == [f"--{flag.replace('_', '-')}"] and param.default == value, flag
        assert param.help == setting.extra["help"] and param.help, flag
    assert params["no_judge"].opts == ["--no-judge"]
    assert params["steps"].help.startswith("Training steps, counted from the model's step")  # not a target


def test_the_demo_loop_defaults_and_the_moved_keywords() -> None:
    from art_adapters import RetentionPolicy
    from art_adapters.apps import DemoConfig, default_demo_loop
    from art_adapters.apps._demo import _loop_config

    config = DemoConfig(run_dir=Path("r"), seed=3)
    loop, train, sft = config.loop, config.loop.train, config.loop.sft
    assert (loop.steps, loop.groups_per_step, loop.rollouts_per_group, loop.eval_rollouts) == (8, 3, 4, 4)
    assert (loop.eval_every, loop.dynamic_sampling, loop.max_staleness) == (0, 2, 0)
    assert (loop.run.max_concurrency, loop.run.timeout_s, loop.run.max_failure_rate) == (16, 600.0, 0.25)
    assert (train.learning_rate, train.lora_rank, train.lora_alpha, train.num_iterations) == (1e-3, 8, 16.0, 1)
    assert (train.mini_batches, train.loss_type, train.loss_normalization) == (1, "ppo", "token")
    assert train.micro_batch_size == 8 and train.retention == sft.retention == RetentionPolicy(keep_latest=1)
    assert (sft.learning_rate, sft.epochs, sft.lora_rank, sft.lora_alpha) == (5e-4, 2, 8, 16.0)
    assert loop.run_dir == Path("r") and loop.seed == train.seed == sft.seed == 3  # the demo's own
    ranked = DemoConfig(loop=default_demo_loop(train={"lora_rank": 4, "loss_type": "sapo"})).loop
    assert (ranked.train.lora_alpha, ranked.sft.lora_rank, ranked.sft.lora_alpha) == (8.0, 4, 8.0)
    assert ranked.train.loss_normalization == "sequence"  # SAPO's own, as TrainConfig decides
    assert ranked.train.learning_rate == 1e-3 and ranked.steps == 8  # the rest stays the demo's
    # the demo's steps count from the model's step: a rerun at step 8 trains to 16
    assert _loop_config(config, start=8).steps == 16 and _loop_config(config, start=0).sft_warmup is None
    with pytest.raises(ValueError, match=r"groups moved into DemoConfig.loop: pass loop=default_demo_loop\(groups_per"):
        DemoConfig(groups=1)
    with pytest.raises(ValueError, match=r"passes moved .*default_demo_loop\(train=\{'num_iterations': \.\.\.\}\)"):
        DemoConfig(passes=2)


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
