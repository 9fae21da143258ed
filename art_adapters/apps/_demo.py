"""``art-adapters demo``: train a LangGraph ReAct agent on the bundled calculator MCP server, on CPU.

:func:`run_demo` evaluates the model on held-out addition questions, trains a few GRPO steps,
evaluates again and prints the before/after table: the whole library on one small task.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field
from rich.console import Console
from rich.markup import escape
from rich.table import Table

import mcp_tools
from art_adapters import (
    ConfigError,
    EvalReport,
    HackingWarning,
    LocalBackend,
    LoopConfig,
    LoopResult,
    PairedComparison,
    Scorer,
    StepReport,
    TrainableModel,
    combined_scorer,
    train_loop,
    verifiable_scorer,
)
from art_adapters.files import write_atomic
from art_adapters.observe import MetricsHistory, get_observer, plot_run
from art_adapters.ruler import judge_from_env, judges_from_env

from ._demo_agent import (
    CALCULATOR_SERVER,
    AddScenario,
    build_agent,
    check,
    make_rollout,
    make_scenarios,
    scripted_trajectories,
)
from ._demo_config import DemoConfig
from ._demo_eval import GreedyEvals
from ._demo_progress import DemoProgress

__all__ = [
    "DemoConfig",
    "DemoResult",
    "demo_scorer",
    "judge_line",
    "judge_rows",
    "resolve_judge",
    "resolve_judges",
    "results_table",
    "run_demo",
]

logger = logging.getLogger(__name__)


class DemoResult(BaseModel):
    """Where the demo ended: the evaluations before and after, the plot, the final answer.

    ``before``/``after`` sample at ``eval_temperature``; ``greedy_before``/``greedy_after`` hold the
    greedy agent's ``correct_mean``, ``add_call_ok_mean`` and ``answer_ok_mean`` on the same held-out
    questions (empty when ``eval_temperature`` is 0: then ``before``/``after`` are greedy).
    ``trained_steps``/``untrained_steps``: the GRPO iterations that made a checkpoint or trained nothing.
    ``paired``: ``before``/``after`` compared held-out question by question on ``correct`` (how many
    questions rose, fell, stayed; the sign test's p-value), ``None`` when either scored nothing.
    """

    before: EvalReport
    after: EvalReport
    greedy_before: dict[str, float] = Field(default_factory=dict)
    greedy_after: dict[str, float] = Field(default_factory=dict)
    trained_steps: int = 0
    untrained_steps: int = 0
    start_step: int
    final_step: int
    scorer: str
    plot: Path | None = None
    answer: str | None = None
    unscored: list[dict[str, Any]] = Field(default_factory=list)
    seconds: float = 0.0
    paired: PairedComparison | None = None


def judge_line(wheres: Sequence[str], no_judge: bool = False) -> str:
    """The demo's line saying what scores its training rollouts, from the judges' lines (none, one or two).

    ``wheres``: each judge's line from :func:`~art_adapters.ruler.judges_from_env` (``"m at URL ($VAR)"``).
    """
    if not wheres:
        why = "--no-judge" if no_judge else "no $ART_ADAPTERS_JUDGE_MODEL or $OPENAI_API_KEY set"
        return f"rewards: the verifiable check (correct add call + correct answer); {why}"
    if len(wheres) == 1:
        return f"rewards: RULER, judge {wheres[0]}"
    return (
        f"rewards: RULER, judges {' and '.join(wheres)} (their mean; the table shows how far they agree)"
    )


def resolve_judge(no_judge: bool = False) -> tuple[Any | None, str]:
    """The RULER judge (:func:`~art_adapters.ruler.judge_from_env`) or ``None``, and a line saying so.

    Without a configured judge (or with *no_judge*) the rollouts are scored by the verifiable check.
    """
    found = None if no_judge else judge_from_env()
    if found is None:
        return None, judge_line([], no_judge)
    judge, where = found
    return judge, judge_line([where])


def resolve_judges(no_judge: bool = False) -> tuple[list[Any], str]:
    """The RULER judges (:func:`~art_adapters.ruler.judges_from_env`: one, or two when
    ``$ART_ADAPTERS_JUDGE_MODEL_2`` is set too) and the line saying so; ``[]`` with *no_judge* or none set.
    """
    found = [] if no_judge else judges_from_env()
    return [judge for judge, _ in found], judge_line([where for _, where in found], no_judge)


#: The rows :func:`judge_rows` adds: label, metrics-row key, format.
_JUDGE_ROWS = (
    ("judge agreement", "judge_agreement_mean", "{:.2f}"),
    ("RULER vs the check: Spearman", "calibration_spearman", "{:+.2f}"),
    ("RULER vs the check: pairs in order", "calibration_pairwise", "{:.0%}"),
)


def judge_rows(run_dir: Path, start: int) -> list[tuple[str, str, str]]:
    """The table's judge rows, from the last ``train`` row this run wrote to ``run_dir/metrics.jsonl``.

    That row (a step after ``start``, not the SFT warm-up) describes the last step's training groups:
    the judges' mean per-trajectory agreement (``judge_agreement_mean``, ``1 - (max - min)`` of their
    scores: two judges only) and RULER's agreement with the verifiable check (``calibration_spearman``,
    ``calibration_pairwise``: the check is kept beside RULER's score as ``independent_reward``).
    Each row is ``(label, "-", value)``: the
    numbers belong to the training rollouts, not to a held-out evaluation. A number the row lacks
    leaves its row out; without a judge there are none.
    """
    rows = [
        r for r in MetricsHistory(run_dir).rows("train") if r["step"] > start and not r.get("sft_warmup")
    ]
    if not rows:
        return []
    last = rows[-1]
    out = []
    for label, key, form in _JUDGE_ROWS:
        value = last.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            out.append((f"{label} (step {last['step']} training)", "-", form.format(value)))
    return out


def results_table(
    before: EvalReport,
    after: EvalReport,
    extra: Sequence[tuple[str, str, str]] = (),
    *,
    greedy: tuple[Mapping[str, float], Mapping[str, float]] | None = None,
    sampled_label: str = "sampled",
    steps: str | None = None,
) -> Table:
    """The before/after table of the held-out evaluation (``greedy``: the greedy agent's rows too),
    the ``steps`` row (how many steps trained) and the ``extra`` rows (:func:`judge_rows`)."""
    table = Table(title="held-out questions (never trained on)")
    table.add_column("")
    table.add_column(f"step {before.step}", justify="right")
    table.add_column(f"step {after.step}", justify="right")
    rows = [
        ("correct (add call and answer)", "correct_mean"),
        ("correct add(a, b) call", "add_call_ok_mean"),
        ("correct final answer", "answer_ok_mean"),
    ]
    sets = [(sampled_label, before.metrics, after.metrics)]
    if greedy is not None:
        sets.insert(0, ("greedy", greedy[0], greedy[1]))
    for name, b_metrics, a_metrics in sets:
        for label, key in rows:
            b, a = b_metrics.get(key), a_metrics.get(key)
            shown = f"{name}: {label}" if greedy is not None else label
            table.add_row(shown, f"{b:.0%}" if b is not None else "-", f"{a:.0%}" if a is not None else "-")
    table.add_row("rollouts" if greedy is None else f"{sampled_label} rollouts", str(before.trajectories), str(after.trajectories))
    if steps is not None:
        table.add_row("GRPO steps trained", "-", steps)
    for label, b, a in extra:
        table.add_row(label, b, a)
    return table


def _print_warning(warning: HackingWarning, console: Console) -> None:
    """A reward-hacking warning as it is raised: one yellow line with its message and what to check."""
    console.print(f"[yellow]{escape(warning.line())}[/yellow]", highlight=False)


def demo_scorer(judges: Sequence[Any]) -> Scorer:
    """How the demo scores its training groups: RULER with ``judges`` (one, or an ensemble of two), the
    verifiable check kept beside it as ``independent_reward`` (so the rows carry RULER's calibration
    against it) but not mixed in (``weight=1``); without judges, the check alone."""
    if not judges:
        return verifiable_scorer(check)
    if len(judges) == 1:
        return combined_scorer(judges[0], check, weight=1.0)
    return combined_scorer(judges=list(judges), reward=check, weight=1.0)


def _loop_config(config: DemoConfig, start: int, sft_file: Path | None = None) -> LoopConfig:
    """``config.loop`` for a model at step ``start``: up to ``start + loop.steps`` (the demo's steps count
    from where the model is); an SFT warm-up on ``sft_file`` when given."""
    loop = config.loop
    return loop.model_copy(update={"steps": start + loop.steps, "sft_warmup": sft_file or loop.sft_warmup})


async def write_imitation_file(
    config: DemoConfig, train: list[AddScenario], tools: list[Any], start: int
) -> Path | None:
    """``run_dir/scripted-imitation.jsonl``: the scripted policy's runs of the first ``scripted_imitation``
    training questions (cycled) through the demo's own graph, when that SFT step is asked for and the
    model is at step 0; else ``None``."""
    if config.scripted_imitation == 0 or start != 0 or config.loop.steps == 0:
        return None
    scenarios = [train[i % len(train)] for i in range(config.scripted_imitation)]
    trajectories = await scripted_trajectories(scenarios, tools)
    path = config.run_dir / "scripted-imitation.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, "".join(t.model_dump_json() + "\n" for t in trajectories).encode())
    return path


async def run_demo(config: DemoConfig, *, console: Console) -> DemoResult:
    """Run the demo and return its numbers.

    1. Start the embedded backend (``run_dir/backend``) and register ``demo-agent``.
    2. Load the calculator server's tools (one stdio session for the whole demo: the server is
       stateless) and build the agent (:mod:`art_adapters.apps._demo_agent`).
    3. Train with ``train_loop``: it evaluates the current step on the held-out questions
       (``loop.eval_rollouts`` each at ``eval_temperature``, scored by the verifiable check), trains
       ``loop.steps`` GRPO steps (groups scored by RULER when a judge is configured, by two judges when
       ``$ART_ADAPTERS_JUDGE_MODEL_2`` is set too, see :func:`resolve_judges`, with the verifiable
       check kept beside RULER for calibration; else by the check alone) and evaluates again. Each
       reward-hacking warning is printed as it is raised.
    4. Print the before/after table (with a judge: the last step's judge agreement and RULER's
       calibration against the check, :func:`judge_rows`), write ``run_dir/plots/reward.png`` and
       answer ``question`` through ``model.chat_model()`` in the same graph.
    """
    started = time.monotonic()
    if config.threads is not None:
        os.environ["ART_ADAPTERS_TORCH_THREADS"] = str(config.threads)
    questions = make_scenarios(config.train_size + config.eval_size, seed=config.seed)
    train, held_out = questions[: config.train_size], questions[config.train_size :]
    judges, scorer_line = resolve_judges(config.no_judge)
    console.print(scorer_line)
    for line in get_observer().where():  # Langfuse / OTLP from the environment: traced with no code
        console.print(line)
    with console.status("starting the embedded backend (the first start converts the bundled model)"):
        backend = await LocalBackend(run_dir=config.run_dir / "backend").start()
    try:
        model = TrainableModel(name="demo-agent", project="demo")
        await model.register(backend)
        start = await model.get_step()
        console.print(
            f"backend at {backend.base_url}; model [bold]{model.name}[/bold] at step {start}; "
            f"{len(train)} training and {len(held_out)} held-out questions"
        )
        async with mcp_tools.rollout():  # one calculator session for every rollout (stateless server)
            tools = await mcp_tools.load_tools(CALCULATOR_SERVER)
            console.print(f"calculator MCP server: {', '.join(t.name for t in tools)}")
            sft_file = await write_imitation_file(config, train, tools, start)
            if sft_file is not None:
                console.print(
                    f"imitation of a scripted policy (not RL): an SFT step on {config.scripted_imitation} "
                    f"of its runs in {sft_file}"
                )
            run = _DemoRun(config, model, tools, start, console)
            result, greedy_before, greedy_after = await run.train(train, held_out, judges, sft_file)
            before, after = result.evals[0], result.evals[-1]
            grpo = [s for s in result.steps if not s.metrics.get("sft_warmup")]
            trained = sum(s.trained for s in grpo)
            sampled = config.eval_temperature > 0
            label = f"T={config.eval_temperature:g}" if sampled else "greedy"
            console.print(results_table(
                before, after, judge_rows(config.run_dir, start),
                greedy=(greedy_before, greedy_after) if sampled else None, sampled_label=label,
                steps=f"{trained} of {len(grpo)}",
            ))  # fmt: skip
            paired = _compare(before, after, label, console)
            plot = _plot(config.run_dir, console)
            answer = await _answer(run.agent(0.0), config.question, console)
        return DemoResult(
            before=before, after=after, greedy_before=greedy_before, greedy_after=greedy_after,
            trained_steps=trained, untrained_steps=len(grpo) - trained, start_step=start,
            final_step=result.final_step, scorer=scorer_line, plot=plot, answer=answer, unscored=result.unscored,
            seconds=time.monotonic() - started, paired=paired,
        )  # fmt: skip
    finally:
        await backend.close()


class _DemoRun:
    """The demo's training run on one model and its calculator tools: the agents at each temperature,
    and ``train_loop`` with the greedy evaluations beside it."""

    def __init__(
        self, config: DemoConfig, model: TrainableModel, tools: Sequence[Any], start: int, console: Console
    ) -> None:
        self.config, self.model, self.tools, self.start, self.console = config, model, tools, start, console

    def agent(self, temperature: float) -> Any:
        """The demo's agent on the latest step, sampling at ``temperature``."""
        chat = self.model.chat_model(temperature=temperature, max_tokens=self.config.max_tokens)
        return build_agent(chat, self.tools)

    async def train(
        self, train: Sequence[Any], held_out: Sequence[Any], judges: Sequence[Any], sft_file: Path | None
    ) -> tuple[LoopResult, dict[str, float], dict[str, float]]:
        """Run ``train_loop`` with a progress bar and a line per step; with a sampled evaluation, the
        greedy agent's before and after beside it (empty dicts otherwise)."""
        config, start, console = self.config, self.start, self.console
        loop_config = _loop_config(config, start, sft_file)
        greedy = None
        if config.eval_temperature > 0:
            greedy = GreedyEvals(self.model, self.tools, held_out, config.max_tokens)
            await greedy.begin(start)

        def stepped(report: StepReport) -> None:
            _print_step(report, console)
            bar.next_step(report, loop_config.steps)
            if greedy is not None and report.trained and report.step >= loop_config.steps:
                greedy.last_step(report.step)  # beside the final sampled evaluation

        try:
            with DemoProgress(console, f"evaluating step {start} on held-out questions") as bar:
                result = await train_loop(
                    self.model, make_rollout(self.agent(config.temperature)), train,
                    score=demo_scorer(judges), config=loop_config, val_scenarios=held_out,
                    eval_rollout=make_rollout(self.agent(config.eval_temperature)),
                    eval_score=verifiable_scorer(check),
                    on_step=stepped, on_eval=lambda report: bar.evaluated(report, start),
                    progress=bar.update, on_warning=lambda warning: _print_warning(warning, console),
                )  # fmt: skip
            if result.stopped:
                console.print(f"[yellow]training stopped early: {result.stopped}[/yellow]")
            for line in result.where:
                console.print(f"this run: {line}", highlight=False)
            if greedy is None:
                return result, {}, {}
            greedy_before, greedy_after = await greedy.results(result.evals[-1].step)
            return result, greedy_before, greedy_after
        finally:
            if greedy is not None:
                greedy.cancel()


