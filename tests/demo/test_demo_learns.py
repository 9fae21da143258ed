"""GRPO alone on the demo's real path, with fixed seeds: every step trains on exact tokens and moves the
policy toward the rewarded tokens.

The test runs :func:`run_demo` itself (embedded backend over HTTP on 127.0.0.1, the bundled model,
the LangGraph ReAct agent on the bundled calculator MCP server over stdio, captured with exact tokens,
``train_loop``, checkpoints served as ``name@step``) with small settings. Held-out improvement on the
demo is asserted by ``test_demo_sft_learns.py`` (the default: SFT warm-up, then GRPO).
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from art_adapters.apps._demo import DemoConfig, run_demo
from tests.helpers.run_metrics import trained_rows


@pytest.mark.slow
@pytest.mark.timeout(1200)
async def test_grpo_steps_on_the_demo_train_exact_tokens_and_move_the_policy_toward_the_rewards(
    tmp_path: Path,
) -> None:
    """GRPO alone (no SFT), two steps of 2 passes x 2 mini-batches on the demo's real path.

    Held-out correctness is printed, not asserted: GRPO alone from the base model is too noisy on
    this task for a CI threshold (bench/learning.py measured 23% -> 23% in one run, 28% -> 88% in
    another; this test's earlier +10-point threshold failed in CI at 28% -> 16%). What every step
    must show is the direction: ``pass_2_policy_shift`` (advantage x log-ratio, measured on the
    step's own sequences after the first pass's updates) exceeds the first pass's, which carries
    only the sampler/trainer mismatch. Held-out learning is asserted by the SFT warm-up's test
    (``test_demo_sft_learns.py``) and by GRPO on a toy task (``tests/training/test_learning.py``).
    """
    config = DemoConfig(
        run_dir=tmp_path / "grpo", steps=2, groups=4, rollouts=4, eval_size=4, eval_samples=2,
        passes=2, mini_batches=2, sft_warmup=0, seed=0, no_judge=True, threads=1, question="What is 20 + 22?",
    )  # fmt: skip
    out = io.StringIO()
    result = await run_demo(config, console=Console(file=out, width=160))
    before, after = result.before.metrics["correct_mean"], result.after.metrics["correct_mean"]
    assert (result.start_step, result.final_step) == (0, 2), out.getvalue()[-3000:]
    assert result.before.trajectories == result.after.trajectories == 8
    rows = trained_rows(config.run_dir)
    assert [row["step"] for row in rows] == [1, 2]
    for row in rows:
        print(
            f"step {row['step']}: reward {row['reward_mean']:.3f}, policy shift pass 1 "
            f"{row['pass_1_policy_shift']:.5f}, pass 2 {row['pass_2_policy_shift']:.5f}"
        )
        assert row["record_turns"] > 0 and row["fallback_turns"] == 0, row  # exact tokens, none re-rendered
        assert row["updates"] == 4, row  # 2 passes x 2 mini-batches
        assert row["pass_2_policy_shift"] > row["pass_1_policy_shift"], row
    print(f"held-out correct (8 samples, not asserted): step 0 {before:.3f}, step 2 {after:.3f}")
