"""The demo's learning recipe, part by part: GRPO alone from the base model, each configuration over several seeds.

Each run is the demo's real path from the base model (the embedded backend, the LangGraph ReAct agent
on the bundled calculator MCP server, exact tokens, GRPO via ``train_loop``, no demonstrations) with the
demo's defaults and one recipe part switched (``--configs``):

- ``recipe``: the demo's defaults (dynamic sampling, see ``DemoConfig``);
- ``no-dynamic``: dynamic sampling off (a step whose groups all scored alike trains nothing);
- ``passes``: ``--passes`` passes over each step's rollouts, ``--mini-batches`` updates per pass;
- ``seq-norm``: ``loss_normalization="sequence"`` (each rollout weighs the same) instead of per token;
- ``lr-half``: half the learning rate (5e-4: the demo's until 2026-12-02); ``lr-double``: twice it;
- ``imitation``: one SFT step on a scripted policy's runs first (``--scripted-imitation``; not RL);
- ``oracle-judge``: RULER scores the groups, its judge an oracle served over HTTP on 127.0.0.1 that
  scores by the task's own check (tests/helpers/oracle_judge.py), set only through the judge variables;
- ``swapped-judge``: the same judge with 30% of its groups' scores shuffled.

Printed: one row per run (greedy and T=1.0 held-out correct before and after, steps trained, seconds),
then each configuration's mean and spread (min..max) over the seeds; ``--out``/learning.png plots them.
Heavy: run it alone through the slot script. Not part of the test suite's pass/fail.

Usage: ``./dev bench learning [--seeds 0,1,2] [--configs recipe,no-dynamic]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root

from art_adapters.apps import DemoConfig, default_demo_loop, run_demo  # noqa: E402
from tests.helpers.judge_server import JudgeServer  # noqa: E402
from tests.helpers.oracle_judge import demo_oracle  # noqa: E402

#: Each configuration's changes to the demo's training loop (``default_demo_loop``'s keywords).
CONFIGS: dict[str, dict[str, Any]] = {
    "recipe": {},
    "no-dynamic": {"dynamic_sampling": 0},
    "passes": {},  # train.num_iterations=--passes, train.mini_batches=--mini-batches
    "seq-norm": {"train": {"loss_normalization": "sequence"}},
    "lr-half": {},  # train.learning_rate = half the demo's
    "lr-double": {},  # train.learning_rate = twice the demo's
    "imitation": {},  # scripted_imitation=--scripted-imitation
    "oracle-judge": {},  # a judge from the environment: the oracle
    "swapped-judge": {},  # the oracle, 30% of its answers shuffled
}

#: The learning-rate configurations' factor on the demo's rate.
LR_SCALE = {"lr-half": 0.5, "lr-double": 2.0}

#: The judge configurations' share of shuffled answers.
JUDGE_SWAP = {"oracle-judge": 0.0, "swapped-judge": 0.3}

#: The numbers kept per run: the greedy and sampled held-out correctness, before and after.
COLUMNS = ("greedy_before", "greedy_after", "sampled_before", "sampled_after")


async def run_one(name: str, seed: int, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """Train one configuration from the base model with ``seed``; its held-out numbers."""
    run_dir = out / f"{name}-s{seed}"
    judged = name in JUDGE_SWAP
    settings: dict[str, Any] = {"seed": seed, "no_judge": not judged, "threads": args.threads}
    loop: dict[str, Any] = {**CONFIGS[name]}
    if args.steps is not None:
        loop["steps"] = args.steps
    if name == "passes":
        loop["train"] = {"num_iterations": args.passes, "mini_batches": args.mini_batches}
    if name in LR_SCALE:
        loop["train"] = {"learning_rate": default_demo_loop().train.learning_rate * LR_SCALE[name]}
    if name == "imitation":
        settings["scripted_imitation"] = args.scripted_imitation
    config = DemoConfig(run_dir=run_dir, loop=default_demo_loop(**loop), **settings)
    started = time.monotonic()
    with contextlib.ExitStack() as stack, (out / f"{name}-s{seed}.log").open("w") as log:
        if judged:
            server = stack.enter_context(JudgeServer())
            server.reset(default=demo_oracle(swap=JUDGE_SWAP[name], seed=seed))  # type: ignore[arg-type]
            os.environ.update(ART_ADAPTERS_JUDGE_MODEL="oracle", ART_ADAPTERS_JUDGE_BASE_URL=server.url)
            stack.callback(os.environ.update, ART_ADAPTERS_JUDGE_MODEL="", ART_ADAPTERS_JUDGE_BASE_URL="")
        result = await run_demo(config, console=Console(file=log, width=140))
    return {
        "config": name,
        "seed": seed,
        "greedy_before": result.greedy_before.get("correct_mean"),
        "greedy_after": result.greedy_after.get("correct_mean"),
        "sampled_before": result.before.metrics.get("correct_mean"),
        "sampled_after": result.after.metrics.get("correct_mean"),
        # held-out questions whose T=1.0 correctness rose / fell, and the sign test's p-value
        "questions_up": result.paired.gained if result.paired else None,
        "questions_down": result.paired.lost if result.paired else None,
        "sign_p": result.paired.p_value if result.paired else None,
        "trained": result.trained_steps,
        "untrained": result.untrained_steps,
        "seconds": round(time.monotonic() - started),
    }


def summary(runs: list[dict[str, Any]]) -> dict[str, dict[str, tuple[float, float, float]]]:
    """Per configuration and column: (mean, min, max) over its seeds."""
    out: dict[str, dict[str, tuple[float, float, float]]] = {}
    for name in dict.fromkeys(r["config"] for r in runs):
        mine = [r for r in runs if r["config"] == name]
        out[name] = {}
        for column in (*COLUMNS, "seconds"):
            values = [float(r[column]) for r in mine if r[column] is not None]
            if values:
                out[name][column] = (statistics.fmean(values), min(values), max(values))
    return out


def plot(stats: dict[str, dict[str, tuple[float, float, float]]], path: Path) -> None:
    """Held-out correct after training (greedy and T=1.0), mean with the seeds' range, per configuration."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(stats)
    fig, ax = plt.subplots(figsize=(1.6 * len(names) + 3, 4.5))
    width = 0.2
    for i, column in enumerate(COLUMNS):
        means = [stats[n].get(column, (0, 0, 0))[0] for n in names]
        low = [m - stats[n].get(column, (0, 0, 0))[1] for m, n in zip(means, names, strict=True)]
        high = [stats[n].get(column, (0, 0, 0))[2] - m for m, n in zip(means, names, strict=True)]
        xs = [j + (i - 1.5) * width for j in range(len(names))]
        ax.bar(xs, means, width, yerr=[low, high], capsize=3, label=column.replace("_", " "))
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel("held-out correct (add call and answer)")
    ax.set_ylim(0, 1.05)
    ax.set_title("GRPO on the demo's task: mean over seeds, bars = min..max")
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _pct(value: Any) -> str:
    return "-" if value is None else f"{value:.0%}"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", default="recipe,no-dynamic", help="comma-separated, from: " + ", ".join(CONFIGS))
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--steps", type=int, default=None, help="default: the demo's")
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--mini-batches", type=int, default=2)
    parser.add_argument("--scripted-imitation", type=int, default=24)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", type=Path, default=Path(".art/bench-learning"))
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    names = [n.strip() for n in args.configs.split(",") if n.strip()]
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        parser.error(f"unknown configuration(s) {unknown}; choose from {', '.join(CONFIGS)}")
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    args.out.mkdir(parents=True, exist_ok=True)
    runs: list[dict[str, Any]] = []
    header = f"{'config':<11} {'seed':>4} {'greedy':>13} {'T=1.0':>13} {'up/down':>8} {'sign p':>8}"
    print(f"{header} {'trained':>8} {'seconds':>8}", flush=True)
    for name in names:
        for seed in seeds:
            run = await run_one(name, seed, args, args.out)
            runs.append(run)
            greedy = f"{_pct(run['greedy_before'])} -> {_pct(run['greedy_after'])}"
            sampled = f"{_pct(run['sampled_before'])} -> {_pct(run['sampled_after'])}"
            trained = f"{run['trained']}/{run['trained'] + run['untrained']}"
            moved = f"{run['questions_up']}/{run['questions_down']}"
            sign = "-" if run["sign_p"] is None else f"{run['sign_p']:.2g}"
            row = f"{name:<11} {seed:>4} {greedy:>13} {sampled:>13} {moved:>8} {sign:>8}"
            print(f"{row} {trained:>8} {run['seconds']:>8}", flush=True)
    stats = summary(runs)
    print(f"\nmean (min..max) over seeds {seeds}:")
    for name, columns in stats.items():
        cells = [f"{c} {m:.0%} ({lo:.0%}..{hi:.0%})" for c, (m, lo, hi) in columns.items() if c != "seconds"]
        print(f"  {name:<11} " + ", ".join(cells) + f", {columns['seconds'][0]:.0f} s")
    plot(stats, args.out / "learning.png")
    (args.out / "learning.json").write_text(json.dumps({"runs": runs}, indent=2))
    print(f"\nplot: {args.out / 'learning.png'}")


if __name__ == "__main__":
    asyncio.run(main())
