"""How often the bundled model writes a full set of scenarios, and how many are on topic.

For each bundled server (``notes``, ``calculator``) and each seed, ``generate_scenarios`` is
asked for ``--n`` scenarios (default 8) by the bundled model served by the embedded backend
(its base weights, as ``train-mcp`` uses them when no judge is configured), and the bench
prints:

* the success rate: runs that returned all ``n`` scenarios (a ``ScenarioGenerationError``
  is a failure; the scenarios it kept are still counted below);
* on topic: scenarios whose task mentions a word from some tool's name or description
  (words of 4+ letters, names split at ``_``/``-``/``.``/camelCase, a few stop words
  dropped, compared by their first 5 letters so "notes" matches "note"); a crude keyword
  check, not a judgement of quality;
* generator calls and seconds per run (``--show-rejected``: every rejected item and why).

It ends with a table, one row per server: runs complete, scenarios kept per seed, on-topic
share, generator calls and wall time (total and slowest run).

``--config readme`` calls it as the README shows (``generate_scenarios(server, n=8,
model=...)``, every other argument at its default); ``--config train-mcp`` as ``train-mcp``
does with a local judge (``batch_size=4``, ``task_pattern=PLAIN_TASK_PATTERN``, sampling at
``GENERATOR_TEMPERATURE``). ``--max-retries`` overrides the generator's default.

Not part of the test suite. Slow on CPU (minutes). Usage::

    .venv/bin/python bench/scenario_generation.py [--seeds 5] [--n 8] [--config readme]
        [--servers notes,calculator] [--max-retries N]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import re
import tempfile
import time
from pathlib import Path
from typing import Any

import art_adapters as aa
import mcp_tools
from mcp_tools.servers import server_command

logger = logging.getLogger("bench.scenario_generation")

_STOP = {"with", "from", "into", "that", "this", "their", "them", "they", "when", "each", "your", "given",
         "number", "numbers", "text", "returns", "return", "optional", "newest", "first", "every"}  # fmt: skip


def topic_keys(tools: list[Any]) -> set[str]:
    """Five-letter prefixes of the content words in the tools' names and descriptions."""
    words: set[str] = set()
    for tool in tools:
        name = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", tool.name)
        text = f"{name} {tool.description or ''}".replace("_", " ").replace("-", " ").replace(".", " ")
        words.update(w.casefold() for w in re.findall(r"[A-Za-z]{4,}", text))
    return {w[:5] for w in words - _STOP}


def on_topic(task: str, keys: set[str]) -> bool:
    """Whether *task* mentions one of the keyword prefixes."""
    return any(w.casefold()[:5] in keys for w in re.findall(r"[A-Za-z]{4,}", task))


class CallCounter(logging.Handler):
    """Counts the generator's per-call log lines (one INFO line per answered call); keeps its rejections."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.calls = 0
        self.rejected: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith("scenario generator call"):
            self.calls += 1
        elif message.startswith("scenario generator: rejected "):
            self.rejected.append(message.removeprefix("scenario generator: rejected "))


async def run(args: argparse.Namespace) -> None:
    """Start the backend, run every (server, seed), print each run and a table of the rates."""
    from art_adapters.apps._train_mcp import GENERATOR_TEMPERATURE

    counter = CallCounter()
    logging.getLogger("mcp_tools._generate").addHandler(counter)
    logging.getLogger("mcp_tools._generate").setLevel(logging.DEBUG)
    rows: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        backend = await aa.LocalBackend(run_dir=Path(tmp) / "backend").start()
        try:
            model = aa.TrainableModel(name="scenario-writer", project="bench")
            await model.register(backend)
            options: dict[str, Any] = {}
            temperature = 0.8
            if args.config == "train-mcp":
                options = {"batch_size": 4, "task_pattern": mcp_tools.PLAIN_TASK_PATTERN}
                temperature = GENERATOR_TEMPERATURE
            if args.max_retries is not None:
                options["max_retries"] = args.max_retries
            for server in args.servers.split(","):
                command = server_command(server)
                keys = topic_keys(await mcp_tools.load_tools(command))
                ok = topical = calls = 0
                kept: list[int] = []
                times: list[float] = []
                for seed in range(args.seeds):
                    llm = model.chat_model(step=0, temperature=temperature, max_tokens=512, seed=seed)
                    counter.calls = 0
                    counter.rejected.clear()
                    started = time.monotonic()
                    try:
                        scenarios = await mcp_tools.generate_scenarios(command, n=args.n, model=llm, **options)
                        ok += 1
                        outcome = "ok"
                    except mcp_tools.ScenarioGenerationError as exc:
                        scenarios = list(getattr(exc, "scenarios", []) or [])
                        outcome = f"FAILED ({str(exc)[:300]})"
                    times.append(time.monotonic() - started)
                    hits = sum(on_topic(s.task, keys) for s in scenarios)
                    kept.append(len(scenarios))
                    topical += hits
                    calls += counter.calls
                    print(
                        f"{server} seed {seed}: {outcome}; {len(scenarios)} kept, {hits} on topic, "
                        f"{counter.calls} calls, {times[-1]:.0f}s",
                        flush=True,
                    )
                    for scenario in scenarios:
                        mark = "+" if on_topic(scenario.task, keys) else "-"
                        print(f"    {mark} [{scenario.difficulty}] {scenario.task}", flush=True)
                    for line in counter.rejected if args.show_rejected else ():
                        print(f"    x {line}", flush=True)
                rows.append(
                    f"| {server} | {ok}/{args.seeds} | {', '.join(map(str, kept))} | {topical}/{sum(kept)} | "
                    f"{calls} | {sum(times):.0f}s (max {max(times):.0f}s) |"
                )
        finally:
            await backend.close()
    print(f"\n{args.config}, n={args.n}, seeds 0-{args.seeds - 1}, max_retries {args.max_retries or 'default'}")
    print("| server | complete | kept per seed | on topic | calls | time |")
    print("|---|---|---|---|---|---|")
    print("\n".join(rows), flush=True)


def main() -> None:
    """Parse the arguments and run the bench."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--servers", default="notes,calculator")
    parser.add_argument("--config", choices=("readme", "train-mcp"), default="readme")
    parser.add_argument("--show-rejected", action="store_true", help="print each rejected item and why")
    parser.add_argument("--max-retries", type=int, default=None, help="default: generate_scenarios' own")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
