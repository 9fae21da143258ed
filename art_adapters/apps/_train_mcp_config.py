"""train-mcp's settings (:class:`TrainMcpConfig`, one field per flag) and what a run produced
(:class:`TrainMcpResult`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, PositiveInt, model_validator

from art_adapters import LoopConfig, TrainConfig
from art_adapters.apps._mcp_reward import Reward
from art_adapters.cli_options import reject_moved

__all__ = [
    "DEFAULT_SYSTEM_PROMPT",
    "THREADS_ENV",
    "TrainMcpConfig",
    "TrainMcpResult",
    "backend_threads",
    "default_loop",
]

DEFAULT_SYSTEM_PROMPT = (
    "You are a helpful assistant with tools. Use them to do what the user asks: call a tool, "
    "read its result, call more tools if needed, then answer the user briefly."
)


def default_loop() -> LoopConfig:
    """train-mcp's training loop: 4 steps of 2 scenarios x 4 rollouts at learning rate 1e-3, the held-out
    split evaluated before and after with 4 rollouts per scenario.

    Sized for the bundled 135M model on a 2-core CPU, where the README's command with these settings and
    no judge endpoint ends within 15 minutes (measured: 415 s on mcp-server-time, 598 s on the notes
    server). 1e-3 is a rate for that small model and few steps (at 2e-4, two steps left the sampled
    held-out tool-error rate where it was: README, "MCP-RL"); for a model of billions of parameters
    start at 1e-4 (``--learning-rate``).
    """
    return LoopConfig(
        steps=4, groups_per_step=2, eval_every=4, eval_rollouts=4, train=TrainConfig(learning_rate=1e-3)
    )


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
    threads: PositiveInt | None = Field(
        default=None,
        description="Torch threads of the embedded backend (default: $ART_ADAPTERS_TORCH_THREADS, else half "
        "the cores, at least 1: the MCP servers and this process need the rest, and torch's threads "
        "waiting on a busy core made decoding 17 times slower).",
    )
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
        description="Sampling temperature of training rollouts.",
    )
    eval_temperature: float = Field(
        default=1.0,
        ge=0.0,
        le=2.0,
        description="Sampling temperature of the held-out evaluation, which samples --eval-rollouts per "
        "scenario: the policy being trained is the sampled one, and its tool errors hide behind a greedy "
        "model that calls correctly. 0: greedy, one rollout per scenario (--eval-rollouts is then 1).",
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
        return reject_moved(data, _MOVED, "TrainMcpConfig.loop")

    @model_validator(mode="after")
    def _check(self) -> TrainMcpConfig:
        if self.judge_base_url and not self.judge_model:
            raise ValueError("judge_base_url needs judge_model too (the model name on that endpoint)")
        if self.cwd is not None and self.server.strip().startswith(("http://", "https://")):
            raise ValueError("--cwd sets a stdio server's working directory; an HTTP server runs where it runs")
        if self.scenarios is None and self.n_scenarios < 2 and self.val_fraction > 0:
            raise ValueError("n_scenarios must be >= 2 to hold out a validation split; or set val_fraction=0")
        if self.eval_temperature == 0 and self.loop.eval_rollouts > 1:  # greedy rollouts would repeat
            self.loop = self.loop.model_copy(update={"eval_rollouts": 1})
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
        evals: ``(step, mean reward)`` of each held-out evaluation (at ``eval_temperature``).
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


#: The environment variable the embedded backend reads its torch thread count from.
THREADS_ENV = "ART_ADAPTERS_TORCH_THREADS"


def backend_threads(config: TrainMcpConfig) -> int:
    """The embedded backend's torch threads: ``threads``, else ``$ART_ADAPTERS_TORCH_THREADS``, else
    half the cores (at least 1).

    The backend shares the CPU with this process and one MCP server per running rollout; torch's
    intra-op threads wait on each other when a core is busy (4 concurrent requests: 1.1 tokens/s
    with 2 threads, 19 with 1, on a loaded 2-core machine).
    """
    if config.threads is not None:
        return config.threads
    raw = os.environ.get(THREADS_ENV, "").strip()
    if raw.isdigit() and int(raw) >= 1:
        return int(raw)
    return max(1, (os.cpu_count() or 2) // 2)
