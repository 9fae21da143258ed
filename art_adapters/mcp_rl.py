"""MCP-RL: point at any MCP server, get scenarios, train an agent that masters its tools.

``art-adapters train-mcp SERVER`` runs :func:`run_train_mcp`:

1. list the server's tools (``mcp_tools.load_tools``; a stdio command or an HTTP URL);
2. load scenarios (``--scenarios FILE``) or have the generator write them
   (``mcp_tools.generate_scenarios``), saved as ``scenarios.jsonl`` in the run directory
   so they can be edited and reused; split into train and validation (seeded);
3. build a ReAct agent (:func:`build_agent`) on the trainable model with those tools;
4. train with the training loop (:mod:`art_adapters.loop`): groups scored by RULER, a
   held-out evaluation of the greedy agent every few steps, ``metrics.jsonl`` and the
   plots (``plots/reward.png``...) in the run directory.

Every rollout runs inside ``mcp_tools.rollout()`` (:func:`make_rollout`): it gets a fresh
MCP session, so a stateful server (the bundled notes server gives each session its own
copy of its SQLite data) starts every rollout of a group from the same state, and
rollouts cannot see each other's changes.

The judge (and the default scenario generator) is, in order: the ``judge_*`` settings,
the ``ART_ADAPTERS_JUDGE_MODEL`` / ``_BASE_URL`` / ``_API_KEY`` environment, else the
trainable model's own base weights (step 0) on the backend: it runs anywhere, but a 135M
judge and generator are weak; point at a stronger endpoint for real runs.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, PositiveInt, model_validator

from .errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    from langchain_core.language_models import BaseChatModel
    from langchain_core.tools import BaseTool
    from langgraph.graph.state import CompiledStateGraph

    from mcp_tools import Scenario

    from .backends import Backend
    from .loop import LoopResult
    from .model import TrainableModel
    from .trajectory import Trajectory

__all__ = [
    "DEFAULT_SYSTEM_PROMPT",
    "TrainMcpConfig",
    "TrainMcpResult",
    "build_agent",
    "make_rollout",
    "report",
    "resolve_judge_model",
    "run_train_mcp",
]

logger = logging.getLogger(__name__)

DEFAULT_SYSTEM_PROMPT = (
    "You are a helpful assistant with tools. Use them to do what the user asks: call a tool, "
    "read its result, call more tools if needed, then answer the user briefly."
)


LOCAL_JUDGE_LINE = "judge: the base model on the backend"


class TrainMcpConfig(BaseModel):
    """Settings of one ``train-mcp`` run. Every field is a ``train-mcp`` flag of the same name.

    Attributes:
        server: the MCP server: a stdio command (``"python -m mcp_tools.servers.notes"``) or a
            streamable-HTTP URL (``"http://127.0.0.1:8123/mcp"``).
        run_dir: the run directory: scenarios, backend data (for the embedded backend),
            metrics, plots and checkpoints. Default ``.art/mcp-rl``.
        scenarios: a JSONL scenarios file to load instead of generating (see
            ``mcp_tools.load_scenarios``).
        n_scenarios: scenarios to generate when ``scenarios`` is not given (default 24).
        val_fraction: share held out for evaluation, in [0, 1) (default 0.25).
        seed: seed of the train/validation split and of sampling where the backend takes one.
        model_name: the trainable model's name on the backend (served as ``name@step``).
        project: the project the model belongs to.
        base_model: base weights: ``smollm2-135m-instruct`` (bundled) or a model folder.
        backend_url: a running backend (``art-adapters serve``); default: start the embedded
            backend under ``run_dir/backend``.
        api_key: the backend's API key, if it has one.
        judge_model, judge_base_url, judge_api_key: the RULER judge (and scenario generator),
            any OpenAI-compatible endpoint; default: the ``ART_ADAPTERS_JUDGE_*`` environment,
            else the base model on the backend.
        steps: train until the model is at this step (default 4; a rerun on the same backend
            resumes); 0, or the model's current step, only evaluates.
        groups_per_step: scenarios per training step (default 2).
        rollouts_per_group: rollouts of each scenario, the GRPO group size (default 4, >= 2).
        eval_every: evaluate on the validation split every this many steps (default 2).
        max_turns: most model turns per rollout; a turn's tool calls run before the next (default 4).
        max_tokens: most tokens per model turn (default 128).
        temperature: sampling temperature of training rollouts (default 1.0; evaluation is greedy).
        learning_rate: LoRA learning rate (default 2e-4).
        system_prompt: the agent's system prompt.
        rollout_timeout_s: seconds one rollout may take (default 600).
    """

    model_config = ConfigDict(extra="forbid")

    server: str = Field(min_length=1)
    run_dir: Path = Path(".art/mcp-rl")
    scenarios: Path | None = None
    n_scenarios: PositiveInt = 24
    val_fraction: float = Field(default=0.25, ge=0.0, lt=1.0)
    seed: int = 0
    model_name: str = "mcp-agent"
    project: str = "mcp-rl"
    base_model: str = "smollm2-135m-instruct"
    backend_url: str | None = None
    api_key: str | None = None
    judge_model: str | None = None
    judge_base_url: str | None = None
    judge_api_key: str | None = None
    steps: NonNegativeInt = 4
    groups_per_step: PositiveInt = 2
    rollouts_per_group: int = Field(default=4, ge=2)
    eval_every: PositiveInt = 2
    max_turns: PositiveInt = 4
    max_tokens: PositiveInt = 128
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    learning_rate: float = Field(default=2e-4, gt=0.0)
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    rollout_timeout_s: float = Field(default=600.0, gt=0.0)

    @model_validator(mode="after")
    def _check(self) -> TrainMcpConfig:
        if self.judge_base_url and not self.judge_model:
            raise ValueError("judge_base_url needs judge_model too (the model name on that endpoint)")
        if self.scenarios is None and self.n_scenarios < 2 and self.val_fraction > 0:
            raise ValueError("n_scenarios must be >= 2 to hold out a validation split; or set val_fraction=0")
        return self


class TrainMcpResult(BaseModel):
    """What a ``train-mcp`` run produced.

    Attributes:
        run_dir: the run directory.
        scenarios_file: the scenarios used (``run_dir/scenarios.jsonl``).
        model_name, project: the trained model.
        backend_url: the backend it was served from during the run.
        owned_backend: whether the run started the embedded backend (under ``run_dir/backend``).
        step: the model's latest step at the end.
        train_size, val_size: scenarios in each split.
        evals: ``(step, mean RULER reward)`` of each held-out evaluation (greedy agent).
        plots: the charts written under ``run_dir/plots``.
        loop_result: what the training loop returned (:class:`~art_adapters.loop.LoopResult`).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    run_dir: Path
    scenarios_file: Path
    model_name: str
    project: str
    backend_url: str
    owned_backend: bool = False
    step: int
    train_size: int
    val_size: int
    evals: list[tuple[int, float | None]] = Field(default_factory=list)
    plots: list[Path] = Field(default_factory=list)
    loop_result: Any = None


