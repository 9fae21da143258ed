"""Where a ``train-mcp`` run's time goes: model turns, tool calls, judge calls, training, evaluation.

Runs :func:`art_adapters.apps.run_train_mcp` as the CLI does (no judge configured unless the flags
name one) with a LangChain callback handler registered for every run in the process
(``langchain_core.tracers.context.register_configure_hook``), so each chat-model call and tool call
is timed without touching the app. Printed at the end:

* per kind of model call (forced first turn, later agent turns, judge calls): count, total and mean
  seconds, completion tokens;
* tool calls: count and seconds;
* each console line with the seconds since the start (steps, evaluations), and the wall time.

Not part of the test suite. Loads the bundled model (run it through the heavy-job slot). Usage::

    .venv/bin/python bench/train_mcp_time.py "python -m mcp_tools.servers.notes" --run-dir DIR [flags...]
"""

from __future__ import annotations

import asyncio
import contextvars
import statistics
import sys
import time
from collections import defaultdict
from typing import Any
from uuid import UUID

from langchain_core.callbacks import AsyncCallbackHandler
from langchain_core.outputs import LLMResult
from langchain_core.tracers.context import register_configure_hook
from rich.console import Console

from art_adapters.apps import TrainMcpConfig, run_train_mcp
from art_adapters.apps._cli import TRAIN_MCP_OPTIONS, app
from art_adapters.apps._options import build_config


class Timer(AsyncCallbackHandler):
    """Times every chat-model and tool call, by kind."""

    def __init__(self) -> None:
        self.started: dict[UUID, tuple[str, float]] = {}
        self.seconds: dict[str, list[float]] = defaultdict(list)
        self.tokens: dict[str, list[int]] = defaultdict(list)

    async def on_chat_model_start(
        self, serialized: dict[str, Any], messages: list[list[Any]], *, run_id: UUID, **kwargs: Any
    ) -> None:
        params = kwargs.get("invocation_params") or {}
        if not params.get("tools"):
            kind = "judge"
        elif params.get("tool_choice") not in (None, "auto"):
            kind = "agent forced first turn"
        else:
            kind = "agent later turn"
        self.started[run_id] = (kind, time.perf_counter())

    async def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        kind, start = self.started.pop(run_id, ("?", time.perf_counter()))
        self.seconds[kind].append(time.perf_counter() - start)
        usage = (response.llm_output or {}).get("token_usage") or {}
        self.tokens[kind].append(int(usage.get("completion_tokens") or 0))

    async def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        kind, start = self.started.pop(run_id, ("?", time.perf_counter()))
        self.seconds[f"{kind} (failed)"].append(time.perf_counter() - start)

    async def on_tool_start(
        self, serialized: dict[str, Any], input_str: str, *, run_id: UUID, **kwargs: Any
    ) -> None:
        self.started[run_id] = ("tool call", time.perf_counter())

    async def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        kind, start = self.started.pop(run_id, ("tool call", time.perf_counter()))
        self.seconds[kind].append(time.perf_counter() - start)

    async def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        await self.on_tool_end(None, run_id=run_id)


class TimedConsole(Console):
    """A console that keeps each printed line with the seconds since *start*."""

    def __init__(self, start: float) -> None:
        super().__init__(width=200, color_system=None)
        self.start = start
        self.lines: list[tuple[float, str]] = []

    def print(self, *objects: Any, **kwargs: Any) -> None:  # noqa: A003 - rich's name
        self.lines.append((time.perf_counter() - self.start, " ".join(str(o) for o in objects)))
        super().print(f"[{time.perf_counter() - self.start:7.1f}s]", *objects, **kwargs)


def _config(argv: list[str]) -> TrainMcpConfig:
    """The TrainMcpConfig the CLI builds from ``train-mcp ARGV`` (its own parser; nothing run)."""
    import typer.main

    command = typer.main.get_command(app).commands["train-mcp"]  # type: ignore[attr-defined]
    context = command.make_context("train-mcp", list(argv))
    params = {k: None if v == () else v for k, v in context.params.items()}  # an option never given
    return build_config(TrainMcpConfig, params, TRAIN_MCP_OPTIONS)


async def main(argv: list[str]) -> None:
    timer = Timer()
    hook: contextvars.ContextVar[Any] = contextvars.ContextVar("bench_timer", default=None)
    register_configure_hook(hook, inheritable=True)
    hook.set(timer)
    config = _config(argv)
    start = time.perf_counter()
    console = TimedConsole(start)
    result = await run_train_mcp(config, console=console)
    wall = time.perf_counter() - start
    print(f"\nwall {wall:.0f} s; step {result.step} of {result.target_step}; stopped: {result.stopped}")
    print(f"{'kind':28} {'count':>6} {'total s':>9} {'mean s':>8} {'tokens/call':>12}")
    for kind, series in sorted(timer.seconds.items()):
        tokens = timer.tokens.get(kind) or [0]
        print(f"{kind:28} {len(series):6d} {sum(series):9.1f} {statistics.fmean(series):8.2f} "
              f"{statistics.fmean(tokens):12.1f}")  # fmt: skip


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
