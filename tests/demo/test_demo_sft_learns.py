"""The demo's optional scripted imitation (``--scripted-imitation``, off by default; not RL, not
distillation): one SFT step on a hand-written policy's runs, then a GRPO step, raise held-out correctness.

Like ``test_demo_learns.py`` (a file of its own, so the two run on different test workers), it runs
:func:`run_demo` itself with ``scripted_imitation``: the scripted policy (a regex reads the numbers) answers
training questions through the demo's own graph and MCP server, the loop trains one SFT step on those
runs, then one GRPO step on the policy's own captured rollouts (exact tokens, served as ``name@step``),
and the held-out evaluation (questions never trained on, scored by the verifiable check) is compared.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from art_adapters import load_trajectories
from art_adapters.apps import DemoConfig, default_demo_loop, run_demo
from tests.helpers.run_metrics import trained_rows


@pytest.mark.slow
@pytest.mark.timeout(1500)
async def test_scripted_imitation_then_grpo_on_the_demo_raises_held_out_correctness_from_step_0(
    tmp_path: Path,
) -> None:
    """One SFT step on the scripted policy's runs of training questions, then GRPO."""
    config = DemoConfig(
        run_dir=tmp_path / "sft", loop=default_demo_loop(steps=2, eval_rollouts=4), scripted_imitation=16,
        eval_size=8, seed=0, no_judge=True, threads=1, question="What is 20 + 22?",
    )  # fmt: skip
    out = io.StringIO()
    result = await run_demo(config, console=Console(file=out, width=160))
    before, after = result.before.metrics["correct_mean"], result.after.metrics["correct_mean"]
    print(f"held-out correct: step 0 {before:.3f}, after SFT and a GRPO step {after:.3f}")
    assert result.before.step == 0 and result.after.step == 2 == result.final_step, out.getvalue()[-3000:]
    demonstrations = load_trajectories(config.run_dir / "scripted-imitation.jsonl")
    assert len(demonstrations) == 16 and all(t.metrics["correct"] == 1.0 for t in demonstrations)
    sft, grpo = trained_rows(config.run_dir)
    assert sft["step"] == 1 and sft["sft_warmup"] == 1, sft
    assert sft["sequences"] == 16 and sft["fallback_turns"] == 32, sft  # the script's turns, rendered
    assert "SFT on the scripted policy's runs (imitation, not RL)" in out.getvalue()
    # the GRPO step trained on the warmed-up policy's own rollouts, from the engine's token records
    assert grpo["step"] == 2 and not grpo.get("sft_warmup"), grpo
    assert grpo["record_turns"] > 0 and grpo["fallback_turns"] == 0, grpo
    # SFT alone, measured on 32 samples at T=1.0 (sampling is not bit-reproducible on 2 threads, so runs
    # differ): 18.8% -> 59.4% alone, 9.4% -> 40.6% in the full suite, 15.6% -> 34.4% beside the GRPO test
    assert after >= before + 0.1, (before, after)