#: Sampling temperature of the scenario writer (variety), when its model has a ``temperature`` field.
GENERATOR_TEMPERATURE = 0.8


def _with_temperature(model: BaseChatModel, temperature: float) -> BaseChatModel:
    """A copy of *model* sampling at *temperature*, or *model* itself when it has no such field."""
    if "temperature" in type(model).model_fields:
        return model.model_copy(update={"temperature": temperature})
    return model


def resolve_judge_model(
    config: TrainMcpConfig, fallback: Callable[[], BaseChatModel]
) -> tuple[BaseChatModel, str]:
    """The judge chat model and a line saying which it is: flags, then environment, then *fallback*."""
    from langchain_openai import ChatOpenAI

    from mcp_tools._generate import JUDGE_API_KEY_ENV, JUDGE_BASE_URL_ENV, JUDGE_MODEL_ENV, default_generator

    if config.judge_model:
        base_url = config.judge_base_url or os.environ.get(JUDGE_BASE_URL_ENV) or None
        api_key = (
            config.judge_api_key
            or os.environ.get(JUDGE_API_KEY_ENV)
            or os.environ.get("OPENAI_API_KEY")
            or "not-needed"
        )
        judge = ChatOpenAI(model=config.judge_model, base_url=base_url, api_key=api_key, temperature=0.0)
        return judge, f"judge: {config.judge_model} at {base_url or 'the OpenAI API'} (--judge-model)"
    if os.environ.get(JUDGE_MODEL_ENV, "").strip():
        judge = _with_temperature(default_generator(), 0.0)
        where = os.environ.get(JUDGE_BASE_URL_ENV) or "the OpenAI API"
        return judge, f"judge: {os.environ[JUDGE_MODEL_ENV]} at {where} (${JUDGE_MODEL_ENV})"
    return fallback(), (
        f"{LOCAL_JUDGE_LINE} (no judge configured; set --judge-model or "
        f"${JUDGE_MODEL_ENV} for a stronger one: a small local judge gives noisy rewards)"
    )


