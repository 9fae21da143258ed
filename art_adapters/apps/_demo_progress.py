"""The demo's progress bar: the current batch of rollouts, relabelled as the run moves from the first
evaluation through each training step to the last evaluation."""

from __future__ import annotations

from typing import Any, Self

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from art_adapters import EvalReport, StepReport

__all__ = ["DemoProgress"]


class DemoProgress:
    """A rich progress bar of the current batch of rollouts, fed by ``run_groups``' progress callback."""

    def __init__(self, console: Console, description: str) -> None:
        self._console = console
        self._progress = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[note]}"), TimeElapsedColumn(), console=console, transient=True,
        )  # fmt: skip
        self._task = self._progress.add_task(description, total=None, note="")
        self._label = description
        self._evaluations = 0

    def __enter__(self) -> Self:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def update(self, state: Any) -> None:
        """Show a ``RunProgress``: rollouts done of total, mean reward, failures."""
        note = f"reward {state.mean_reward:.2f}" if state.mean_reward is not None else ""
        if state.exceptions:
            note += f" [red]{state.exceptions} failed[/red]"
        label = self._label if state.done < state.total else f"{self._label}: rollouts done"
        self._progress.update(
            self._task, total=state.total, completed=state.done, note=note, description=label
        )

    def evaluated(self, report: EvalReport, start: int) -> None:
        """After the first evaluation: say how the start step did, and label the first training batch."""
        self._evaluations += 1
        if self._evaluations == 1:
            correct = report.metrics.get("correct_mean", 0)
            self._console.print(f"step {report.step}: held-out correct {correct:.0%}")
            self._relabel(f"training: rollouts of step {start + 1}")

    def next_step(self, report: StepReport, last: int) -> None:
        """After a step: label the next batch (or the final evaluation)."""
        more = report.step < last
        self._relabel(f"training: rollouts of step {report.step + 1}" if more else "evaluating held-out")

    def _relabel(self, label: str) -> None:
        self._label = label
        self._progress.update(self._task, completed=0, description=label, note="")
