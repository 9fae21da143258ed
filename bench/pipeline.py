"""Sequential vs pipelined RL (``LoopConfig.max_staleness`` 0, 1, 2) on the demo's task, in one run.

Every configuration trains its own model from the base weights on one embedded backend, with the
demo's agent (the LangGraph ReAct loop, exact tokens, GRPO via ``train_loop``), the same seeds,
questions, steps and group sizes, and the same sample budget: the pipelined runs may start as many
rollouts as the sequential one sampled (``LoopConfig.rollout_budget``). Two variants (``--variants``):

- ``demo``: the demo as is (the calculator MCP server over stdio, the verifiable check as reward);
- ``slow``: the same with latency where real agents have it: the calculator is a stand-in MCP server
  whose calls take 1-3 s (bench/_slow_calculator.py, a local process over stdio), and each scoring
  call waits for a stand-in judge on 127.0.0.1 that takes 1-3 s per group (then the verifiable check
  sets the reward).

The clock starts at each run's first rollout, after an untimed warm-up (one batch and one step on a
model of its own), and covers training only: every checkpoint is evaluated afterwards, off the
clock, on the same held-out questions (the plain calculator; greedy by default), by the demo's full
check (a correct ``add`` call and the sum stated: the base model gets the call right on most questions
and the answer on few, so the partial reward says little about learning). The defaults are the demo's
recipe (3 groups x 4 rollouts per step, lr 1e-3) for 4 steps, and 36 held-out questions. Printed per
variant: the held-out curve (step, when its checkpoint was made, fraction correct), each configuration's
seconds to the sequential run's final held-out score and its ratio to sequential's (same run), the
whole run's seconds and ratio, rollouts sampled against the budget, rollouts dropped as stale,
zero-variance groups, the staleness of the trained groups, and where the time went (seconds with a
rollout, a judge call or a train step under way). Heavy: run it alone.

Usage: ``python bench/pipeline.py [--variants demo,slow] [--steps 4] [--groups 3]``.
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
from art_adapters import LocalBackend, LoopConfig, RunConfig, TrainableModel, TrainConfig, run_groups, train_loop  # noqa: E402
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


class Timeline:
    """What one configuration did when: rollouts, judge calls and train steps as intervals
    (seconds since the first training rollout started)."""

    def __init__(self) -> None:
        self.zero: float | None = None
        self.spans: dict[str, list[tuple[float, float]]] = {"rollout": [], "judge": [], "train": []}

    def now(self) -> float:
        if self.zero is None:
            self.zero = time.monotonic()
        return time.monotonic() - self.zero

    def add(self, kind: str, start: float, end: float) -> None:
        self.spans[kind].append((round(start, 2), round(end, 2)))

    def busy(self, *kinds: str) -> float:
        """Seconds during which at least one span of ``kinds`` was open."""
        spans = sorted(s for k in kinds for s in self.spans[k])
        total, reach = 0.0, -1.0
        for start, end in spans:
            if end > reach:
                total += end - max(start, reach)
                reach = end
        return total

    def overlap_train_rollout(self) -> float:
        """Seconds during which a train step ran and a rollout was open."""
        return self.busy("train") + self.busy("rollout") - self.busy("train", "rollout")


async def run_config(
    backend: LocalBackend, variant: str, name: str, tools: list[Any], score: Any, args: argparse.Namespace, budget: int
) -> dict[str, Any]:
    """Train one configuration from the base weights (no evaluation on the clock); its timeline,
    the time each step's checkpoint was made and the pipeline's numbers."""
    questions = make_scenarios(args.train_size + args.eval_size, seed=args.seed)
    train = questions[: args.train_size]
    model = TrainableModel(name=f"{variant}-{name}", project="bench-pipeline")
    await model.register(backend)
    sampler = build_agent(model.chat_model(temperature=1.0, max_tokens=args.max_tokens), tools)
    sample, timeline = make_rollout(sampler), Timeline()

    async def timed_rollout(scenario: Any) -> Any:
        start = timeline.now()
        try:
            return await sample(scenario)
        finally:
            timeline.add("rollout", start, timeline.now())

    async def timed_score(groups: list[Any], scenarios: list[Any]) -> list[Any]:
        start = timeline.now()
        try:
            return await score(groups, scenarios)
        finally:
            timeline.add("judge", start, timeline.now())

    run_dir = args.out / variant / name
    config = LoopConfig(
        steps=args.steps, groups_per_step=args.groups, rollouts_per_group=args.rollouts, max_staleness=CONFIGS[name],
        seed=args.seed, run_dir=run_dir, eval_at_start=False, progress=False, max_untrained=args.steps,
        rollout_budget=budget if CONFIGS[name] else None,
        run=RunConfig(timeout_s=900, max_failure_rate=0.25, max_concurrency=args.concurrency),
        train=train_config(args),
    )  # fmt: skip
    made: dict[int, float] = {}
    steps: list[dict[str, Any]] = []

    def stepped(report: Any) -> None:
        end = timeline.now()
        if report.trained:
            made[report.step] = round(end, 1)
            timeline.add("train", end - float(report.metrics.get("total_seconds") or 0.0), end)
        steps.append({"step": report.step, "trained": report.trained, **{k: report.metrics.get(k) for k in STEP_KEYS}})

    result = await train_loop(model, timed_rollout, train, score=timed_score, config=config, on_step=stepped)
    wall = timeline.now()
    return {
        "model": model, "made": made, "steps": steps, "stopped": result.stopped,
        "sampled": len(timeline.spans["rollout"]), "budget": budget,
        "dropped_groups": sum(s.get("dropped_stale") or 0 for s in steps),
        "dropped_samples": sum(s.get("dropped_stale_samples") or 0 for s in steps),
        "zero_variance_groups": sum(s.get("zero_variance_groups") or 0 for s in steps),
        "staleness": staleness_histogram(run_dir), "seconds": round(wall, 1),
        "busy": {
            "rollouts": round(timeline.busy("rollout"), 1), "judge": round(timeline.busy("judge"), 1),
            "train": round(timeline.busy("train"), 1),
            "train_with_rollouts": round(timeline.overlap_train_rollout(), 1),
            "idle": round(wall - timeline.busy("rollout", "judge", "train"), 1),
        },
        "timeline": timeline.spans,
    }  # fmt: skip


STEP_KEYS = ("staleness_mean", "staleness_max", "dropped_stale", "dropped_stale_samples", "zero_variance_groups")


async def held_out(chat: Any, tools: list[Any], args: argparse.Namespace) -> float:
    """The fraction of held-out rollouts of one chat model (a checkpoint) that the demo's full check
    passes (``correct``: the ``add`` call and the sum stated), with the plain calculator: the same
    answers as the slow one, off the clock."""
    questions = make_scenarios(args.train_size + args.eval_size, seed=args.seed)[args.train_size :]
    groups = await run_groups(
        make_rollout(build_agent(chat, tools)), questions, n=args.eval_samples,
        config=RunConfig(timeout_s=900, max_concurrency=args.concurrency), progress=False,
    )  # fmt: skip
    correct = sum(t.metrics.get("correct", 0.0) for g in groups for t in g.trajectories)
    return correct / (len(questions) * args.eval_samples)  # a rollout that failed counts as wrong


async def held_out_curves(results: dict[str, dict[str, Any]], tools: list[Any], args: argparse.Namespace) -> None:
    """Each configuration's ``curve`` (step -> held-out fraction correct): every checkpoint it made, all
    evaluated at once after training; step 0 (the base weights, the same for all) once."""
    chats = {(name, step): r["model"].chat_model(step=step, temperature=args.eval_temperature, max_tokens=args.max_tokens)
             for name, r in results.items() for step in sorted(r["made"])}  # fmt: skip
    first = next(iter(results.values()))["model"]
    chats[("", 0)] = first.chat_model(step=0, temperature=args.eval_temperature, max_tokens=args.max_tokens)
    scores = dict(zip(chats, await asyncio.gather(*(held_out(c, tools, args) for c in chats.values())), strict=True))
    for name, r in results.items():
        r["curve"] = {0: scores[("", 0)], **{step: scores[(name, step)] for step in sorted(r["made"])}}
        r.pop("model")


async def warm_up(backend: LocalBackend, tools: list[Any], args: argparse.Namespace) -> None:
    """One untimed batch of rollouts and one train step on a model of its own, so no configuration
    pays the engine's and the trainer's first-use costs."""
    model = TrainableModel(name="warm-up", project="bench-pipeline")
    await model.register(backend)
    questions = make_scenarios(args.train_size, seed=args.seed)[: args.groups]
    sampler = build_agent(model.chat_model(temperature=1.0, max_tokens=args.max_tokens), tools)
    groups = await run_groups(make_rollout(sampler), questions, n=args.rollouts, progress=False)
    await model.train(await verifiable_scorer(check)(groups, questions), config=train_config(args))


def train_config(args: argparse.Namespace) -> TrainConfig:
    """Every configuration's GRPO step."""
    return TrainConfig(learning_rate=args.learning_rate, lora_rank=8, lora_alpha=16, micro_batch_size=8, seed=args.seed)


