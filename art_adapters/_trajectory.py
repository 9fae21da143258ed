"""Trajectories: what one run of an agent did, as training data.

:class:`Trajectory` and :class:`TrajectoryGroup` are pydantic v2 models with a lossless JSON round
trip, the records that capture, the judge and the trainer share; groups are stored as JSON Lines with
:func:`save_groups` and :func:`load_groups`.
"""

from __future__ import annotations

import json
import traceback as traceback_module
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .files import append_durably, write_atomic

__all__ = [
    "FunctionCall",
    "History",
    "Message",
    "RolloutFailure",
    "ToolCall",
    "ToolCallRecord",
    "ToolSchema",
    "Trajectory",
    "TrajectoryGroup",
    "load_groups",
    "save_groups",
]

#: Values a metric may take; kept scalar so metrics aggregate and plot.
MetricValue = float | int | bool


def new_id(prefix: str) -> str:
    """A fresh id: ``prefix`` and 16 random hex digits (``traj-...``, ``group-...``)."""
    return f"{prefix}-{uuid.uuid4().hex[:16]}"


def _now() -> datetime:
    return datetime.now(UTC)


class FunctionCall(BaseModel):
    """The function part of an OpenAI tool call; ``arguments`` is a JSON string."""

    model_config = ConfigDict(extra="allow")

    name: str
    arguments: str = "{}"


class ToolCall(BaseModel):
    """One tool call made by an assistant turn (OpenAI format)."""

    model_config = ConfigDict(extra="allow")

    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class Message(BaseModel):
    """One chat message in OpenAI format, plus the link to the backend's token record.

    ``completion_id`` (and ``choice_index`` when the request asked for ``n > 1``) is
    set on assistant turns that our backend served; training then uses the exact
    token ids it sampled. It is ``None`` for turns served elsewhere, which are
    re-tokenised instead.

    ``generated`` says whether an assistant turn was produced by the model during this
    run: ``True`` for the output of one of the run's model calls, ``False`` for an
    assistant message that was only ever part of the model's input (a hand-written
    few-shot example, history from an earlier run), which training treats as prompt
    and never puts in the loss. ``None`` means unknown (hand-built trajectories, JSON
    written before the field existed) and is trained like ``True``. Capture sets it;
    it is not an OpenAI field, so :meth:`to_openai` drops it.

    ``usage`` is the token usage of the model call that produced an assistant turn, with
    OpenAI-style keys (``prompt_tokens``, ``completion_tokens``, ``total_tokens``). Capture
    sets it on the assistant turns that the run's model calls produced (and reported usage
    for); it is ``None`` elsewhere. It is not an OpenAI field either, so :meth:`to_openai`
    drops it.

    ``model`` is the name of the model that produced an assistant turn, as its call reported
    it (the response's model name, else the requested one: ``"agent@3"``, ``"gpt-4o"``).
    Capture sets it on the turns the run's model calls produced, so a graph with several
    models (a hosted planner beside the trained policy) says which turn is whose; training
    puts only the policy's turns in the loss. ``None`` means unknown (the call did not say,
    or JSON written before the field existed) and is trained like the policy's turn. Not an
    OpenAI field: :meth:`to_openai` drops it.

    Unknown fields are kept, so a round trip loses nothing.
    """

    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    completion_id: str | None = None
    choice_index: int = 0
    generated: bool | None = None
    usage: dict[str, Any] | None = None
    model: str | None = None

    def to_openai(self) -> dict[str, Any]:
        """Return the message as the OpenAI chat API expects it (our link fields dropped)."""
        data = self.model_dump(
            exclude_none=True, exclude={"completion_id", "choice_index", "generated", "usage", "model"}
        )
        if self.role == "assistant" and "content" not in data:
            data["content"] = None
        return data


class ToolSchema(BaseModel):
    """A tool offered to the model, in OpenAI function format."""

    model_config = ConfigDict(extra="allow")

    type: Literal["function"] = "function"
    function: dict[str, Any]

    @property
    def name(self) -> str:
        """The function's name."""
        return str(self.function.get("name", ""))


class ToolCallRecord(BaseModel):
    """What one tool execution did, as observed by capture (LangChain tool or MCP ``tools/call``).

    Attributes:
        name: the tool's name.
        call_id: the ``tool_call_id`` of the assistant's call, when known.
        arguments: the arguments the tool received.
        result: the tool's output as text (``None`` while running or on error).
        is_error: whether the tool reported an error (MCP ``isError`` or an exception).
        error: the exception's type and message when the tool raised.
        server: the MCP server's name, for MCP tools.
        session_id: the MCP session id, for MCP tools.
        duration_s: wall-clock seconds of the call.
        source: which capture path recorded it.
    """

    model_config = ConfigDict(extra="allow")

    name: str
    call_id: str | None = None
    arguments: dict[str, Any] | str | None = None
    result: str | None = None
    is_error: bool = False
    error: str | None = None
    server: str | None = None
    session_id: str | None = None
    duration_s: float | None = None
    source: Literal["langchain", "mcp", "otel"] = "langchain"
    started_at: datetime | None = None


