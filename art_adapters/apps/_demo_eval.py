"""The demo's greedy held-out evaluation: the greedy agent's share of correct calls and answers, each
evaluation pinned to its step so it can run beside the loop's sampled evaluation of that step."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from art_adapters import RunConfig, TrainableModel, run_groups

from ._demo_agent import AddScenario, build_agent, make_rollout

__all__ = ["GreedyEvals", "greedy_eval"]


async def greedy_eval(agent: Any, held_out: Sequence[AddScenario]) -> dict[str, float]:
    """The greedy agent's held-out means: ``correct_mean``, ``add_call_ok_mean``, ``answer_ok_mean``."""
    groups = await run_groups(
        make_rollout(agent), list(held_out), n=1, config=RunConfig(timeout_s=600.0, max_concurrency=16),
        progress=False,
    )  # fmt: skip
    rows = [t.metrics for g in groups for t in g.trajectories]
    keys = ("correct", "add_call_ok", "answer_ok")
    return {f"{k}_mean": sum(r[k] for r in rows) / len(rows) for k in keys} if rows else {}


class GreedyEvals:
    """The greedy agent's held-out evaluations before and after training, each pinned to its step
    (``name@step``) so it can run beside the loop's sampled evaluation of the same step."""

    def __init__(
        self, model: TrainableModel, tools: Sequence[Any], held_out: Sequence[AddScenario], max_tokens: int
    ) -> None:
        self._model, self._tools, self._held_out, self._max_tokens = model, tools, held_out, max_tokens
        self._tasks: dict[int, asyncio.Task[dict[str, float]]] = {}
        self._first: int | None = None

    def _start(self, step: int) -> None:
        if step not in self._tasks:
            chat = self._model.chat_model(step, temperature=0.0, max_tokens=self._max_tokens)
            self._tasks[step] = asyncio.create_task(greedy_eval(build_agent(chat, self._tools), self._held_out))

    async def begin(self, start: int) -> None:
        """Start step ``start``'s evaluation: beside the loop's at step 0 (the base model is always
        served); before the loop otherwise (an older checkpoint may be pruned once training starts)."""
        self._first = start
        self._start(start)
        if start != 0:
            await self._tasks[start]

    def last_step(self, step: int) -> None:
        """Start the evaluation of the last step as soon as it is trained."""
        self._start(step)

    async def results(self, final: int) -> tuple[dict[str, float], dict[str, float]]:
        """The first and the ``final`` step's numbers."""
        assert self._first is not None
        self._start(final)
        return await self._tasks[self._first], await self._tasks[final]

    def cancel(self) -> None:
        """Cancel what is still running (the loop failed)."""
        for task in self._tasks.values():
            task.cancel()