def build_agent(
    chat_model: BaseChatModel,
    tools: Sequence[BaseTool],
    *,
    system_prompt: str = DEFAULT_SYSTEM_PROMPT,
    max_turns: int = 4,
) -> CompiledStateGraph:
    """A LangGraph ReAct loop: model -> tools -> model ..., at most *max_turns* model turns.

    The model answers with tool calls or a final message; after *max_turns* model turns the
    run ends even if the last turn asked for tools (those calls are not run).
    """
    from langchain_core.messages import SystemMessage
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode

    if max_turns < 1:
        raise ConfigError(f"max_turns must be >= 1, got {max_turns}")
    llm = chat_model.bind_tools(list(tools))

    async def call_model(state: dict[str, Any]) -> dict[str, Any]:  # plain hints: langgraph evaluates them
        return {"messages": [await llm.ainvoke([SystemMessage(system_prompt), *state["messages"]])]}

    def route(state: dict[str, Any]) -> str:
        messages = state["messages"]
        turns = sum(1 for m in messages if m.type == "ai")
        if getattr(messages[-1], "tool_calls", None) and turns < max_turns:
            return "tools"
        return END

    graph = StateGraph(MessagesState)
    graph.add_node("model", call_model)
    graph.add_node("tools", ToolNode(list(tools)))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", route, ["tools", END])
    graph.add_edge("tools", "model")
    return graph.compile()


def make_rollout(agent: CompiledStateGraph) -> Callable[[Scenario], Awaitable[Trajectory]]:
    """``async def rollout(scenario) -> Trajectory`` for ``run_groups``: one fresh MCP session per rollout.

    The agent runs inside ``mcp_tools.rollout()``, so its MCP tools open their own session
    on first use and close it at the end; the trajectory is captured by a
    :class:`~art_adapters.TrajectoryCallbackHandler` and carries the scenario's ``task``,
    ``difficulty`` and the rollout's MCP session ids in its metadata. A scenario may also be
    a dict with ``task`` and ``difficulty`` (validated as a :class:`mcp_tools.Scenario`).
    """
    import mcp_tools

    from .capture.langchain import TrajectoryCallbackHandler

    async def rollout(scenario: Scenario | dict[str, Any]) -> Trajectory:
        if isinstance(scenario, dict):
            scenario = mcp_tools.Scenario.model_validate(scenario)
        handler = TrajectoryCallbackHandler()
        async with mcp_tools.rollout() as scope:
            await agent.ainvoke({"messages": [("user", scenario.task)]}, config={"callbacks": [handler]})
            sessions = [sid for s in scope.sessions for sid in s.session_ids.values()]
        trajectory = handler.trajectory
        if trajectory is None:
            raise RuntimeError(f"the agent run on scenario {scenario.id} produced no trajectory")
        trajectory.metadata.update(
            {"task": scenario.task, "difficulty": scenario.difficulty, "mcp_sessions": sessions}
        )
        return trajectory

    return rollout