class History(BaseModel):
    """A conversation that diverged from the trajectory's main ``messages``.

    When an agent calls the model with histories that are not prefixes of one
    another (e.g. a summariser node with its own prompt), each distinct history is
    kept here rather than dropped.
    """

    model_config = ConfigDict(extra="allow")

    messages: list[Message] = Field(default_factory=list)
    tools: list[ToolSchema] | None = None


class Trajectory(BaseModel):
    """One rollout of an agent: its conversation, tools, reward and diagnostics.

    The conversation is in OpenAI chat format (system, user, assistant turns with ``tool_calls``,
    tool results with ``tool_call_id``); every assistant turn served by our backend carries the
    ``completion_id`` that links it to the backend's exact-token record (and whether the model
    generated the turn in this run, see :class:`Message`).

    Attributes:
        id: stable identifier, used by the judge to match scores.
        messages: the longest conversation of the run, OpenAI format.
        tools: the tools offered to the model in that conversation.
        additional_histories: conversations that diverged from ``messages``.
        tool_records: every tool execution observed during the run, in order.
        reward: the scalar reward; ``None`` until scored (never a silent 0.0).
        metrics: named scalar diagnostics (e.g. ``tool_calls``, ``independent_reward``).
        metadata: free-form context (scenario id, rollout index, model, step).
        logs: human-readable notes added by capture, the runner or the judge.
        error: set when the run raised; the trajectory up to that point is kept.
    """

    model_config = ConfigDict(extra="allow")

    id: str = Field(default_factory=lambda: new_id("traj"))
    messages: list[Message] = Field(default_factory=list)
    tools: list[ToolSchema] | None = None
    additional_histories: list[History] = Field(default_factory=list)
    tool_records: list[ToolCallRecord] = Field(default_factory=list)
    reward: float | None = None
    metrics: dict[str, MetricValue] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)
    logs: list[str] = Field(default_factory=list)
    error: str | None = None
    started_at: datetime = Field(default_factory=_now)
    finished_at: datetime | None = None

    def openai_messages(self) -> list[dict[str, Any]]:
        """The main conversation as plain OpenAI message dicts."""
        return [m.to_openai() for m in self.messages]

    def histories(self) -> list[History]:
        """All conversations: the main one first, then the divergent ones."""
        return [History(messages=self.messages, tools=self.tools), *self.additional_histories]


class RolloutFailure(BaseModel):
    """A rollout that failed, kept as data on its group.

    Attributes:
        type: the exception's class name (qualified).
        message: ``str(exception)``.
        traceback: the formatted traceback.
        scenario_id: the scenario the rollout was for, if known.
        rollout_index: which of the group's N rollouts it was, if known.
        trajectory: whatever was captured before the failure, if anything.
    """

    model_config = ConfigDict(extra="allow")

    type: str
    message: str
    traceback: str = ""
    scenario_id: str | None = None
    rollout_index: int | None = None
    trajectory: Trajectory | None = None
    occurred_at: datetime = Field(default_factory=_now)

    @classmethod
    def from_exception(cls, exc: BaseException, **fields: Any) -> RolloutFailure:
        """Build a record from a caught exception, with its traceback."""
        exc_type = type(exc)
        return cls(
            type=f"{exc_type.__module__}.{exc_type.__qualname__}",
            message=str(exc),
            traceback="".join(traceback_module.format_exception(exc)),
            **fields,
        )


class TrajectoryGroup(BaseModel):
    """N rollouts of one scenario, scored relative to each other (by the judge and by GRPO).

    Attributes:
        id: stable identifier of the group.
        trajectories: the successful rollouts.
        exceptions: the failed rollouts, with type, message and traceback.
        metadata: scenario and run context (scenario id, step, judge status).
    """

    model_config = ConfigDict(extra="allow")

    id: str = Field(default_factory=lambda: new_id("group"))
    trajectories: list[Trajectory] = Field(default_factory=list)
    exceptions: list[RolloutFailure] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.trajectories)

    @property
    def rewards(self) -> list[float | None]:
        """The trajectories' rewards, in order (``None`` where unscored)."""
        return [t.reward for t in self.trajectories]


def save_groups(path: str | Path, groups: Iterable[TrajectoryGroup], *, append: bool = False) -> Path:
    """Write groups to ``path`` as JSON Lines, one group a line; returns the path.

    With ``append=False`` the file is written to a temporary name, fsynced and renamed, so a
    crash leaves the old file or the new one, never a half-written or empty one. With
    ``append=True`` the lines are appended by :func:`~art_adapters.files.append_durably` (fsynced;
    a torn last line left by a crash is cut off first).
    """
    path = Path(path)
    lines = [group.model_dump_json() + "\n" for group in groups]
    if append:
        if lines:
            append_durably(path, "".join(lines).encode("utf-8"))
        return path
    return write_atomic(path, "".join(lines).encode("utf-8"))


def load_groups(path: str | Path) -> list[TrajectoryGroup]:
    """Read groups written by :func:`save_groups`.

    Raises:
        ValueError: naming the file and line of the first malformed record.
    """
    path = Path(path)
    groups: list[TrajectoryGroup] = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                groups.append(TrajectoryGroup.model_validate(json.loads(line)))
            except (json.JSONDecodeError, ValueError) as exc:
                raise ValueError(f"{path}:{number}: not a valid TrajectoryGroup record: {exc}") from exc
    return groups