def time_to(r: dict[str, Any], target: float) -> float | None:
    """Seconds until a checkpoint past the base whose held-out score is at least ``target`` was made."""
    for step, seconds in sorted(r["made"].items()):
        if r["curve"].get(step, -1.0) >= target - 1e-9:
            return seconds
    return None


def report(variant: str, results: dict[str, dict[str, Any]]) -> None:
    print(f"\n== {variant} ==")
    print(f"{'config':<12} {'step':>4} {'made at s':>9} {'correct':>8}")
    for name, r in results.items():
        for step, score in sorted(r["curve"].items()):
            made = "-" if step == 0 else f"{r['made'].get(step, float('nan')):.0f}"
            print(f"{name:<12} {step:>4} {made:>9} {score:>8.0%}")
    seq = results.get("sequential")
    target = seq["curve"][max(seq["curve"])] if seq and seq["curve"] else None
    base = time_to(seq, target) if seq and target is not None else None
    print(f"\nto sequential's final held-out score ({'-' if target is None else f'{target:.0%}'}):")
    print(
        f"{'config':<12} {'seconds':>8} {'ratio':>6} {'total s':>8} {'ratio':>6} {'sampled':>8} {'budget':>6} "
        f"{'dropped':>8} {'0-var':>6} staleness of trained groups"
    )
    seq_total = seq["seconds"] if seq else None
    for name, r in results.items():
        took = time_to(r, target) if target is not None else None
        ratio = f"{took / base:.2f}" if took is not None and base else "-"
        total_ratio = f"{r['seconds'] / seq_total:.2f}" if seq_total else "-"
        print(
            f"{name:<12} {'never' if took is None else f'{took:.0f}':>8} {ratio:>6} {r['seconds']:>8.0f} "
            f"{total_ratio:>6} {r['sampled']:>8} {r['budget']:>6} {r['dropped_samples']:>8} "
            f"{r['zero_variance_groups']:>6} {r['staleness'] or '-'}"
        )
    print("\nwhere the time went (seconds with at least one span open):")
    for name, r in results.items():
        print(f"{name:<12} " + " ".join(f"{k}={v}" for k, v in r["busy"].items()) + (f" stopped: {r['stopped']}" if r["stopped"] else ""))


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variants", default="demo,slow")
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--groups", type=int, default=3)
    parser.add_argument("--rollouts", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=16, help="RunConfig.max_concurrency of every run")
    parser.add_argument("--train-size", type=int, default=16)
    parser.add_argument("--eval-size", type=int, default=36)
    parser.add_argument("--eval-samples", type=int, default=1)
    parser.add_argument("--eval-temperature", type=float, default=0.0)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--learning-rate", type=float, default=1e-3, help="the demo's")
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
        async with mcp_tools.rollout():  # one session per server for every rollout, as the demo (stateless servers)
            plain = await mcp_tools.load_tools(CALCULATOR_SERVER)
            slow = await mcp_tools.load_tools([sys.executable, str(Path(__file__).with_name("_slow_calculator.py"))])
            await warm_up(backend, plain, args)
            for variant in args.variants.split(","):
                if variant == "slow":
                    tools, score = slow, slow_judge(f"http://127.0.0.1:{judge.server_address[1]}/judge")
                else:
                    tools, score = plain, verifiable_scorer(check)
                results: dict[str, dict[str, Any]] = {}
                budget = args.steps * args.groups * args.rollouts
                for name in args.configs.split(","):
                    results[name] = await run_config(backend, variant, name, tools, score, args, budget)
                    if name == "sequential":  # the pipelined runs get what it sampled (more when a batch trained nothing)
                        budget = results[name]["sampled"]
                    print(f"{variant}/{name}: trained in {results[name]['seconds']:.0f} s", flush=True)
                await held_out_curves(results, plain, args)  # off the clock, every checkpoint, the same questions
                everything[variant] = results
                (args.out / "pipeline.json").write_text(json.dumps(everything, indent=2))
                report(variant, results)
    finally:
        judge.shutdown()
        await backend.close()


if __name__ == "__main__":
    asyncio.run(main())
