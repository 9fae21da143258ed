"""MCP-RL: point at any MCP server, get scenarios, train an agent that masters its tools.

``art-adapters train-mcp SERVER`` runs :func:`run_train_mcp`: the server's tools, scenarios
written for them, a ReAct agent on the trainable model, RULER rewards and the training loop.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import SystemMessage
from langchain_core.tools import BaseTool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt import ToolNode
from pydantic import BaseModel, ConfigDict, SecretStr
from rich.console import Console

import mcp_tools
from art_adapters import (
    Backend,
    ConfigError,
    LocalBackend,
    LoopResult,
    RemoteBackend,
    TrainableModel,
    Trajectory,
    TrajectoryCallbackHandler,
    train_loop,
)
from art_adapters.apps._forced_call import bounded_tools, first_turn_cut, parse_pins
from art_adapters.apps._mcp_console import StepConsole, ToolTally, report, usage_snippet
from art_adapters.apps._mcp_reward import EVAL_TOOLS_LINE, Reward, eval_reward_of, make_scorer, resolve_reward
from art_adapters.apps._train_mcp_config import (
    DEFAULT_SYSTEM_PROMPT,
    THREADS_ENV,
    TrainMcpConfig,
    TrainMcpResult,
    backend_threads,
)
from art_adapters.observe import get_observer, plot_run
from art_adapters.ruler import judge_from_env
from mcp_tools import Scenario
from mcp_tools.servers import shipped_scenarios

__all__ = [
    "DEFAULT_SYSTEM_PROMPT",
    "TrainMcpConfig",
    "TrainMcpResult",
    "ToolTally",
    "agent_prompt",
    "build_agent",
    "check_first_tool_choice",
    "make_rollout",
    "report",
    "resolve_judge_model",
    "run_train_mcp",
    "select_tools",
    "usage_snippet",
]

logger = logging.getLogger(__name__)

LOCAL_JUDGE_LINE = "judge: the base model on the backend"

#: The console line saying what scores the rollouts, per ``--reward``.
_REWARD_LINES = {
    "judge": "reward: RULER's judge",
    "tools": "reward: what the tools did (no judge call)",
    "judge+tools": "reward: half RULER's judge, half what the tools did",
}


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
    """The judge chat model and a line saying which it is.

    The ``judge_*`` flags, else the environment (both read by :func:`~art_adapters.ruler.judge_from_env`),
    else *fallback* (the trainable model's base weights on the backend: it runs anywhere, but a
    135M judge and scenario writer are weak; point at a stronger endpoint for real runs).
    """
    found = judge_from_env(config.judge_model, base_url=config.judge_base_url, api_key=config.judge_api_key)
    if found is not None:
        judge, where = found
        return judge, f"judge: {where}" + (" (--judge-model)" if config.judge_model else "")
    return fallback(), (
        f"{LOCAL_JUDGE_LINE} (no judge configured; set --judge-model or "
        "$ART_ADAPTERS_JUDGE_MODEL for a stronger one: a small local judge gives noisy rewards)"
    )


def build_agent(
    chat_model: BaseChatModel,
    tools: Sequence[BaseTool],
    *,
    system_prompt: str = DEFAULT_SYSTEM_PROMPT,
    max_turns: int = 4,
    first_tool_choice: str = "auto",
    max_arg_chars: int | None = None,
    max_arg_items: int | None = None,
    pins: Mapping[str, str] | None = None,
) -> CompiledStateGraph:
    """A LangGraph ReAct loop: model -> tools -> model ..., at most *max_turns* model turns.

    The model answers with tool calls or a final message; after *max_turns* model turns the
    run ends even if the last turn asked for tools (those calls are not run).

    *first_tool_choice* is the OpenAI ``tool_choice`` of the first model turn: ``"auto"`` (the
    model decides), ``"required"`` (it must call one of the tools) or a tool's name (it must
    call that one). Later turns are always ``"auto"``. A small model rarely calls a tool
    unprompted, so a forced first call is what lets RL see tool use at all; the served model
    samples the call's arguments itself, constrained to the tool's schema. With *max_arg_chars*
    and *max_arg_items*, the forced turn's schemas bound every string and array argument
    (:func:`~art_adapters.apps._forced_call.bound_schema`), so a model looping inside one cannot
    run past its token limit with an unfinished call; *pins* (``{parameter: value}``) fix those
    parameters of the forced call to one value.
    """
    if max_turns < 1:
        raise ConfigError(f"max_turns must be >= 1, got {max_turns}")
    check_first_tool_choice(first_tool_choice, tools)
    llm = chat_model.bind_tools(list(tools))
    first_llm = llm
    if first_tool_choice != "auto":
        offered: list[Any] = list(tools)
        if max_arg_chars is not None or max_arg_items is not None or pins:
            offered = bounded_tools(tools, max_arg_chars or 1 << 20, max_arg_items or 1 << 20, pins)
        first_llm = chat_model.bind_tools(offered, tool_choice=first_tool_choice)

    async def call_model(state: dict[str, Any]) -> dict[str, Any]:  # plain hints: langgraph evaluates them
        first = not any(m.type == "ai" for m in state["messages"])
        model = first_llm if first else llm
        return {"messages": [await model.ainvoke([SystemMessage(system_prompt), *state["messages"]])]}

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


def check_first_tool_choice(choice: str, tools: Sequence[BaseTool], *, option: str = "first_tool_choice") -> None:
    """Check a first turn's ``tool_choice`` against the offered *tools*.

    Raises:
        ConfigError: *choice* is not ``"auto"``, ``"required"`` or a tool's name (the message names
            *option* and lists the tools), or it forces a call while no tool is offered.
    """
    names = [t.name for t in tools]
    if choice not in ("auto", "required") and choice not in names:
        raise ConfigError(
            f"{option} {choice!r} is not 'auto', 'required' or one of the tools ({', '.join(names) or 'none'})"
        )
    if choice != "auto" and not tools:
        raise ConfigError(f"{option} {choice!r} needs at least one tool")


def select_tools(
    tools: Sequence[BaseTool], include: Sequence[str] | None = None, exclude: Sequence[str] = ()
) -> list[BaseTool]:
    """The tools to offer: only *include* (all when ``None``), without *exclude*, in the server's order.

    Raises:
        ConfigError: a name matches no tool (the message lists the server's tools), or nothing is left.
    """
    names = [t.name for t in tools]
    unknown = [n for n in [*(include or []), *exclude] if n not in names]
    if unknown:
        raise ConfigError(
            f"no tool named {', '.join(map(repr, unknown))} on the server; its tools are: {', '.join(names)}"
        )
    chosen = [t for t in tools if (include is None or t.name in include) and t.name not in exclude]
    if not chosen:
        raise ConfigError("--tools/--exclude-tools leave no tool to offer the agent")
    return chosen


def make_rollout(agent: CompiledStateGraph) -> Callable[[Scenario], Awaitable[Trajectory]]:
    """``async def rollout(scenario) -> Trajectory`` for ``run_groups``: one fresh MCP session per rollout.

    The agent runs inside ``mcp_tools.rollout()``, so its MCP tools open their own session
    on first use and close it at the end; the trajectory is captured by a
    :class:`~art_adapters.TrajectoryCallbackHandler` and carries the scenario's ``task``,
    ``difficulty`` and the rollout's MCP session ids in its metadata, and ``first_turn_cut``
    (1.0 when the first model turn stopped at its token limit) in its metrics. A scenario may also be
    a dict with ``task`` and ``difficulty`` (validated as a :class:`mcp_tools.Scenario`).
    """
    async def rollout(scenario: Scenario | dict[str, Any]) -> Trajectory:
        if isinstance(scenario, dict):
            scenario = mcp_tools.Scenario.model_validate(scenario)
        handler = TrajectoryCallbackHandler()
        async with mcp_tools.rollout() as scope:
            inputs = {"messages": [("user", scenario.task)]}
            state = await agent.ainvoke(inputs, config={"callbacks": [handler]})
            sessions = [sid for s in scope.sessions for sid in s.session_ids.values()]
        trajectory = handler.trajectory
        if trajectory is None:
            raise RuntimeError(f"the agent run on scenario {scenario.id} produced no trajectory")
        trajectory.metadata.update(
            {"task": scenario.task, "difficulty": scenario.difficulty, "mcp_sessions": sessions}
        )
        trajectory.metrics["first_turn_cut"] = float(first_turn_cut(state.get("messages", [])))
        return trajectory

    return rollout


class _WorkerRollout(BaseModel):
    """A train-mcp rollout that builds its agent where it runs: for Ray workers (``--ray-address``).

    The agent of :func:`make_rollout` holds an HTTP client and MCP tools that cannot be sent to
    another process, so this record (settings only; the key hidden from reprs) travels instead,
    and every call loads the server's tools and builds the agent on the worker, in the task's own
    event loop.

    Attributes:
        config: the run's settings (server, tools, agent).
        model: the served model name (``name`` for the latest step).
        base_url: the backend's OpenAI-compatible URL, as the workers reach it.
        api_key: the backend's key.
        temperature: sampling temperature (0 for evaluation).
    """

    model_config = ConfigDict(frozen=True)

    config: TrainMcpConfig
    model: str
    base_url: str
    api_key: SecretStr
    temperature: float

    async def __call__(self, scenario: Scenario | dict[str, Any]) -> Trajectory:
        """One rollout: the server's tools, the agent on the backend's model, then :func:`make_rollout`'s run."""
        import httpx
        from langchain_openai import ChatOpenAI

        config = self.config
        tools = select_tools(await mcp_tools.load_tools(_server(config)), config.tools, config.exclude_tools)
        async with httpx.AsyncClient() as client:
            chat = ChatOpenAI(
                model=self.model,
                base_url=self.base_url,
                api_key=self.api_key,
                temperature=self.temperature,
                max_tokens=config.max_tokens,
                max_retries=2,
                http_async_client=client,
                include_response_headers=True,
            )
            agent = configured_agent(config, chat, tools)
            return await make_rollout(agent)(scenario)


async def _scenarios(
    config: TrainMcpConfig,
    tools: Sequence[BaseTool],
    generator: Callable[[], BaseChatModel],
    console: Any,
    *,
    batch_size: int = 10,
    task_pattern: str | None = None,
    shipped: Path | None = None,
    topic_check: bool = False,
) -> tuple[list[Scenario], Path]:
    """The run's scenarios and their file (``run_dir/scenarios.jsonl``): ``--scenarios``, else the
    *shipped* hand-written file (a bundled server with no writer model), else generated."""
    target = config.run_dir / "scenarios.jsonl"
    if config.scenarios is not None:
        scenarios = mcp_tools.load_scenarios(config.scenarios)
        console.print(f"loaded {len(scenarios)} scenarios from {config.scenarios}")
        mcp_tools.save_scenarios(scenarios, target)
        return scenarios, target
    if shipped is not None:
        scenarios = mcp_tools.load_scenarios(shipped)
        console.print(
            f"no scenario writer configured: training on the {len(scenarios)} hand-written scenarios shipped "
            f"with this server ({shipped}); --scenarios FILE for your own, --judge-model to generate them"
        )
        mcp_tools.save_scenarios(scenarios, target)
        return scenarios, target
    have = mcp_tools.load_scenarios(target) if target.exists() and target.read_text("utf-8").strip() else []
    if len(have) >= config.n_scenarios:
        console.print(f"reusing {len(have)} scenarios from {target} (delete it to generate new ones)")
        return have, target
    kept = f" ({len(have)} already in {target})" if have else ""
    console.print(
        f"generating {config.n_scenarios - len(have)} scenarios from the server's tools{kept}"
        + ("; tasks off the tools' topic are rejected" if topic_check else "")
    )
    resources = await _resources(_server(config))
    scenarios = await mcp_tools.generate_scenarios(  # appends each accepted one to target
        tools,
        n=config.n_scenarios,
        model=generator(),
        resources=resources,
        batch_size=batch_size,
        task_pattern=task_pattern,
        max_retries=config.max_retries,
        context_tokens=config.context_tokens,
        save_to=target,
        topic_check=topic_check,
    )
    return scenarios, target


#: Added to the default system prompt when the server runs in a folder of its own (``--cwd``).
CWD_HINT = " The tools work in one folder: when a tool asks for its path, pass '.'."


def configured_agent(
    config: TrainMcpConfig, chat_model: BaseChatModel, tools: Sequence[BaseTool]
) -> CompiledStateGraph:
    """:func:`build_agent` with ``config``'s prompt, turns, first-turn choice, argument bounds and pins:
    the one agent the local rollouts, the evaluation and the Ray workers all run."""
    return build_agent(
        chat_model,
        tools,
        system_prompt=agent_prompt(config),
        max_turns=config.max_turns,
        first_tool_choice=config.first_tool_choice,
        max_arg_chars=config.max_arg_chars,
        max_arg_items=config.max_arg_items,
        pins=parse_pins(config.pin_arg, tools),
    )


def agent_prompt(config: TrainMcpConfig) -> str:
    """The agent's system prompt: ``system_prompt``, plus :data:`CWD_HINT` when ``cwd`` is set and the
    prompt is the default (a model cannot know the folder's real path; '.' is the server's folder)."""
    if config.cwd is not None and "system_prompt" not in config.model_fields_set:
        return config.system_prompt + CWD_HINT
    return config.system_prompt


def _server(config: TrainMcpConfig) -> Any:
    """The server as ``mcp_tools`` takes it: with ``state`` copies per rollout and ``cwd`` when given."""
    if config.cwd is None:
        return mcp_tools.with_state(config.server, config.state) if config.state else config.server
    server = mcp_tools.with_state(config.server, config.state)  # raises for an HTTP server
    return server.model_copy(update={"cwd": config.cwd})


async def _resources(server: Any) -> list[dict[str, Any]]:
    async with mcp_tools.McpSession(server) as session:
        return await session.read_resources()


async def _start_backend(config: TrainMcpConfig) -> tuple[Backend, bool]:
    if config.backend_url:
        return RemoteBackend(config.backend_url, api_key=config.api_key), False
    backend = LocalBackend(run_dir=config.run_dir / "backend", base_model=config.base_model)
    saved = os.environ.get(THREADS_ENV)
    os.environ[THREADS_ENV] = str(backend_threads(config))  # read by the subprocess it starts
    try:
        await backend.start()
    finally:
        if saved is None:
            del os.environ[THREADS_ENV]
        else:
            os.environ[THREADS_ENV] = saved
    return backend, True


async def run_train_mcp(config: TrainMcpConfig, *, console: Any = None) -> TrainMcpResult:
    """Run MCP-RL end to end; returns where everything is.

    1. List the server's tools (``mcp_tools.load_tools``; a stdio command or an HTTP URL).
    2. Load scenarios (``scenarios``); with no writer model, a bundled server's shipped ones
       (``mcp_tools.servers.shipped_scenarios``); else have the generator write them
       (``mcp_tools.generate_scenarios``; with the local writer, off-topic tasks are rejected),
       saved as ``run_dir/scenarios.jsonl`` so they can be edited and reused; split them into train
       and validation (seeded).
    3. Build a ReAct agent (:func:`build_agent`) on the trainable model with those tools; every
       rollout gets a fresh MCP session (:func:`make_rollout`), and with ``state`` its own server
       process on fresh copies of the server's data, so rollouts never see each other's changes.
    4. Train with ``train_loop`` (``config.loop``): groups scored by ``config.reward`` (RULER with the
       judge of :func:`resolve_judge_model`, :func:`~art_adapters.tool_use_reward`, or both mixed;
       :func:`~art_adapters.apps._mcp_reward.resolve_reward` picks the default), an evaluation on
       the validation split every few steps (sampled at ``config.eval_temperature``; greedy at 0),
       ``metrics.jsonl`` and the plots in the run directory.

    Args:
        config: the run's settings.
        console: a ``rich`` console for progress lines (default: a new one).

    Raises:
        ConfigError: a setting is wrong (bad scenarios file, split too small...).
        ToolServerError: the MCP server could not be started or reached.
        ScenarioGenerationError: the generator could not write enough valid scenarios.
    """
    if console is None:
        console = Console()
    config.run_dir.mkdir(parents=True, exist_ok=True)
    if config.scenarios is not None:
        mcp_tools.load_scenarios(config.scenarios)  # a bad file fails before anything starts
    tools = await _offered_tools(config, console)
    for line in get_observer().where():  # Langfuse / OTLP from the environment: traced with no code
        console.print(line)
    backend, owned = await _start_backend(config)
    try:
        model = TrainableModel(name=config.model_name, project=config.project, base_model=config.base_model)
        await model.register(backend)
        judge, local_judge, ruler_options, reward, eval_reward = _judging(config, model, console)
        scenarios, scenarios_file = await _scenarios(
            config,
            tools,
            lambda: _with_temperature(judge, GENERATOR_TEMPERATURE),
            console,
            # a small model: short answers within its token limit, kept on plain words
            batch_size=4 if local_judge else 10,
            task_pattern=mcp_tools.PLAIN_TASK_PATTERN if local_judge else None,
            shipped=shipped_scenarios(config.server) if local_judge else None,
            topic_check=local_judge,  # a small writer wanders off the tools' topic
        )
        train, val = mcp_tools.split_scenarios(scenarios, val_fraction=config.val_fraction, seed=config.seed)
        console.print(f"scenarios: {len(train)} train, {len(val)} validation ({scenarios_file})")
        def agent_at(temperature: float) -> CompiledStateGraph:  # on whatever step is latest when it runs
            chat = model.chat_model(temperature=temperature, max_tokens=config.max_tokens)
            return configured_agent(config, chat, tools)

        tally = ToolTally()
        rollout, eval_rollout = _rollouts(config, model, backend, tally, agent_at, console)
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
        loop_result = await _train(
            model, rollout, eval_rollout, train, val, judge, ruler_options, config, console, tally, reward,
            eval_reward=eval_reward,
        )  # fmt: skip
        result.loop_result = loop_result
        result.target_step, result.stopped = config.loop.steps, loop_result.stopped
        result.evals = [(e.step, e.reward_mean) for e in loop_result.evals]
        result.step = await model.get_step()
        result.plots = _plots(config.loop.run_dir or config.run_dir, console)
        return result
    finally:
        if owned:
            await backend.close()


async def _offered_tools(config: TrainMcpConfig, console: Any) -> list[BaseTool]:
    """The server's tools that the agent is offered (``--tools``/``--exclude-tools``), with the tool
    options checked before the backend starts; one line says which."""
    served_tools = await mcp_tools.load_tools(_server(config))
    tools = select_tools(served_tools, config.tools, config.exclude_tools)
    check_first_tool_choice(config.first_tool_choice, tools, option="--first-tool-choice")
    parse_pins(config.pin_arg, tools)
    left_out = [t.name for t in served_tools if t not in tools]
    # the name its tool records carry: after what the command runs (module, script, package) or the URL
    name = (served_tools[0].metadata or {}).get("mcp_server", config.server)
    console.print(
        f"MCP server {name!r} ({config.server}): {len(served_tools)} tools; "
        f"offering {', '.join(t.name for t in tools)}"
        + (f" (left out: {', '.join(left_out)})" if left_out else "")
        + f"; first turn tool_choice {config.first_tool_choice!r}"
    )
    return tools


def _judging(
    config: TrainMcpConfig, model: TrainableModel, console: Any
) -> tuple[BaseChatModel, bool, dict[str, Any], str, str]:
    """The judge (and whether it is the local base model), RULER's options, the training reward and
    the evaluation's; each choice is printed."""

    def base_model_chat() -> BaseChatModel:
        return model.chat_model(step=0, temperature=0.0, max_tokens=512)

    judge, judge_line = resolve_judge_model(config, base_model_chat)
    console.print(judge_line)
    local_judge = judge_line.startswith(LOCAL_JUDGE_LINE)
    # A small local judge: short explanations (its tokens are slow and its prose is noise), no deadline.
    ruler_options: dict[str, Any] = {}
    if local_judge:
        ruler_options = {"max_explanation_chars": 48, "judge_timeout_s": None}
    reward = resolve_reward(config.reward, local_judge=local_judge)
    default = "" if config.reward else " (the default with this judge; --reward)"
    console.print(_REWARD_LINES[reward] + default)
    eval_reward = eval_reward_of(reward, local_judge=local_judge)
    if eval_reward != reward:
        console.print(EVAL_TOOLS_LINE)
    return judge, local_judge, ruler_options, reward, eval_reward


def _rollouts(
    config: TrainMcpConfig,
    model: TrainableModel,
    backend: Any,
    tally: ToolTally,
    agent_at: Callable[[float], CompiledStateGraph],
    console: Any,
) -> tuple[Callable[[Scenario], Awaitable[Trajectory]], Callable[[Scenario], Awaitable[Trajectory]]]:
    """The training rollout (sampled, its tool calls counted in ``tally``) and the evaluation's (at
    ``config.eval_temperature``): local agents, or Ray tasks that build the agent on the workers
    (``ray_address``)."""
    if not config.ray_address:
        train_rollout = tally.counting(make_rollout(agent_at(config.temperature)))
        return train_rollout, make_rollout(agent_at(config.eval_temperature))
    settings = config.model_copy(update={"api_key": None, "judge_api_key": None})  # workers need neither
    remote = {"config": settings, "model": model.name, "base_url": backend.openai_base_url}
    key = SecretStr(backend.api_key or "not-needed")
    console.print(f"rollouts: Ray tasks on {config.ray_address}, calling the backend at {backend.base_url}")
    return (
        _WorkerRollout(**remote, api_key=key, temperature=config.temperature),
        _WorkerRollout(**remote, api_key=key, temperature=config.eval_temperature),
    )


# shape: hands train-mcp's resolved pieces to train_loop in one place
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
    tally: ToolTally | None = None,
    reward: Reward = "judge",
    *,
    eval_reward: Reward | None = None,
) -> LoopResult:
    """Hand over to the training loop (``config.loop``): *reward*'s scores (:func:`make_scorer`),
    held-out evaluation scored by *eval_reward* (default *reward*), metrics; the console lines are
    :class:`StepConsole`'s."""
    lines = StepConsole(console, tally, max_tokens=config.max_tokens)
    score = make_scorer(reward, judge, ruler_options)
    eval_score = score if eval_reward in (None, reward) else make_scorer(eval_reward, judge, ruler_options)
    if config.ray_address and tally is not None:  # the rollouts ran on Ray workers: count here
        score = tally.counting_scores(score)
    return await train_loop(
        model,
        rollout,
        train,
        score=score,
        config=config.loop,
        val_scenarios=val,
        eval_rollout=eval_rollout,
        eval_score=eval_score,
        on_step=lines.on_step,
        on_eval=lines.on_eval,
        on_warning=lines.on_warning,
    )


def _plots(run_dir: Path, console: Any) -> list[Path]:
    """The run's charts (``run_dir/plots``); none, with a note, when there is nothing to plot or no matplotlib."""
    try:
        return plot_run(run_dir)
    except ConfigError as exc:
        console.print(f"no plots: {exc}")
        return []
