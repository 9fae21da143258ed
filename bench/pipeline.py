"""Sequential vs pipelined RL (``LoopConfig.max_staleness`` 0, 1, 2) on the demo's task, in one run.

Every configuration trains its own model from the base weights on one embedded backend, with the
demo's agent (the LangGraph ReAct loop, exact tokens, GRPO via ``train_loop``), the same seeds,
questions, steps and group sizes, and is evaluated on the same held-out questions after every step.
Two variants (``--variants``):

- ``demo``: the demo as is (the calculator MCP server over stdio, the verifiable check as reward);
- ``slow``: the same with latency where real agents have it: the calculator is a stand-in MCP server
  whose calls take 1-3 s (bench/_slow_calculator.py, a local process over stdio), and each group is
  scored by a stand-in judge on 127.0.0.1 that takes 1-3 s to answer (then the verifiable check
  sets the reward).

Only the sequential run evaluates step 0 (the base model, the same for all); every clock starts
at the first training rollout. Printed per variant: the held-out curve (step, seconds since that
start, correct) of each configuration; then each
one's seconds to reach the sequential run's final held-out score and the ratio to sequential's
(measured in the same run), rollouts sampled, groups dropped as stale, and the staleness of the
groups trained. Heavy: run it alone; ``--steps``/``--groups`` keep it small.

Usage: ``python bench/pipeline.py [--variants demo,slow] [--steps 2]``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import logging
import os
import random
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root

import httpx  # noqa: E402

import mcp_tools  # noqa: E402
from art_adapters import LocalBackend, LoopConfig, RunConfig, TrainableModel, TrainConfig, train_loop  # noqa: E402
from art_adapters import verifiable_scorer  # noqa: E402
from art_adapters.apps._demo_agent import CALCULATOR_SERVER, build_agent, check, make_rollout, make_scenarios  # noqa: E402

CONFIGS = {"sequential": 0, "staleness-1": 1, "staleness-2": 2}


class _Judge(BaseHTTPRequestHandler):
    """The stand-in judge: answers each POST after 1-3 s (seeded by the body)."""

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        time.sleep(random.Random(body).uniform(1.0, 3.0))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"ok": true}')

    def log_message(self, *args: Any) -> None:
        pass


def slow_judge(url: str) -> Any:
    """A scorer that waits for the stand-in judge once per group (concurrently), then checks."""
    check_scorer = verifiable_scorer(check)

    async def score(groups: list[Any], scenarios: list[Any]) -> list[Any]:
        async with httpx.AsyncClient(timeout=30) as client:
            await asyncio.gather(*(client.post(url, json={"group": g.metadata.get("scenario_id")}) for g in groups))
        return await check_scorer(groups, scenarios)

    return score


def staleness_histogram(run_dir: Path) -> dict[int, int]:
    """Trained groups per staleness, from the pipelined loop's group store."""
    folder = run_dir / "batches" / "pipeline"
    if not folder.is_dir():
        return {}
    sampled = {}
    for path in folder.glob("group-*.scored.jsonl"):
        group = json.loads(path.read_text().splitlines()[0])
        sampled[path.name.split(".")[0].removeprefix("group-")] = group["metadata"]["loop_step"]
    counts: collections.Counter[int] = collections.Counter()
    for line in (folder / "events.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event["event"] == "trained":
            counts.update(event["step"] - sampled[k] for k in event["keys"] if k in sampled)
    return dict(sorted(counts.items()))


async def run_config(
    backend: LocalBackend, variant: str, name: str, tools: list[Any], score: Any, args: argparse.Namespace, out: Path
) -> dict[str, Any]:
    """Train one configuration from the base weights; its held-out curve and pipeline numbers."""
    questions = make_scenarios(args.train_size + args.eval_size, seed=args.seed)
    train, held_out = questions[: args.train_size], questions[args.train_size :]
    model = TrainableModel(name=f"{variant}-{name}", project="bench-pipeline")
    await model.register(backend)
    sampler = build_agent(model.chat_model(temperature=1.0, max_tokens=args.max_tokens), tools)
    evaluator = build_agent(model.chat_model(temperature=args.eval_temperature, max_tokens=args.max_tokens), tools)
    sample, sampled = make_rollout(sampler), [0]

    async def counted(scenario: Any) -> Any:
        sampled[0] += 1
        return await sample(scenario)

    run_dir = out / variant / name
    config = LoopConfig(
        steps=args.steps, groups_per_step=args.groups, rollouts_per_group=args.rollouts, eval_every=1,
        eval_rollouts=args.eval_samples, max_staleness=CONFIGS[name], seed=args.seed, run_dir=run_dir,
        eval_at_start=name == "sequential",  # the same base model for every configuration: evaluated once
        progress=False, max_untrained=6, run=RunConfig(timeout_s=600, max_failure_rate=0.25, max_concurrency=16),
        train=TrainConfig(learning_rate=5e-4, lora_rank=8, lora_alpha=16, micro_batch_size=8, seed=args.seed),
    )  # fmt: skip
    clock = [time.monotonic()]  # from the first training rollout: step 0's evaluation is not timed
    curve: list[dict[str, Any]] = []
    steps: list[dict[str, Any]] = []

    def evaluated(report: Any) -> None:
        if report.step == 0:
            clock[0] = time.monotonic()
        curve.append({"step": report.step, "seconds": round(time.monotonic() - clock[0], 1), "correct": report.reward_mean})

    result = await train_loop(
        model, counted, train, score=score, config=config, val_scenarios=held_out,
        eval_rollout=make_rollout(evaluator), eval_score=verifiable_scorer(check), on_eval=evaluated,
        on_step=lambda r: steps.append({k: r.metrics.get(k) for k in ("staleness_mean", "staleness_max", "dropped_stale", "dropped_stale_samples")}),
    )  # fmt: skip
    return {
        "curve": curve, "steps": steps, "stopped": result.stopped, "sampled": sampled[0],
        "dropped_groups": sum(s.get("dropped_stale") or 0 for s in steps),
        "dropped_samples": sum(s.get("dropped_stale_samples") or 0 for s in steps),
        "staleness": staleness_histogram(run_dir), "seconds": round(time.monotonic() - clock[0], 1),
    }  # fmt: skip


def time_to(curve: list[dict[str, Any]], target: float) -> float | None:
    """Seconds until a trained step's held-out score is at least ``target`` (``None``: never)."""
    for row in curve:
        if row["step"] > 0 and row["correct"] is not None and row["correct"] >= target - 1e-9:
            return row["seconds"]
    return None


def report(variant: str, results: dict[str, dict[str, Any]]) -> None:
    print(f"\n== {variant} ==")
    print(f"{'config':<12} {'step':>4} {'seconds':>8} {'held-out':>8}")
    for name, r in results.items():
        for row in r["curve"]:
            correct = "-" if row["correct"] is None else f"{row['correct']:.0%}"
            print(f"{name:<12} {row['step']:>4} {row['seconds']:>8.0f} {correct:>8}")
    seq = results.get("sequential")
    target = seq["curve"][-1]["correct"] if seq and seq["curve"] else None
    base = time_to(seq["curve"], target) if seq and target is not None else None
    print(f"\nto sequential's final held-out score ({'-' if target is None else f'{target:.0%}'}):")
    print(f"{'config':<12} {'seconds':>8} {'ratio':>6} {'total s':>8} {'sampled':>8} {'dropped':>8} staleness of trained groups")
    for name, r in results.items():
        took = time_to(r["curve"], target) if target is not None else None
        ratio = f"{took / base:.2f}" if took is not None and base else "-"
        print(
            f"{name:<12} {'never' if took is None else f'{took:.0f}':>8} {ratio:>6} {r['seconds']:>8.0f} "
            f"{r['sampled']:>8} {r['dropped_samples']:>8} {r['staleness'] or '-'}"
        )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variants", default="demo,slow")
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--groups", type=int, default=2)
    parser.add_argument("--rollouts", type=int, default=4)
    parser.add_argument("--train-size", type=int, default=16)
    parser.add_argument("--eval-size", type=int, default=4)
    parser.add_argument("--eval-samples", type=int, default=1)
    parser.add_argument("--eval-temperature", type=float, default=1.0)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="torch threads of the backend (1 on a loaded machine)")
    parser.add_argument("--out", type=Path, default=Path(".art/bench-pipeline"))
    args = parser.parse_args()
    if args.threads is not None:
        os.environ["ART_ADAPTERS_TORCH_THREADS"] = str(args.threads)
    logging.basicConfig(level=logging.WARNING)
    args.out.mkdir(parents=True, exist_ok=True)
    backend = await LocalBackend(run_dir=args.out / "backend").start()
    judge = ThreadingHTTPServer(("127.0.0.1", 0), _Judge)
    threading.Thread(target=judge.serve_forever, daemon=True).start()
    everything: dict[str, Any] = {}
    try:
        for variant in args.variants.split(","):
            if variant == "slow":
                tools_source: Any = [sys.executable, str(Path(__file__).with_name("_slow_calculator.py"))]
                score = slow_judge(f"http://127.0.0.1:{judge.server_address[1]}/judge")
            else:
                tools_source, score = CALCULATOR_SERVER, verifiable_scorer(check)
            results: dict[str, dict[str, Any]] = {}
            async with mcp_tools.rollout():  # one session for every rollout, as the demo (stateless servers)
                tools = await mcp_tools.load_tools(tools_source)
                for name in args.configs.split(","):
                    results[name] = await run_config(backend, variant, name, tools, score, args, args.out)
                    print(f"{variant}/{name}: {results[name]['seconds']:.0f} s", flush=True)
            report(variant, results)
            everything[variant] = results
            (args.out / "pipeline.json").write_text(json.dumps(everything, indent=2))
    finally:
        judge.shutdown()
        await backend.close()


if __name__ == "__main__":
    asyncio.run(main())
