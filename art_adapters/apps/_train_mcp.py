"""MCP-RL: point at any MCP server, get scenarios, train an agent that masters its tools.

``art-adapters train-mcp SERVER`` runs :func:`run_train_mcp`: the server's tools, scenarios
written for them, a ReAct agent on the trainable model, RULER rewards and the training loop.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import SystemMessage
from langchain_core.tools import BaseTool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt import ToolNode
from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, PositiveInt, SecretStr, model_validator
from rich.console import Console

import mcp_tools
from art_adapters import (
    Backend,
    ConfigError,
    LocalBackend,
    LoopConfig,
    LoopResult,
    RemoteBackend,
    TrainableModel,
    TrainConfig,
    Trajectory,
    TrajectoryCallbackHandler,
    train_loop,
)
from art_adapters.apps._forced_call import bounded_tools, first_turn_cut, parse_pins
from art_adapters.apps._mcp_console import StepConsole, ToolTally
from art_adapters.apps._mcp_reward import Reward, make_scorer, resolve_reward
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

DEFAULT_SYSTEM_PROMPT = (
    "You are a helpful assistant with tools. Use them to do what the user asks: call a tool, "
    "read its result, call more tools if needed, then answer the user briefly."
)


LOCAL_JUDGE_LINE = "judge: the base model on the backend"

#: The console line saying what scores the rollouts, per ``--reward``.
_REWARD_LINES = {
    "judge": "reward: RULER's judge",
    "tools": "reward: what the tools did (no judge call)",
    "judge+tools": "reward: half RULER's judge, half what the tools did",
}


def default_loop() -> LoopConfig:
    """train-mcp's training loop: 4 steps of 2 scenarios x 4 rollouts, evaluated every 2, LoRA lr 2e-4."""
    return LoopConfig(steps=4, groups_per_step=2, eval_every=2, train=TrainConfig(learning_rate=2e-4))


#: TrainMcpConfig settings that moved into ``TrainMcpConfig.loop``, and how to pass them now.
_MOVED = {
    "steps": "loop=LoopConfig(steps=...)",
    "groups_per_step": "loop=LoopConfig(groups_per_step=...)",
    "rollouts_per_group": "loop=LoopConfig(rollouts_per_group=...)",
    "eval_every": "loop=LoopConfig(eval_every=...)",
    "learning_rate": "loop=LoopConfig(train=TrainConfig(learning_rate=...))",
    "rollout_timeout_s": "loop=LoopConfig(run=RunConfig(timeout_s=...))",
}


