"""``art-adapters demo``: train a LangGraph ReAct agent on the bundled calculator MCP server, on CPU.

What :func:`run_demo` does, in order:

1. starts the embedded backend (``run_dir/backend``) and registers ``demo-agent``;
2. loads the calculator server's tools with ``mcp_tools.load_tools`` (one stdio session
   for the whole demo: the server is stateless) and builds the agent
   (:mod:`art_adapters.apps._demo_agent`): addition questions, one worked example as real
   conversation turns, the first turn must call a tool (``add`` or ``subtract``), later
   turns are free;
3. evaluates the current step on held-out questions (sampled at ``eval_temperature``,
   ``eval_samples`` per question; reward: the verifiable check);
4. trains ``steps`` GRPO steps with :func:`art_adapters._loop.train_loop`, groups scored by
   RULER when a judge endpoint is configured (``ART_ADAPTERS_JUDGE_MODEL`` [+ ``_BASE_URL``,
   ``_API_KEY``], or ``OPENAI_API_KEY`` for ``gpt-4o-mini``), else by the verifiable check;
5. evaluates again, prints the before/after table, writes ``run_dir/plots/reward.png``;
6. answers one question through ``model.chat_model()`` in the same graph.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, PositiveInt

from art_adapters._loop import EvalReport
from art_adapters._redact import redact_url

if TYPE_CHECKING:
    from rich.console import Console

    from art_adapters._loop import Scorer

__all__ = ["DemoConfig", "DemoResult", "resolve_judge", "run_demo"]

logger = logging.getLogger(__name__)

#: The judge used with ``OPENAI_API_KEY`` alone.
OPENAI_JUDGE_MODEL = "gpt-4o-mini"


class DemoConfig(BaseModel):
    """Settings of the demo; each is a ``demo`` flag of the same name.

    Attributes:
        run_dir: backend data, metrics and plots. Default ``.art/demo``. A second run in the
            same directory continues training the same model from its latest step.
        steps: GRPO steps to train in this run (default 4).
        groups: training questions per step (default 3).
        rollouts: rollouts per question, the GRPO group size, >= 2 (default 4).
        eval_size: held-out questions (default 12), never trained on.
        eval_samples: samples per held-out question (default 2).
        train_size: training questions, cycled through (default 32).
        temperature: sampling temperature of training rollouts (default 1.0).
        eval_temperature: sampling temperature of the evaluation (default 1.0: the policy
            being trained; the greedy base model is already right ~90% of the time).
        learning_rate: LoRA learning rate (default 5e-4), lora_rank: LoRA rank (default 8).
        max_tokens: most tokens per model turn (default 48).
        seed: questions, split and training seeds.
        threads: torch threads of the embedded backend (sets ``ART_ADAPTERS_TORCH_THREADS``);
            ``None`` keeps the environment's (or torch's default).
        question: asked at the end through ``model.chat_model()``.
        no_judge: score with the verifiable check even when a judge endpoint is configured.
    """

    model_config = ConfigDict(extra="forbid")

    run_dir: Path = Path(".art/demo")
    steps: NonNegativeInt = 8
    groups: PositiveInt = 3
    rollouts: int = Field(default=4, ge=2)
    eval_size: PositiveInt = 12
    eval_samples: PositiveInt = 4
    train_size: PositiveInt = 32
    temperature: float = Field(default=1.0, gt=0.0, le=2.0)
    eval_temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    learning_rate: float = Field(default=5e-4, gt=0.0)
    lora_rank: PositiveInt = 8
    max_tokens: PositiveInt = 48
    seed: int = 0
    threads: PositiveInt | None = None
    question: str = "What is 345 + 278?"
    no_judge: bool = False


class DemoResult(BaseModel):
    """Where the demo ended: the evaluations before and after, the plot, the final answer."""

    before: EvalReport
    after: EvalReport
    start_step: int
    final_step: int
    scorer: str
    plot: Path | None = None
    answer: str | None = None
    unscored: list[dict[str, Any]] = Field(default_factory=list)
    seconds: float = 0.0


def resolve_judge(no_judge: bool = False) -> tuple[Any | None, str]:
    """The RULER judge from the environment (or ``None``) and a line saying what scores the rollouts."""
    from mcp_tools._generate import JUDGE_API_KEY_ENV, JUDGE_BASE_URL_ENV, JUDGE_MODEL_ENV

    model = os.environ.get(JUDGE_MODEL_ENV, "").strip()
    openai_key = os.environ.get("OPENAI_API_KEY", "").strip()
    if no_judge or not (model or openai_key):
        why = "--no-judge" if no_judge else f"no ${JUDGE_MODEL_ENV} or $OPENAI_API_KEY set"
        return None, f"rewards: the verifiable check (correct add call + correct answer); {why}"
    from langchain_openai import ChatOpenAI

    base_url = os.environ.get(JUDGE_BASE_URL_ENV) or None
    key = os.environ.get(JUDGE_API_KEY_ENV) or openai_key or "not-needed"
    name = model or OPENAI_JUDGE_MODEL
    judge = ChatOpenAI(model=name, base_url=base_url, api_key=key, temperature=0.0)
    where = redact_url(base_url) if base_url else "the OpenAI API"  # no user:password@ on the console
    return judge, f"rewards: RULER, judge {name} at {where}"


def _table(before: EvalReport, after: EvalReport, console: Console) -> None:
    from rich.table import Table

    table = Table(title="held-out questions (never trained on)")
    table.add_column("")
    table.add_column(f"step {before.step}", justify="right")
    table.add_column(f"step {after.step}", justify="right")
    rows = [
        ("correct (add call and answer)", "correct_mean"),
        ("correct add(a, b) call", "add_call_ok_mean"),
        ("correct final answer", "answer_ok_mean"),
    ]
    for label, key in rows:
        b, a = before.metrics.get(key), after.metrics.get(key)
        table.add_row(label, f"{b:.0%}" if b is not None else "-", f"{a:.0%}" if a is not None else "-")
    table.add_row("rollouts", str(before.trajectories), str(after.trajectories))
    console.print(table)


async def run_demo(config: DemoConfig, *, console: Console) -> DemoResult:
    """Run the demo (see the module docstring) and return its numbers."""
    import mcp_tools

    from art_adapters._backends import LocalBackend
    from ._demo_agent import CALCULATOR_SERVER, build_agent, check, make_rollout, make_scenarios
    from art_adapters import RunConfig
    from art_adapters._loop import LoopConfig, evaluate, ruler_scorer, train_loop, verifiable_scorer
    from art_adapters._model import TrainableModel
    from art_adapters._train_config import RetentionPolicy, TrainConfig

    started = time.monotonic()
    if config.threads is not None:
        os.environ["ART_ADAPTERS_TORCH_THREADS"] = str(config.threads)
    questions = make_scenarios(config.train_size + config.eval_size, seed=config.seed)
    train, held_out = questions[: config.train_size], questions[config.train_size :]
    judge, judge_line = resolve_judge(config.no_judge)
    check_scorer: Scorer = verifiable_scorer(check)
    scorer = check_scorer if judge is None else ruler_scorer(judge)
    console.print(judge_line)
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
            sampler = build_agent(
                model.chat_model(temperature=config.temperature, max_tokens=config.max_tokens), tools
            )
            evaluator = build_agent(
                model.chat_model(temperature=config.eval_temperature, max_tokens=config.max_tokens), tools
            )
            loop_config = LoopConfig(
                steps=start + config.steps,
                groups_per_step=config.groups,
                rollouts_per_group=config.rollouts,
                eval_every=0,
                eval_rollouts=config.eval_samples,
                eval_at_start=False,
                # the backend decodes concurrent requests as one batch: more is faster
                run=RunConfig(timeout_s=600.0, max_failure_rate=0.25, max_concurrency=16),
                seed=config.seed,
                run_dir=config.run_dir,
                train=TrainConfig(
                    learning_rate=config.learning_rate,
                    lora_rank=config.lora_rank,
                    lora_alpha=2.0 * config.lora_rank,
                    micro_batch_size=8,
                    seed=config.seed,
                    retention=RetentionPolicy(keep_latest=1),
                ),
            )
            with _Bar(console, f"evaluating step {start} on held-out questions") as bar:
                before = await evaluate(
                    model, make_rollout(evaluator), held_out, check_scorer, loop_config, progress=bar.update
                )
            console.print(f"step {before.step}: held-out correct {before.metrics.get('correct_mean', 0):.0%}")

            def on_step(report: Any) -> None:
                reward = f"{report.reward_mean:.2f}" if report.reward_mean is not None else "-"
                loss = report.metrics.get("loss")
                state = "trained" if report.trained else f"not trained ({report.reason})"
                console.print(
                    f"step {report.step}: {state}; train reward {reward}"
                    + (f", loss {loss:.4f}" if isinstance(loss, float) else "")
                    + (f"; [yellow]unscored groups: {len(report.unscored)}[/yellow]" * bool(report.unscored))
                )

            with _Bar(console, f"training: rollouts of step {start + 1}") as bar:
                result = await train_loop(
                    model, make_rollout(sampler), train, score=scorer, config=loop_config,
                    val_scenarios=held_out, eval_rollout=make_rollout(evaluator), eval_score=check_scorer,
                    on_step=lambda report: (on_step(report), bar.next_step(report, loop_config.steps)),
                    progress=bar.update,
                )  # fmt: skip
            if result.stopped:
                console.print(f"[yellow]training stopped early: {result.stopped}[/yellow]")
            after = result.evals[-1] if result.evals else before
            _table(before, after, console)
            plot = _plot(config.run_dir, console)
            final_agent = build_agent(model.chat_model(temperature=0.0, max_tokens=config.max_tokens), tools)
            answer = await _answer(final_agent, config.question, console)
        return DemoResult(
            before=before, after=after, start_step=start, final_step=result.final_step, scorer=judge_line,
            plot=plot, answer=answer, unscored=result.unscored, seconds=time.monotonic() - started,
        )  # fmt: skip
    finally:
        await backend.close()


class _Bar:
    """A rich progress bar of the current batch of rollouts, fed by ``run_groups``' progress callback."""

    def __init__(self, console: Console, description: str) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._progress = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[note]}"), TimeElapsedColumn(), console=console, transient=True,
        )  # fmt: skip
        self._task = self._progress.add_task(description, total=None, note="")
        self._label = description

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

    def next_step(self, report: Any, last: int) -> None:
        """After a step: label the next batch (or the final evaluation)."""
        more = report.step < last
        self._label = f"training: rollouts of step {report.step + 1}" if more else "evaluating held-out"
        self._progress.update(self._task, completed=0, description=self._label, note="")


def _plot(run_dir: Path, console: Console) -> Path | None:
    from art_adapters._errors import ConfigError
    from art_adapters.observe._plot import plot_run

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
