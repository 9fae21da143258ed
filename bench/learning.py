"""Held-out reward against wall-clock on the demo's task, for several ways of training on the same rollouts.

Each configuration runs the demo's real path from the base model (the embedded backend, the
LangGraph ReAct agent on the bundled calculator MCP server, exact tokens, GRPO via
``train_loop``), with the same seeds, questions and step budget, evaluating on the held-out
questions every ``--eval-every`` steps. Configurations (``--configs``):

- ``single``: GRPO from the base model, one optimizer update per step (``num_iterations=1``);
- ``passes``: ``--passes`` passes over each step's rollouts, ``--mini-batches`` updates per pass;
- ``cispo``: ``loss_type="cispo"`` (ART's default), one pass;
- ``sft``: an SFT warm-up on a scripted teacher's trajectories of training questions
  (``--sft-examples``), then GRPO as ``single``: the demo's default.

Printed: one table row per evaluation (configuration, step, seconds since the start, held-out
correct and mean reward), then each configuration's time to reach ``single``'s final held-out score
(the baseline measured in the same run) and the ratio to ``single``'s time; a PNG
(``--out``/learning.png) plots held-out correctness against seconds. Heavy: run it alone (two model
processes on 2 cores slow each other far more than 2x). Not part of the test suite's pass/fail.

Usage: ``./dev bench learning [--steps 8] [--configs single,passes,cispo,sft]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root

from art_adapters.apps import DemoConfig, run_demo  # noqa: E402

CONFIGS: dict[str, dict[str, Any]] = {
    "single": {},
    "passes": {"passes": 2, "mini_batches": 2},
    "cispo": {"loss": "cispo"},
    "sft": {},  # sft_warmup=--sft-examples
}


def _evals(run_dir: Path, started: float) -> list[dict[str, Any]]:
    """The run's held-out rows, with seconds since the configuration started."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    out = []
    for row in rows:
        if row.get("split") != "val":
            continue
        at = datetime.fromisoformat(row["time"]).timestamp()
        out.append(
            {
                "step": row["step"],
                "seconds": round(at - started, 1),
                "correct": row.get("correct_mean"),
                "reward": row.get("reward_mean"),
            }
        )
    return out


async def run_config(name: str, overrides: dict[str, Any], args: argparse.Namespace, out: Path) -> list[dict]:
    """Train one configuration from the base model; its held-out evaluations."""
    run_dir = out / name
    settings = {
        "steps": args.steps, "groups": args.groups, "rollouts": args.rollouts, "eval_size": args.eval_size,
        "eval_samples": args.eval_samples, "eval_every": args.eval_every, "seed": args.seed, "no_judge": True,
        "threads": args.threads, "sft_warmup": 0, **overrides,
    }  # fmt: skip
    if name == "passes":
        settings.update(passes=args.passes, mini_batches=args.mini_batches)
    if name == "sft":
        settings.update(sft_warmup=args.sft_examples)
    config = DemoConfig(run_dir=run_dir, **settings)
    started = time.time()
    with (out / f"{name}.log").open("w") as log:
        await run_demo(config, console=Console(file=log, width=120))
    return _evals(run_dir, started)


def time_to(evals: list[dict], target: float) -> float | None:
    """Seconds until a held-out correctness of at least ``target`` (``None``: never reached)."""
    for row in evals:
        if row["correct"] is not None and row["correct"] >= target - 1e-9:
            return row["seconds"]
    return None


def plot(results: dict[str, list[dict]], path: Path) -> None:
    """Held-out correctness against wall-clock seconds, one line per configuration."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, evals in results.items():
        ax.plot([r["seconds"] for r in evals], [r["correct"] for r in evals], marker="o", label=name)
    ax.set_xlabel("seconds since the start (2-core CPU)")
    ax.set_ylabel("held-out correct (add call and answer)")
    ax.set_title("Demo task: held-out correctness against wall-clock")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated, from: " + ", ".join(CONFIGS))
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--groups", type=int, default=3)
    parser.add_argument("--rollouts", type=int, default=4)
    parser.add_argument("--eval-size", type=int, default=12)
    parser.add_argument("--eval-samples", type=int, default=4)
    parser.add_argument("--eval-every", type=int, default=2)
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--mini-batches", type=int, default=2)
    parser.add_argument("--sft-examples", type=int, default=24)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", type=Path, default=Path(".art/bench-learning"))
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    names = [n.strip() for n in args.configs.split(",") if n.strip()]
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        parser.error(f"unknown configuration(s) {unknown}; choose from {', '.join(CONFIGS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict[str, list[dict]] = {}
    for name in names:
        results[name] = await run_config(name, CONFIGS[name], args, args.out)
        print(f"{name}: done", flush=True)
    print(f"\n{'config':<8} {'step':>4} {'seconds':>8} {'correct':>8} {'reward':>7}")
    for name, evals in results.items():
        for row in evals:
            correct = "-" if row["correct"] is None else f"{row['correct']:.0%}"
            reward = "-" if row["reward"] is None else f"{row['reward']:.3f}"
            print(f"{name:<8} {row['step']:>4} {row['seconds'] or 0:>8.0f} {correct:>8} {reward:>7}")
    if "single" in results and results["single"]:
        single = results["single"]
        target = single[-1]["correct"] or 0.0
        start = single[0]["correct"] or 0.0
        if target <= start:
            print(
                f"\nsingle did not improve in this run ({start:.0%} at step 0, {target:.0%} at the end): "
                "the ratios below compare against its step 0, not against learning"
            )
        base = time_to(single, target)
        print(f"\ntime to reach single's final held-out correct ({target:.0%}):")
        for name, evals in results.items():
            took = time_to(evals, target)
            ratio = f"{took / base:.2f}x single" if took is not None and base else "-"
            print(f"  {name:<8} {'never' if took is None else f'{took:.0f} s'}  {ratio}")
    plot(results, args.out / "learning.png")
    (args.out / "learning.json").write_text(json.dumps(results, indent=2))
    print(f"\nplot: {args.out / 'learning.png'}")


if __name__ == "__main__":
    asyncio.run(main())