class TrainMcpConfig(BaseModel):
    """Settings of one ``train-mcp`` run; each field is a ``train-mcp`` flag (its help is the description).

    The training loop's own settings are :attr:`loop` (an :class:`~art_adapters.LoopConfig`, default
    :func:`default_loop`); ``train-mcp`` offers ``--steps``, ``--groups-per-step``,
    ``--rollouts-per-group``, ``--eval-every`` and ``--learning-rate`` of it. ``loop.run_dir`` and
    ``loop.seed`` default to :attr:`run_dir` and :attr:`seed`.
    """

    model_config = ConfigDict(extra="forbid")

    server: str = Field(
        min_length=1,
        description="The MCP server: a stdio command ('python -m mcp_tools.servers.notes') or a "
        "streamable-HTTP URL ('http://127.0.0.1:8123/mcp').",
    )
    state: list[str] = Field(
        default_factory=list,
        description="A file or folder the stdio server keeps its data in, copied fresh for every rollout "
        "(and deleted after it) so rollouts never see each other's writes and the original stays unchanged. "
        "SOURCE=ENV sets the server's environment variable ENV to the copy's path "
        "(./memory.jsonl=MEMORY_FILE_PATH); SOURCE=--flag appends '--flag COPY' to its arguments "
        "(./repo=--repository). Repeat for several; or write {state:SOURCE} in the server command. "
        "Not for HTTP servers.",
    )
    run_dir: Path = Field(
        default=Path(".art/mcp-rl"),
        description="Run directory: scenarios, backend data (embedded backend), metrics, plots.",
    )
    scenarios: Path | None = Field(
        default=None, description="Load scenarios from this JSONL file instead of generating them."
    )
    n_scenarios: PositiveInt = Field(
        default=24,
        description="Scenarios to generate when --scenarios is not given; each is saved to "
        "RUN_DIR/scenarios.jsonl as it is accepted, and a rerun generates only the missing ones.",
    )
    max_retries: NonNegativeInt = Field(
        default=3,
        description="Further scenario-generator calls allowed after calls that kept no new scenario "
        "(a call that keeps one uses no retry).",
    )
    context_tokens: PositiveInt | None = Field(
        default=None,
        description="The scenario generator's context length in tokens (default: asked from its endpoint); "
        "its prompt is fitted to it.",
    )
    val_fraction: float = Field(
        default=0.25, ge=0.0, lt=1.0, description="Share of scenarios held out for validation, in [0, 1)."
    )
    seed: int = Field(default=0, description="Seed of the train/validation split and of the training loop.")
    model_name: str = Field(default="mcp-agent", description="The trainable model's name.")
    project: str = Field(default="mcp-rl", description="The project the trainable model belongs to.")
    base_model: str = Field(
        default="smollm2-135m-instruct", description="Base weights: bundled name or a model folder."
    )
    backend_url: str | None = Field(
        default=None, description="A running backend (art-adapters serve); default: start the embedded one."
    )
    api_key: str | None = Field(default=None, repr=False, description="The backend's API key.")
    judge_model: str | None = Field(
        default=None,
        description="RULER judge and scenario writer, on an OpenAI-compatible endpoint; default: the "
        "judge environment ($ART_ADAPTERS_JUDGE_MODEL...), else the base model.",
    )
    judge_base_url: str | None = Field(
        default=None, description="The judge's endpoint (default $ART_ADAPTERS_JUDGE_BASE_URL, else OpenAI)."
    )
    judge_api_key: str | None = Field(
        default=None,
        repr=False,
        description="The judge endpoint's key (default $ART_ADAPTERS_JUDGE_API_KEY, else $OPENAI_API_KEY).",
    )
    tools: list[str] | None = Field(
        default=None, description="Offer only this tool to the agent (repeat; default: all)."
    )
    exclude_tools: list[str] = Field(
        default_factory=list, description="Never offer this tool (repeat; applied after --tools)."
    )
    cwd: str | None = Field(
        default=None,
        description="The stdio server's working directory; '{state:SOURCE}' starts it inside the rollout's "
        "own copy of SOURCE (with --state SOURCE or alone), so relative paths such as '--repository .' and "
        "the model's '.' land in the copy.",
    )
    reward: Reward | None = Field(
        default=None,
        description="What scores a rollout: 'judge' (RULER), 'tools' (what the tools did: the forced call "
        "parsed, the calls ran without error, the answer uses their results; no judge call) or "
        "'judge+tools' (half each). Default: 'judge+tools' when the judge is the local base model, else "
        "'judge'.",
    )
    max_arg_chars: PositiveInt = Field(
        default=48,
        description="Most characters of each string argument of the forced first call (its schema's "
        "maxLength, where the tool sets none lower), so the call ends within --max-tokens.",
    )
    max_arg_items: PositiveInt = Field(
        default=3, description="Most items of each array argument of the forced first call (maxItems)."
    )
    pin_arg: list[str] = Field(
        default_factory=list,
        description="NAME=VALUE: the forced first call passes VALUE as its argument NAME (repeat for "
        "several): repo_path=. with --cwd '{state:./repo}' points git's calls at the rollout's copy.",
    )
    first_tool_choice: str = Field(
        default="required",
        min_length=1,
        description="tool_choice of each rollout's first model turn: 'required' makes the agent call some "
        "tool (a small model rarely calls one unprompted, and RL cannot reward what it never tries), 'auto' "
        "lets it decide, a tool's name forces that tool. Later turns are 'auto'.",
    )
    max_turns: PositiveInt = Field(
        default=4, description="Most model turns per rollout; a turn's tool calls run before the next."
    )
    max_tokens: PositiveInt = Field(default=128, description="Most tokens per model turn.")
    temperature: float = Field(
        default=1.0,
        ge=0.0,
        le=2.0,
        description="Sampling temperature of training rollouts (evaluation is greedy).",
    )
    system_prompt: str = Field(
        default=DEFAULT_SYSTEM_PROMPT,
        description="The agent's system prompt (a worked example helps a small model).",
    )
    loop: LoopConfig = Field(default_factory=default_loop, description="The training loop's settings.")
    ray_address: str | None = Field(
        default=None,
        min_length=1,
        description="Run every rollout as a Ray task on the Ray cluster at this address ('auto', "
        "'HOST:6379'); the MCP server is started on the workers, which call the backend at its URL, so "
        "give a --backend-url they can reach. Needs pip install 'art-adapters[ray]' (docs/scaling.md).",
    )

    @model_validator(mode="before")
    @classmethod
    def _moved_to_loop(cls, data: Any) -> Any:
        moved = [name for name in _MOVED if isinstance(data, Mapping) and name in data]
        if moved:
            hints = (f"{name} moved into TrainMcpConfig.loop: pass {_MOVED[name]}" for name in moved)
            raise ValueError("; ".join(hints))
        return data

    @model_validator(mode="after")
    def _check(self) -> TrainMcpConfig:
        if self.judge_base_url and not self.judge_model:
            raise ValueError("judge_base_url needs judge_model too (the model name on that endpoint)")
        if self.cwd is not None and self.server.strip().startswith(("http://", "https://")):
            raise ValueError("--cwd sets a stdio server's working directory; an HTTP server runs where it runs")
        if self.scenarios is None and self.n_scenarios < 2 and self.val_fraction > 0:
            raise ValueError("n_scenarios must be >= 2 to hold out a validation split; or set val_fraction=0")
        unset = {"run_dir": self.run_dir, "seed": self.seed}
        self.loop = self.loop.model_copy(
            update={name: value for name, value in unset.items() if name not in self.loop.model_fields_set}
        )
        if self.ray_address is not None and self.loop.run.ray_address != self.ray_address:
            run = self.loop.run.model_copy(update={"ray_address": self.ray_address})
            self.loop = self.loop.model_copy(update={"run": run})
        return self


