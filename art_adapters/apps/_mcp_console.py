"""train-mcp's console: a line per step and evaluation that says what happened, and what to do about it.

:class:`ToolTally` counts each tool's calls and errors; :class:`StepConsole` prints the loop's reports;
:func:`report` says where the finished run is and how to use the trained model.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from rich.markup import escape

from art_adapters import EvalReport, HackingWarning, StepReport, Trajectory
from art_adapters.apps._train_mcp_config import TrainMcpResult
from mcp_tools import Scenario

__all__ = ["StepConsole", "ToolTally", "failing_tool_hint", "report", "tool_rates", "usage_snippet"]

#: An error text about a path or a repository: the tool cannot reach the data, whatever the model does.
_PATH_ERROR = re.compile(
    r"no such file|not a (?:valid )?(?:git )?(?:repository|directory)|outside (?:the )?allowed|access denied|"
    r"permission denied|invalid path|\bpath\b.{0,40}\b(?:not|outside|invalid)",
    re.IGNORECASE,
)


class ToolTally:
    """Calls and errors per tool over a run's training rollouts, to flag tools that only ever fail.

    A tool whose every call fails (a missing file, setting or login on the server's side) teaches
    the agent nothing but to avoid it; :meth:`newly_failing` names each such tool once it has
    failed *min_calls* times without a success.
    """

    def __init__(self, min_calls: int = 4) -> None:
        self.min_calls = min_calls
        self.calls: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.last_error: dict[str, str] = {}
        self._flagged: set[str] = set()

    def add(self, trajectory: Trajectory) -> None:
        """Count the tool calls of one rollout."""
        for record in trajectory.tool_records:
            self.calls[record.name] += 1
            self.errors[record.name] += int(record.is_error)
            if record.is_error or record.error:
                self.last_error[record.name] = str(record.error or record.result or "")

    def counting(
        self, rollout: Callable[[Scenario], Awaitable[Trajectory]]
    ) -> Callable[[Scenario], Awaitable[Trajectory]]:
        """*rollout*, counting the tool calls of every trajectory it returns."""

        async def counted(scenario: Scenario) -> Trajectory:
            trajectory = await rollout(scenario)
            self.add(trajectory)
            return trajectory

        return counted

    def counting_scores(self, score: Any) -> Any:
        """*score* (a ``train_loop`` scorer), counting the tool calls of every trajectory it is given.

        For rollouts that ran elsewhere (Ray workers), where :meth:`counting` would count in the
        worker's copy of this tally.
        """

        async def counted(groups: Any, scenarios: Any) -> Any:
            for group in groups:
                for trajectory in group.trajectories:
                    self.add(trajectory)
            return await score(groups, scenarios)

        return counted

    def newly_failing(self) -> list[tuple[str, int]]:
        """``(tool, calls)`` for tools that failed all of at least ``min_calls`` calls, each named once."""
        out = [
            (name, calls)
            for name, calls in self.calls.items()
            if calls >= self.min_calls and self.errors[name] == calls and name not in self._flagged
        ]
        self._flagged.update(name for name, _ in out)
        return out


def tool_rates(metrics: dict[str, Any]) -> str:
    """``", tools called in 75% of rollouts, 10% of calls failed"`` from a metrics row ("" without)."""
    out = ""
    if isinstance(metrics.get("tool_call_rate"), int | float):
        out += f", tools called in {metrics['tool_call_rate']:.0%} of rollouts"
    if isinstance(metrics.get("tool_error_rate"), int | float):
        out += f", {metrics['tool_error_rate']:.0%} of calls failed"
    return out


def failing_tool_hint(name: str, calls: int, last_error: str) -> str:
    """The console line for a tool that failed in every call so far: what to check, by what it said."""
    said = f" (last error: {last_error.strip().splitlines()[0][:120]})" if last_error.strip() else ""
    if _PATH_ERROR.search(last_error):
        return (
            f"tool {name!r} failed in all {calls} of its calls so far{said}: its errors are about paths, "
            "which the model cannot know; start the server inside its data (--cwd DIR, or --cwd "
            "{state:SOURCE} for a per-rollout copy, with relative paths such as '--repository .')"
        )
    return (
        f"tool {name!r} failed in all {calls} of its calls so far{said}: check what it needs (a file, a "
        f"setting, a login), or leave it out with --exclude-tools {name}"
    )


class StepConsole:
    """The ``on_step``/``on_eval``/``on_warning`` callbacks of train-mcp's loop, printing to *console*.

    A step that trained is "step N: ..., trained"; one that did not is named by the step it tried to
    make ("step N: ..., not trained (why); the model stays at step N-1"), as the loop's log names it.
    A forced first turn cut by the token limit is said once, with what to change; a reward-hacking
    warning raised before any step trained says it is the base model's own behaviour.
    """

    def __init__(
        self, console: Any, tally: ToolTally | None = None, *, max_tokens: int | None = None
    ) -> None:
        self.console = console
        self.tally = tally
        self.max_tokens = max_tokens
        self.trained = False
        self._cut_said = False

    def _cut(self, metrics: dict[str, Any]) -> None:
        cut = metrics.get("first_turn_cut_mean")
        if self._cut_said or not isinstance(cut, int | float) or cut <= 0:
            return
        self._cut_said = True
        limit = f" ({self.max_tokens})" if self.max_tokens else ""
        self.console.print(
            f"[yellow]{cut:.0%} of these rollouts' forced first turns reached --max-tokens{limit} before "
            "their tool call was complete (it did not parse; metrics.jsonl: first_turn_cut_mean); raise "
            "--max-tokens or lower --max-arg-chars / --max-arg-items[/yellow]"
        )

    def on_step(self, step: StepReport) -> None:
        """Print one training step's line (and any tool that only ever failed)."""
        reward = "-" if step.reward_mean is None else f"{step.reward_mean:.3f}"
        rates = tool_rates(step.metrics)
        if step.trained:
            self.trained = True
            self.console.print(f"step {step.step}: mean reward {reward}{rates}, trained")
        else:
            self.console.print(
                f"step {step.step + 1}: mean reward {reward}{rates}, not trained "
                f"({escape(str(step.reason))}); the model stays at step {step.step}"
            )
        self._cut(step.metrics)
        for name, calls in self.tally.newly_failing() if self.tally is not None else []:
            line = failing_tool_hint(name, calls, self.tally.last_error.get(name, ""))
            self.console.print(f"[yellow]{escape(line)}[/yellow]")

    def on_eval(self, report: EvalReport) -> None:
        """Print one held-out evaluation's line."""
        reward = "-" if report.reward_mean is None else f"{report.reward_mean:.3f}"
        self.console.print(
            f"eval at step {report.step}: mean reward {reward} on {report.scored} validation rollouts"
            + tool_rates(report.metrics)
        )
        self._cut(report.metrics)

    def on_warning(self, warning: HackingWarning) -> None:
        """Print a reward-hacking warning in yellow as it is raised."""
        note = "" if self.trained else " (no step has trained yet: this is the base model's own behaviour)"
        self.console.print(f"[yellow]{escape(warning.line())}{note}[/yellow]", highlight=False)


def report(result: TrainMcpResult, console: Any) -> None:
    """Print where the run is and how to use the trained model as a LangChain chat model."""
    console.print(f"run directory: [bold]{result.run_dir.resolve()}[/bold]")
    console.print(
        f"scenarios: {result.scenarios_file} ({result.train_size} train, {result.val_size} validation)"
    )
    for step, reward in result.evals:
        console.print(f"validation mean reward at step {step}: {'-' if reward is None else f'{reward:.3f}'}")
    for path in result.plots:
        console.print(f"plot: {path}")
    for line in result.loop_result.where if result.loop_result is not None else ():
        console.print(f"this run: {line}", highlight=False)
    console.print(
        f"model [bold]{result.model_name}[/bold] is at step {result.step}. Use it as a LangChain chat model:"
    )
    # soft_wrap: the console never breaks a line of code, so the snippet pastes as it is
    console.print(usage_snippet(result), markup=False, highlight=False, soft_wrap=True)
    if result.stopped:
        console.print(f"[red]training stopped before step {result.target_step}: {result.stopped}[/red]")


def usage_snippet(result: TrainMcpResult) -> str:
    """Python lines (inside an ``async`` function, indented) that load the trained model as a chat model."""
    backend = (
        f"await aa.LocalBackend(run_dir={str((result.run_dir / 'backend').resolve())!r}).start()"
        if result.owned_backend
        else f"aa.RemoteBackend({result.backend_url!r})"
    )
    lines = [
        "import art_adapters as aa",
        f"backend = {backend}",
        f"model = aa.TrainableModel(name={result.model_name!r}, project={result.project!r})",
        "await model.register(backend)",
        f"llm = model.chat_model(step={result.step})",
    ]
    return "\n".join(f"    {line}" for line in lines)
