"""How often the bundled model calls an MCP server's tools, and how often correctly, with and without a forced first turn.

The MCP-RL agent (``art_adapters.apps._train_mcp.build_agent``) runs on the bundled model (base weights,
temperature 1.0, the embedded backend) against a bundled server (``notes`` by default) for a fixed
list of user requests, ``--rollouts`` times each, once with ``first_tool_choice="auto"`` (the
baseline: the model decides) and once with ``"required"`` (``train-mcp``'s default). Printed per
setting:

* tool-call rate: rollouts in which the model called at least one tool;
* correct-call rate: rollouts whose calls all ran without an error (arguments valid for the tool,
  the note found...), among all rollouts;
* tool-error rate: failed calls among the calls that ran;
* seconds per rollout;

and the forced setting's rates as differences from the baseline measured in the same run.
Not part of the test suite. Slow on CPU (minutes). Usage::

    .venv/bin/python bench/mcp_tool_use.py [--rollouts 4] [--server notes] [--max-turns 2]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

import art_adapters as aa
import mcp_tools
from art_adapters.apps._train_mcp import DEFAULT_SYSTEM_PROMPT, build_agent, make_rollout
from mcp_tools.servers import server_command

TASKS = {
    "notes": [
        "What notes do I have about work?",
        "Find my note about the dentist appointment.",
        "Write down a note titled Groceries: milk, eggs and bread.",
        "Show me my three newest notes.",
        "Add 'call the plumber' to my todo note.",
        "Do I have anything saved about the book club?",
    ],
    "calculator": [
        "What is 17 + 25?",
        "How much is 12 times 9?",
        "What is 144 divided by 12?",
        "Take 250 away from 1000.",
        "What is 2 to the power of 10?",
        "What is the square root of 81?",
    ],
}


def rates(trajectories: list[aa.Trajectory]) -> dict[str, float]:
    """Tool-call, correct-call and tool-error rates of *trajectories* (see the module docstring)."""
    called = [t for t in trajectories if any(m.role == "assistant" and m.tool_calls for m in t.messages)]
    correct = [t for t in called if t.tool_records and not any(r.is_error for r in t.tool_records)]
    calls = [r for t in trajectories for r in t.tool_records]
    return {
        "tool_call_rate": len(called) / len(trajectories),
        "correct_call_rate": len(correct) / len(trajectories),
        "tool_error_rate": sum(r.is_error for r in calls) / len(calls) if calls else float("nan"),
    }


async def run(args: argparse.Namespace) -> None:
    """Start the backend, run both settings and print the table."""
    command = server_command(args.server)
    tools = await mcp_tools.load_tools(command)
    tasks = [{"task": task, "difficulty": 1} for task in TASKS[args.server]]
    with tempfile.TemporaryDirectory() as tmp:
        backend = await aa.LocalBackend(run_dir=Path(tmp) / "backend").start()
        try:
            model = aa.TrainableModel(name="tool-use", project="bench")
            await model.register(backend)
            chat = model.chat_model(temperature=1.0, max_tokens=args.max_tokens)
            results: dict[str, dict[str, float]] = {}
            for choice in ("auto", "required"):
                agent = build_agent(
                    chat, tools, system_prompt=DEFAULT_SYSTEM_PROMPT, max_turns=args.max_turns,
                    first_tool_choice=choice,
                )  # fmt: skip
                started = time.monotonic()
                groups = await aa.run_groups(
                    make_rollout(agent), tasks, n=args.rollouts, max_concurrency=4, progress=False
                )
                trajectories = [t for g in groups for t in g.trajectories]
                seconds = (time.monotonic() - started) / max(1, len(trajectories))
                results[choice] = {**rates(trajectories), "seconds_per_rollout": seconds}
                failed = sum(len(g.exceptions) for g in groups)
                print(f"first_tool_choice={choice}: {len(trajectories)} rollouts, {failed} failed", flush=True)
        finally:
            await backend.close()
    keys = ["tool_call_rate", "correct_call_rate", "tool_error_rate", "seconds_per_rollout"]
    print(f"\n{args.server} server, bundled model, T=1.0, {args.rollouts} rollouts x {len(tasks)} tasks")
    print(f"{'':22}{'auto (baseline)':>16}{'required':>12}{'difference':>12}")
    for key in keys:
        base, forced = results["auto"][key], results["required"][key]
        diff = forced - base  # nan when either side had no calls
        print(f"{key:22}{base:16.2f}{forced:12.2f}{diff:+12.2f}")


def main() -> None:
    """Parse the arguments and run the bench."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", choices=sorted(TASKS), default="notes")
    parser.add_argument("--rollouts", type=int, default=4)
    parser.add_argument("--max-turns", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=96)
    args: Any = parser.parse_args()
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
