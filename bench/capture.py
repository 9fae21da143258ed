"""What capture costs: the same LangGraph run bare, with our handler, under OpenInference, and with our span processor.

The graph is the prebuilt ReAct agent on an instant deterministic chat model (two model
calls, two parallel tool calls a run), so the numbers are capture overhead against the
cheapest possible run; with a real model the ratios shrink towards 1. Configurations:

* ``bare`` — no callbacks, no instrumentation;
* ``handler`` — ``TrajectoryCallbackHandler`` in ``config["callbacks"]``: the cost on the
  run's path (its trajectories are read after the timed region);
* ``handler+assembly`` — the same, with every round ending by reading all trajectories
  inside the timed region, so the deferred message conversion and assembly are counted;
* ``openinference`` — OpenInference's LangChain instrumentation on an SDK provider with
  no processor (what tracing costs before any exporter);
* ``openinference+processor`` — the same plus ``TrajectorySpanProcessor`` (its worker's
  time counted: each round ends with ``force_flush``).

Configurations are measured in interleaved rounds. For each, the mean time per run is
taken per round; printed are the minimum over rounds (least disturbed by other load on
the machine: the figure the ratios use) and the median, with the overhead over ``bare``.
Goal (issue 3): the handler adds under 5% to the bare run and no more than OpenInference.

Not part of the test suite. Usage: ``.venv/bin/python bench/capture.py [--runs 200 --rounds 7 --mode sync|async]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Self

from opentelemetry.sdk.trace import TracerProvider

from art_adapters import TrajectoryCallbackHandler, TrajectorySpanProcessor

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root: tests.helpers
from tests.helpers.capture_fakes import PolicyChatModel, add, calculator_policy, multiply, react_agent

QUESTION = {"messages": [("user", "what is 2 + 3 times 4")]}


class Setup:
    """One configuration: what to pass as callbacks, and what to switch on/off around a round."""

    def __init__(
        self,
        name: str,
        *,
        handler: bool = False,
        read_in_round: bool = True,
        openinference: bool = False,
        processor: bool = False,
    ):
        self.name = name
        self.read_in_round = read_in_round
        self.handler = TrajectoryCallbackHandler() if handler else None
        self.captured = 0
        self.openinference = openinference
        self.processor = TrajectorySpanProcessor(max_pending_traces=10_000) if processor else None
        self._instrumentor = None
        self._provider: TracerProvider | None = None

    def config(self) -> dict:
        return {"callbacks": [self.handler]} if self.handler else {}

    def __enter__(self) -> Self:
        if self.openinference:
            from openinference.instrumentation.langchain import LangChainInstrumentor

            self._provider = TracerProvider()
            if self.processor is not None:
                self._provider.add_span_processor(self.processor)
            self._instrumentor = LangChainInstrumentor()
            self._instrumentor.instrument(tracer_provider=self._provider)
        return self

    def finish_round(self) -> None:
        """Inside the timed region: assembly (deferred by the handler, threaded by the processor) is counted."""
        if self.handler is not None and self.read_in_round:
            self.last = self.handler.pop_trajectories()
        if self.processor is not None:
            self.processor.force_flush()
            self.last = self.processor.pop_trajectories()

    def __exit__(self, *exc: object) -> None:
        if self._instrumentor is not None:
            self._instrumentor.uninstrument()


def check(setup: Setup, runs: int) -> None:
    """Every capturing configuration must really have captured every run it timed."""
    if setup.handler is not None or setup.processor is not None:
        assert len(setup.last) == runs and all(len(t.messages) == 6 for t in setup.last), len(setup.last)


def time_round(setup: Setup, run: Callable[[dict], object], runs: int) -> float:
    with setup:
        run(setup.config())  # warm this configuration up
        if setup.handler is not None:
            setup.handler.pop_trajectories()
        setup.finish_round()
        start = time.perf_counter()
        for _ in range(runs):
            run(setup.config())
        setup.finish_round()
        elapsed = time.perf_counter() - start
        if setup.handler is not None and not setup.read_in_round:
            setup.last = setup.handler.pop_trajectories()
        check(setup, runs)
    return elapsed / runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200, help="graph runs per configuration per round")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds (median taken)")
    parser.add_argument("--mode", choices=["sync", "async"], default="sync", help="invoke or ainvoke")
    args = parser.parse_args(argv)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        agent = react_agent(PolicyChatModel(policy=calculator_policy), [add, multiply])

    if args.mode == "sync":

        def run(config: dict) -> object:
            return agent.invoke(QUESTION, config=config)
    else:
        loop = asyncio.new_event_loop()

        def run(config: dict) -> object:
            return loop.run_until_complete(agent.ainvoke(QUESTION, config=config))

    setups = [
        Setup("bare"),
        Setup("handler", handler=True, read_in_round=False),
        Setup("handler+assembly", handler=True),
        Setup("openinference", openinference=True),
        Setup("openinference+processor", openinference=True, processor=True),
    ]
    samples: dict[str, list[float]] = {s.name: [] for s in setups}
    for _ in range(args.rounds):
        for setup in setups:
            samples[setup.name].append(time_round(setup, run, args.runs))
    best = {name: min(values) for name, values in samples.items()}
    median = {name: statistics.median(values) for name, values in samples.items()}
    bare = best["bare"]
    print(
        f"ReAct agent, instant fake model, {args.mode}: {args.rounds} rounds x {args.runs} runs per configuration"
    )
    print(f"{'configuration':<26}{'min us/run':>12}{'overhead us':>13}{'ratio':>8}{'median us/run':>15}")
    for name in samples:
        value = best[name]
        print(
            f"{name:<26}{value * 1e6:>12.0f}{(value - bare) * 1e6:>13.0f}{value / bare:>8.3f}{median[name] * 1e6:>15.0f}"
        )
    handler_overhead = best["handler"] - bare
    assembly = best["handler+assembly"] - best["handler"]
    oi_overhead = best["openinference"] - bare
    processor_overhead = best["openinference+processor"] - best["openinference"]
    print(f"conversion + assembly when trajectories are read: {assembly * 1e6:.0f} us per trajectory")
    print(f"our span processor on top of OpenInference: {processor_overhead * 1e6:.0f} us/run")
    total = best["handler+assembly"] - bare
    print(
        f"goal: handler adds < 5% to bare -> run path {handler_overhead / bare * 100:.1f}%, "
        f"with assembly {total / bare * 100:.1f}%; "
        f"handler <= OpenInference -> {total * 1e6:.0f} vs {oi_overhead * 1e6:.0f} us "
        f"({'met' if total <= oi_overhead else 'NOT met'})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