def _compare(before: EvalReport, after: EvalReport, label: str, console: Console) -> PairedComparison | None:
    """Held-out correctness compared question by question (an exact sign test), printed."""
    try:
        paired = before.compare(after, "correct")
    except ValueError:  # an evaluation with no scored question
        return None
    console.print(
        f"held-out at {label}, step {before.step} -> {after.step}: {paired.describe()}", highlight=False
    )
    return paired


def _print_step(report: StepReport, console: Console) -> None:
    reward = f"{report.reward_mean:.2f}" if report.reward_mean is not None else "-"
    loss = report.metrics.get("loss")
    state = "trained" if report.trained else f"not trained, still at this step ({report.reason})"
    if report.metrics.get("sft_warmup"):
        state, reward = "SFT on the scripted policy's runs (imitation, not RL)", "-"
    console.print(
        f"step {report.step}: {state}; train reward {reward}"
        + (f", loss {loss:.4f}" if isinstance(loss, float) else "")
        + (f"; [yellow]unscored groups: {len(report.unscored)}[/yellow]" * bool(report.unscored))
    )


def _plot(run_dir: Path, console: Console) -> Path | None:
    try:
        paths = plot_run(run_dir)
    except ConfigError as exc:
        console.print(f"[yellow]no plot: {exc}[/yellow]")
        return None
    reward = next((p for p in paths if p.name == "reward.png"), paths[0] if paths else None)
    console.print(f"reward curve: {reward}")
    return reward


async def _answer(agent: Any, question: str, console: Console) -> str | None:
    """Ask ``question`` through the trained model in the same graph and print the conversation."""
    with console.status("the trained agent is answering"):
        state = await agent.ainvoke({"messages": [("user", question)]}, {"recursion_limit": 12})
    for message in state["messages"]:
        calls = getattr(message, "tool_calls", None)
        text = message.content if isinstance(message.content, str) else str(message.content)
        line = f"[bold]{message.type}[/bold]: {text}" + (f"  tool_calls={calls}" if calls else "")
        console.print(line, highlight=False)
    last = state["messages"][-1]
    return last.content if isinstance(last.content, str) else None