async def _scenarios(
    config: TrainMcpConfig,
    tools: Sequence[BaseTool],
    generator: Callable[[], BaseChatModel],
    console: Any,
    *,
    batch_size: int = 10,
    task_pattern: str | None = None,
) -> tuple[list[Scenario], Path]:
    import mcp_tools

    target = config.run_dir / "scenarios.jsonl"
    if config.scenarios is not None:
        scenarios = mcp_tools.load_scenarios(config.scenarios)
        console.print(f"loaded {len(scenarios)} scenarios from {config.scenarios}")
    elif target.exists():
        scenarios = mcp_tools.load_scenarios(target)
        console.print(f"reusing {len(scenarios)} scenarios from {target} (delete it to generate new ones)")
        return scenarios, target
    else:
        console.print(f"generating {config.n_scenarios} scenarios from the server's tools")
        resources = await _resources(config.server)
        scenarios = await mcp_tools.generate_scenarios(
            tools,
            n=config.n_scenarios,
            model=generator(),
            resources=resources,
            batch_size=batch_size,
            task_pattern=task_pattern,
        )
    mcp_tools.save_scenarios(scenarios, target)
    return scenarios, target


async def _resources(server: str) -> list[dict[str, Any]]:
    import mcp_tools

    async with mcp_tools.McpSession(server) as session:
        return await session.read_resources()


async def _start_backend(config: TrainMcpConfig) -> tuple[Backend, bool]:
    from .backends import LocalBackend, RemoteBackend

    if config.backend_url:
        return RemoteBackend(config.backend_url, api_key=config.api_key), False
    backend = await LocalBackend(run_dir=config.run_dir / "backend", base_model=config.base_model).start()
    return backend, True


async def run_train_mcp(config: TrainMcpConfig, *, console: Any = None) -> TrainMcpResult:
    """Run MCP-RL end to end (see the module docstring); returns where everything is.

    Args:
        config: the run's settings.
        console: a ``rich`` console for progress lines (default: a new one).

    Raises:
        ConfigError: a setting is wrong (bad scenarios file, split too small...).
        ToolServerError: the MCP server could not be started or reached.
        ScenarioGenerationError: the generator could not write enough valid scenarios.
    """
    import mcp_tools

    from .model import TrainableModel

    if console is None:
        from rich.console import Console

        console = Console()
    config.run_dir.mkdir(parents=True, exist_ok=True)
    if config.scenarios is not None:
        mcp_tools.load_scenarios(config.scenarios)  # a bad file fails before anything starts
    tools = await mcp_tools.load_tools(config.server)
    console.print(f"MCP server {config.server!r}: {len(tools)} tools ({', '.join(t.name for t in tools)})")
    backend, owned = await _start_backend(config)
    try:
        model = TrainableModel(name=config.model_name, project=config.project, base_model=config.base_model)
        await model.register(backend)

        def base_model_chat() -> BaseChatModel:
            return model.chat_model(step=0, temperature=0.0, max_tokens=512)

        judge, judge_line = resolve_judge_model(config, base_model_chat)
        console.print(judge_line)
        local_judge = judge_line.startswith(LOCAL_JUDGE_LINE)
        # A small local judge: short explanations (its tokens are slow and its prose is noise), no deadline.
        ruler_options: dict[str, Any] = (
            {"max_explanation_chars": 48, "judge_timeout_s": None} if local_judge else {}
        )
        scenarios, scenarios_file = await _scenarios(
            config,
            tools,
            lambda: _with_temperature(judge, GENERATOR_TEMPERATURE),
            console,
            # a small model: short answers within its token limit, kept on plain words
            batch_size=4 if local_judge else 10,
            task_pattern=mcp_tools.PLAIN_TASK_PATTERN if local_judge else None,
        )
        train, val = mcp_tools.split_scenarios(scenarios, val_fraction=config.val_fraction, seed=config.seed)
        console.print(f"scenarios: {len(train)} train, {len(val)} validation ({scenarios_file})")
        agent = build_agent(
            model.chat_model(temperature=config.temperature, max_tokens=config.max_tokens),
            tools,
            system_prompt=config.system_prompt,
            max_turns=config.max_turns,
        )
        rollout = make_rollout(agent)
        result = TrainMcpResult(
            run_dir=config.run_dir,
            scenarios_file=scenarios_file,
            model_name=model.name,
            project=model.project,
            backend_url=backend.base_url,
            owned_backend=owned,
            step=await model.get_step(),
            train_size=len(train),
            val_size=len(val),
        )
        eval_agent = build_agent(  # greedy, on whatever step is latest when it runs
            model.chat_model(temperature=0.0, max_tokens=config.max_tokens),
            tools,
            system_prompt=config.system_prompt,
            max_turns=config.max_turns,
        )
        loop_result = await _train(
            model, rollout, make_rollout(eval_agent), train, val, judge, ruler_options, config, console
        )
        result.loop_result = loop_result
        result.evals = [(e.step, e.reward_mean) for e in loop_result.evals]
        result.step = await model.get_step()
        result.plots = _plots(config.run_dir, console)
        return result
    finally:
        if owned:
            await backend.close()