class TrainMcpResult(BaseModel):
    """What a ``train-mcp`` run produced.

    Attributes:
        run_dir: the run directory.
        scenarios_file: the scenarios used (``run_dir/scenarios.jsonl``).
        model_name: the trained model's name.
        project: its project.
        backend_url: the backend it was served from during the run.
        owned_backend: whether the run started the embedded backend (under ``run_dir/backend``).
        step: the model's latest step at the end.
        train_size: scenarios in the training split.
        val_size: scenarios in the validation split.
        evals: ``(step, mean RULER reward)`` of each held-out evaluation (greedy agent).
        target_step: the step the run was asked to reach (``loop.steps``).
        stopped: why training gave up before ``target_step`` (``None`` when it got there);
            ``train-mcp`` then ends with a non-zero exit code.
        plots: the charts written under ``run_dir/plots``.
        loop_result: what the training loop returned (:class:`~art_adapters.LoopResult`).
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
    target_step: int = 0
    stopped: str | None = None
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
            state = await agent.ainvoke({"messages": [("user", scenario.task)]}, config={"callbacks": [handler]})
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
            agent = build_agent(
                chat,
                tools,
                system_prompt=agent_prompt(config),
                max_turns=config.max_turns,
                first_tool_choice=config.first_tool_choice,
                max_arg_chars=config.max_arg_chars,
                max_arg_items=config.max_arg_items,
                pins=parse_pins(config.pin_arg, tools),
            )
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
    backend = await LocalBackend(run_dir=config.run_dir / "backend", base_model=config.base_model).start()
    return backend, True


async def run_train_mcp(config: TrainMcpConfig, *, console: Any = None) -> TrainMcpResult:
    """Run MCP-RL end to end; returns where everything is.

    1. List the server's tools (``mcp_tools.load_tools``; a stdio command or an HTTP URL).
    2. Load scenarios (``scenarios``) or have the generator write them (``mcp_tools.generate_scenarios``),
       saved as ``run_dir/scenarios.jsonl`` so they can be edited and reused; split them into train
       and validation (seeded).
    3. Build a ReAct agent (:func:`build_agent`) on the trainable model with those tools; every
       rollout gets a fresh MCP session (:func:`make_rollout`), and with ``state`` its own server
       process on fresh copies of the server's data, so rollouts never see each other's changes.
    4. Train with ``train_loop`` (``config.loop``): groups scored by RULER (the judge of
       :func:`resolve_judge_model`), a greedy evaluation on the validation split every few steps,
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
    served_tools = await mcp_tools.load_tools(_server(config))
    tools = select_tools(served_tools, config.tools, config.exclude_tools)
    check_first_tool_choice(config.first_tool_choice, tools, option="--first-tool-choice")  # before the backend
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
    for line in get_observer().where():  # Langfuse / OTLP from the environment: traced with no code
        console.print(line)
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
        reward = resolve_reward(config.reward, local_judge=local_judge)
        console.print(_REWARD_LINES[reward] + ("" if config.reward else " (the default with this judge; --reward)"))
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
        agent = build_agent(
            model.chat_model(temperature=config.temperature, max_tokens=config.max_tokens),
            tools,
            system_prompt=agent_prompt(config),
            max_turns=config.max_turns,
            first_tool_choice=config.first_tool_choice,
            max_arg_chars=config.max_arg_chars,
            max_arg_items=config.max_arg_items,
            pins=parse_pins(config.pin_arg, tools),
        )
        tally = ToolTally()
        rollout = tally.counting(make_rollout(agent))
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
            system_prompt=agent_prompt(config),
            max_turns=config.max_turns,
            first_tool_choice=config.first_tool_choice,
            max_arg_chars=config.max_arg_chars,
            max_arg_items=config.max_arg_items,
            pins=parse_pins(config.pin_arg, tools),
        )
        eval_rollout = make_rollout(eval_agent)
        if config.ray_address:  # the agents are built on the workers
            settings = config.model_copy(update={"api_key": None, "judge_api_key": None})  # workers need neither
            remote = {"config": settings, "model": model.name, "base_url": backend.openai_base_url}
            key = SecretStr(backend.api_key or "not-needed")
            rollout = _WorkerRollout(**remote, api_key=key, temperature=config.temperature)
            eval_rollout = _WorkerRollout(**remote, api_key=key, temperature=0.0)
            console.print(f"rollouts: Ray tasks on {config.ray_address}, calling the backend at {backend.base_url}")
        loop_result = await _train(
            model, rollout, eval_rollout, train, val, judge, ruler_options, config, console, tally, reward
        )
        result.loop_result = loop_result
        result.target_step, result.stopped = config.loop.steps, loop_result.stopped
        result.evals = [(e.step, e.reward_mean) for e in loop_result.evals]
        result.step = await model.get_step()
        result.plots = _plots(config.loop.run_dir or config.run_dir, console)
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
    tally: ToolTally | None = None,
    reward: Reward = "judge",
) -> LoopResult:
    """Hand over to the training loop (``config.loop``): *reward*'s scores (:func:`make_scorer`),
    held-out evaluation, metrics; the console lines are :class:`StepConsole`'s."""
    lines = StepConsole(console, tally, max_tokens=config.max_tokens)
    score = make_scorer(reward, judge, ruler_options)
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