async def _train(
    model: TrainableModel,
    rollout: Callable[[Scenario], Awaitable[Trajectory]],
    eval_rollout: Callable[[Scenario], Awaitable[Trajectory]],
    train: Sequence[Scenario],
    val: Sequence[Scenario],
    judge: BaseChatModel,
    ruler_options: dict[str, Any],
    config: TrainMcpConfig,
    console: Any,
) -> LoopResult:
    """Hand over to the training loop: RULER scores, held-out evaluation, metrics in ``run_dir``."""
    from .loop import LoopConfig, ruler_scorer, train_loop
    from .train_config import TrainConfig

    loop_config = LoopConfig(
        steps=config.steps,
        groups_per_step=config.groups_per_step,
        rollouts_per_group=config.rollouts_per_group,
        eval_every=config.eval_every,
        rollout_timeout_s=config.rollout_timeout_s,
        seed=config.seed,
        run_dir=config.run_dir,
        train=TrainConfig(learning_rate=config.learning_rate),
    )

    def on_step(step: Any) -> None:
        reward = "-" if step.reward_mean is None else f"{step.reward_mean:.3f}"
        state = "trained" if step.trained else f"not trained ({step.reason})"
        console.print(f"step {step.step}: mean reward {reward}, {state}")

    def on_eval(report: Any) -> None:
        reward = "-" if report.reward_mean is None else f"{report.reward_mean:.3f}"
        console.print(
            f"eval at step {report.step}: mean reward {reward} on {report.scored} validation rollouts"
        )

    return await train_loop(
        model,
        rollout,
        train,
        score=ruler_scorer(judge, **ruler_options),
        config=loop_config,
        val_scenarios=val,
        eval_rollout=eval_rollout,
        on_step=on_step,
        on_eval=on_eval,
    )


def _plots(run_dir: Path, console: Any) -> list[Path]:
    """The run's charts (``run_dir/plots``); none, with a note, when there is nothing to plot or no matplotlib."""
    from .observe.plot import plot_run

    try:
        return plot_run(run_dir)
    except ConfigError as exc:
        console.print(f"no plots: {exc}")
        return []


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
    console.print(
        f"model [bold]{result.model_name}[/bold] is at step {result.step}. Use it as a LangChain chat model:"
    )
    backend = (
        f'aa.LocalBackend(run_dir="{(result.run_dir / "backend").resolve()}")'
        if result.owned_backend
        else f'aa.RemoteBackend("{result.backend_url}")'
    )
    console.print(
        "\n".join(
            [
                "    import art_adapters as aa",
                f"    backend = await {backend}.start()"
                if result.owned_backend
                else f"    backend = {backend}",
                f'    model = aa.TrainableModel(name="{result.model_name}", project="{result.project}")',
                "    await model.register(backend)",
                f"    llm = model.chat_model(step={result.step})",
            ]
        ),
        markup=False,
        highlight=False,
    )
