"""Trajectories, scores and training metrics as span descriptions (pure: no OpenTelemetry SDK here).

One rollout is one trace (an agent root with generation, tool and score children). The GenAI attributes
are what :mod:`art_adapters._capture.otel_genai` parses, so exported traces import back into the same
trajectories (:mod:`art_adapters.observe._importer`).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from art_adapters._trajectory import Message, RolloutFailure, ToolCallRecord, Trajectory, TrajectoryGroup
from art_adapters.observe._scores import (
    ATTRIBUTE_PREFIX,
    group_judges,
    judge_attributes,
    score_records,
    trajectory_scores,
)

__all__ = [
    "AttributeValue",
    "SpanSpec",
    "failed_trajectory",
    "score_spans",
    "span_ids",
    "train_step_spans",
    "trajectory_scores",
    "trajectory_span_ids",
    "trajectory_spans",
]

AttributeValue = str | bool | int | float | Sequence[str]


@dataclass
class SpanSpec:
    """One span to emit: ids, parent, times (ns since the epoch), attributes, events, error."""

    name: str
    trace_id: int
    span_id: int
    parent_id: int | None
    start_ns: int
    end_ns: int
    attributes: dict[str, AttributeValue] = field(default_factory=dict)
    events: list[tuple[str, dict[str, AttributeValue]]] = field(default_factory=list)
    error: str | None = None


def _digest(*parts: str) -> bytes:
    return hashlib.sha256("\x1f".join(parts).encode()).digest()


def span_ids(trajectory_id: str, namespace: str = "") -> tuple[int, int]:
    """The (trace id, root span id) of a trajectory in a run (``namespace``); stable across calls.

    Derived from the trajectory id, so scores logged later land in the same trace.

    Backends key spans by id, so the same trajectory exported by two runs gets different ids.
    """
    digest = _digest("art-adapters-trace", namespace, trajectory_id)
    trace_id = int.from_bytes(digest[:16], "big") or 1
    root_id = int.from_bytes(digest[16:24], "big") or 1
    return trace_id, root_id


def trajectory_span_ids(trajectory: Trajectory, namespace: str = "") -> tuple[int, int]:
    """The (trace id, rollout span id) of ``trajectory``: those of its live trace when it was traced live.

    :func:`~art_adapters.run_groups` records the live rollout span's ids in the trajectory's
    ``metadata["trace_id"]`` (32 hex digits) and ``metadata["rollout_span_id"]`` (16); a
    trajectory without them (built by hand, or run with tracing off) gets :func:`span_ids`.
    """
    trace_hex = trajectory.metadata.get("trace_id")
    span_hex = trajectory.metadata.get("rollout_span_id")
    if isinstance(trace_hex, str) and isinstance(span_hex, str):
        try:
            trace_id, span_id = int(trace_hex, 16), int(span_hex, 16)
        except ValueError:
            pass
        else:
            if trace_id and span_id:
                return trace_id, span_id
    return span_ids(trajectory.id, namespace)


def _child_id(namespace: str, trajectory_id: str, *key: str) -> int:
    return int.from_bytes(_digest("art-adapters-span", namespace, trajectory_id, *key)[:8], "big") or 1


def _ns(value: datetime | None) -> int | None:
    return int(value.timestamp() * 1e9) if value is not None else None


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _content_parts(content: Any) -> list[dict[str, Any]]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "content": content}]
    parts: list[dict[str, Any]] = []
    for item in content:
        if isinstance(item, Mapping) and item.get("type") == "text":
            parts.append({"type": "text", "content": item.get("text", "")})
        elif isinstance(item, Mapping):
            parts.append(dict(item))
    return parts


def _arguments(raw: str) -> Any:
    try:
        return json.loads(raw)
    except (TypeError, ValueError):
        return raw


def genai_message(message: Message) -> dict[str, Any]:
    """A message in the GenAI ``{"role", "parts"}`` form (``gen_ai.input/output.messages``)."""
    if message.role == "tool":
        part = {"type": "tool_call_response", "id": message.tool_call_id, "response": message.content}
        out: dict[str, Any] = {"role": "tool", "parts": [part]}
    else:
        parts = _content_parts(message.content)
        for call in message.tool_calls or ():
            parts.append(
                {
                    "type": "tool_call",
                    "id": call.id,
                    "name": call.function.name,
                    "arguments": _arguments(call.function.arguments),
                }
            )
        out = {"role": message.role, "parts": parts}
    if message.name:
        out["name"] = message.name
    return out


@dataclass
class RolloutContext:
    """Where a trajectory sits in the run: its group, scenario, step, model and split; and who judged
    it (``judges``: the identity records of its group's RULER judges, :func:`group_judges`)."""

    group_id: str | None = None
    scenario_id: str | None = None
    step: int | None = None
    model: str | None = None
    split: str = "train"
    agent_name: str = "agent"
    extra_tags: tuple[str, ...] = ()
    namespace: str = ""
    judges: tuple[Mapping[str, Any], ...] = ()


def _scalar_metrics(metrics: Mapping[str, Any], prefix: str) -> dict[str, AttributeValue]:
    out: dict[str, AttributeValue] = {}
    for key, value in metrics.items():
        if isinstance(value, bool | int | str) or (isinstance(value, float) and math.isfinite(value)):
            out[f"{prefix}.{key}"] = value
    return out


def _usage(message: Message, single_call_totals: Mapping[str, Any] | None) -> dict[str, int]:
    source = message.usage if message.usage else single_call_totals
    if not source:
        return {}
    out: dict[str, int] = {}
    for ours, keys in (
        ("input", ("prompt_tokens", "input_tokens")),
        ("output", ("completion_tokens", "output_tokens")),
    ):
        for key in keys:
            value = source.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                out[ours] = value
                break
    return out


def _before_first_answer(messages: Sequence[Message]) -> list[Message]:
    """The messages the agent started from (everything before the first assistant turn)."""
    out: list[Message] = []
    for message in messages:
        if message.role == "assistant":
            break
        out.append(message)
    return out


def _generation_windows(
    history: Sequence[Message], records: Sequence[ToolCallRecord], start: int, end: int
) -> list[tuple[int, int]]:
    """Start/end (ns) of each assistant turn of ``history``, placed around its tool calls' real times."""
    turns = [i for i, m in enumerate(history) if m.role == "assistant"]
    by_call = {r.call_id: r for r in records if r.call_id}
    windows: list[tuple[int, int]] = []
    cursor = start
    for k, index in enumerate(turns):
        calls = [by_call[c.id] for c in history[index].tool_calls or () if c.id in by_call]
        starts = [_ns(r.started_at) for r in calls if r.started_at is not None]
        if starts:
            gen_end = max(cursor + 1, min(s for s in starts if s is not None))
        else:
            remaining = len(turns) - k
            gen_end = cursor + max(1, (end - cursor) // max(1, remaining))
        windows.append((cursor, gen_end))
        ends = [
            (_ns(r.started_at) or 0) + int((r.duration_s or 0) * 1e9)
            for r in calls
            if r.started_at is not None
        ]
        cursor = max([gen_end, *ends])
    return windows


def trajectory_spans(
    trajectory: Trajectory, context: RolloutContext, *, include_scores: bool = True
) -> list[SpanSpec]:
    """The spans of one rollout: the agent root, its generations, tool calls and (optionally) scores.

    * the root span is the graph run, an *agent* observation
      (``gen_ai.operation.name = invoke_agent``, ``langfuse.observation.type = agent``), carrying
      the trace-level attributes Langfuse reads (``langfuse.trace.name``, ``langfuse.trace.tags``,
      ``langfuse.session.id`` / ``session.id`` = the group id, ``langfuse.trace.metadata.*``) and our
      own ``art_adapters.*`` attributes (trajectory id, scenario id, group id, rollout index, step,
      reward, metrics);
    * each chat-model call is a *generation* child (``gen_ai.operation.name = chat``, the GenAI
      ``gen_ai.input.messages`` / ``gen_ai.output.messages`` / ``gen_ai.tool.definitions`` /
      ``gen_ai.usage.*`` attributes, and Langfuse's ``langfuse.observation.model.name`` /
      ``input`` / ``output`` / ``usage_details``), model = the served ``name@step``;
    * each tool execution is a *tool* child (``execute_tool {name}``); an MCP ``tools/call`` also
      carries ``mcp.method.name``, ``mcp.session.id`` and ``mcp.server.name``;
    * the scores are :func:`score_spans`.

    A trajectory keeps no per-call timestamps: tool spans use the recorded start and duration,
    generation spans are placed between them (``art_adapters.timing = estimated``). Per-call
    token usage is the assistant message's ``usage`` (which capture sets on every turn a model
    call of the run produced); for a message without it (a hand-built trajectory) it is known
    only when the run made a single model call; otherwise the totals are on the root.
    """
    trace_id, root_id = trajectory_span_ids(trajectory, context.namespace)
    model = context.model or trajectory.metadata.get("model") or "unknown"
    start, end = _rollout_window(trajectory)
    spans = [
        SpanSpec(
            name=f"invoke_agent {context.agent_name}",
            trace_id=trace_id,
            span_id=root_id,
            parent_id=None,
            start_ns=start,
            end_ns=end,
            attributes=_root_attributes(trajectory, context, model),
            error=trajectory.error,
        )
    ]
    spans.extend(_generation_spans(trajectory, context, model, spans[0]))
    for t_index, record in enumerate(trajectory.tool_records):
        spans.append(_tool_span(context.namespace, trajectory.id, trace_id, root_id, t_index, record, start))
    if include_scores:
        spans.extend(score_spans(trajectory, namespace=context.namespace, judges=context.judges))
    return spans


def _rollout_window(trajectory: Trajectory) -> tuple[int, int]:
    """The rollout's start and end (ns): its recorded times, else its ``duration_s``, never before
    a tool call's end."""
    start = _ns(trajectory.started_at) or 0
    tool_ends = [
        (_ns(r.started_at) or start) + int((r.duration_s or 0) * 1e9) for r in trajectory.tool_records
    ]
    end = _ns(trajectory.finished_at)
    if end is None:
        duration = trajectory.metadata.get("duration_s")
        end = start + int(float(duration) * 1e9) if isinstance(duration, int | float) else start + 1_000_000
    return start, max([end, start + 1, *tool_ends])


def _root_attributes(trajectory: Trajectory, context: RolloutContext, model: str) -> dict[str, AttributeValue]:
    """The agent root's attributes: Langfuse's trace-level ones and our ``art_adapters.*`` ones."""
    meta = trajectory.metadata
    scenario = context.scenario_id if context.scenario_id is not None else meta.get("scenario_id")
    rollout_index = meta.get("rollout_index")
    step = context.step if context.step is not None else meta.get("step")
    first_user = next((m.content for m in trajectory.messages if m.role == "user"), None)
    last = trajectory.messages[-1].content if trajectory.messages else None
    attributes: dict[str, AttributeValue] = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": context.agent_name,
        "gen_ai.request.model": model,
        "langfuse.observation.type": "agent",
        "langfuse.trace.name": f"rollout {scenario}" if scenario is not None else "rollout",
        "langfuse.trace.tags": _trace_tags(context, scenario, step),
        "langfuse.trace.input": _json(first_user),
        "langfuse.trace.output": _json(last),
        "langfuse.observation.input": _json(
            [m.to_openai() for m in _before_first_answer(trajectory.messages)]
        ),
        "langfuse.observation.output": _json(last),
        f"{ATTRIBUTE_PREFIX}.trajectory.id": trajectory.id,
        f"{ATTRIBUTE_PREFIX}.split": context.split,
        f"{ATTRIBUTE_PREFIX}.model": model,
    }
    optional: dict[str, Any] = {
        f"{ATTRIBUTE_PREFIX}.policy.version": model if model != "unknown" else None,
        "session.id": context.group_id,
        "langfuse.session.id": context.group_id,
        f"{ATTRIBUTE_PREFIX}.group.id": context.group_id,
        f"{ATTRIBUTE_PREFIX}.scenario.id": str(scenario) if scenario is not None else None,
        f"{ATTRIBUTE_PREFIX}.rollout.index": rollout_index if isinstance(rollout_index, int) else None,
        f"{ATTRIBUTE_PREFIX}.step": step if isinstance(step, int) else None,
        f"{ATTRIBUTE_PREFIX}.reward": float(trajectory.reward) if trajectory.reward is not None else None,
    }
    attributes.update({k: v for k, v in optional.items() if v is not None})
    trace_meta = {
        "trajectory_id": trajectory.id, "scenario_id": scenario, "group_id": context.group_id,
        "rollout_index": rollout_index, "step": step, "model": model, "split": context.split,
    }  # fmt: skip
    for key, value in trace_meta.items():
        if value is not None:
            attributes[f"langfuse.trace.metadata.{key}"] = (
                value if isinstance(value, str | int | float) else str(value)
            )
    attributes.update(_scalar_metrics(trajectory.metrics, f"{ATTRIBUTE_PREFIX}.metrics"))
    return attributes


def _trace_tags(context: RolloutContext, scenario: Any, step: Any) -> list[str]:
    """``split:``, ``scenario:``, ``group:`` and ``step:`` tags, then the context's own."""
    tags = [f"split:{context.split}"]
    tags += [f"{name}:{value}" for name, value in (("scenario", scenario), ("group", context.group_id),
                                                   ("step", step)) if value is not None]  # fmt: skip
    return [*tags, *context.extra_tags]


def _generation_spans(
    trajectory: Trajectory, context: RolloutContext, model: str, root: SpanSpec
) -> Iterator[SpanSpec]:
    """One generation span per assistant turn of each history: children of ``root``, placed
    between the tool calls inside its window."""
    histories = trajectory.histories()
    calls = sum(1 for h in histories for m in h.messages if m.role == "assistant")
    totals = trajectory.metrics if calls == 1 else None
    for h_index, history in enumerate(histories):
        windows = _generation_windows(history.messages, trajectory.tool_records, root.start_ns, root.end_ns)
        turns = [i for i, m in enumerate(history.messages) if m.role == "assistant"]
        for (g_start, g_end), index in zip(windows, turns, strict=True):
            span_id = _child_id(context.namespace, trajectory.id, "gen", str(h_index), str(index))
            spec = SpanSpec("", root.trace_id, span_id, root.span_id, g_start, max(g_end, g_start + 1))
            output = history.messages[index]
            yield _generation_span(
                history.messages[:index], output, history.tools, model, _usage(output, totals), spec
            )


def _generation_span(
    inputs: Sequence[Message],
    output: Message,
    tools: Sequence[Any] | None,
    model: str,
    usage: Mapping[str, int],
    spec: SpanSpec,
) -> SpanSpec:
    served = output.model or model  # the turn's own model where capture recorded one
    spec.name = f"chat {served}"
    attrs: dict[str, AttributeValue] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": model,
        "gen_ai.response.model": served,
        "gen_ai.input.messages": _json([genai_message(m) for m in inputs]),
        "gen_ai.output.messages": _json([genai_message(output)]),
        "langfuse.observation.type": "generation",
        "langfuse.observation.model.name": served,
        "langfuse.observation.input": _json([m.to_openai() for m in inputs]),
        "langfuse.observation.output": _json(output.to_openai()),
        f"{ATTRIBUTE_PREFIX}.timing": "estimated",
    }
    if tools:
        attrs["gen_ai.tool.definitions"] = _json([t.model_dump() for t in tools])
    if output.completion_id:
        attrs["gen_ai.response.id"] = output.completion_id
        attrs[f"{ATTRIBUTE_PREFIX}.completion_id"] = output.completion_id
    if "input" in usage:
        attrs["gen_ai.usage.input_tokens"] = usage["input"]
    if "output" in usage:
        attrs["gen_ai.usage.output_tokens"] = usage["output"]
    if usage:
        attrs["langfuse.observation.usage_details"] = _json(
            {**usage, "total": sum(usage.values())} if len(usage) == 2 else dict(usage)
        )
    spec.attributes = attrs
    return spec


def _tool_span(
    namespace: str,
    trajectory_id: str,
    trace_id: int,
    root_id: int,
    index: int,
    record: ToolCallRecord,
    fallback_start: int,
) -> SpanSpec:
    start = _ns(record.started_at) or fallback_start
    end = start + max(1, int((record.duration_s or 0) * 1e9))
    arguments = record.arguments if isinstance(record.arguments, str) else _json(record.arguments or {})
    attrs: dict[str, AttributeValue] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": record.name,
        "gen_ai.tool.type": "function",
        "gen_ai.tool.call.arguments": arguments,
        "langfuse.observation.type": "tool",
        "langfuse.observation.input": arguments,
        f"{ATTRIBUTE_PREFIX}.tool.source": record.source,
        f"{ATTRIBUTE_PREFIX}.tool.index": index,
    }
    if record.call_id:
        attrs["gen_ai.tool.call.id"] = record.call_id
    if record.result is not None:
        attrs["gen_ai.tool.call.result"] = record.result
        attrs["langfuse.observation.output"] = record.result
    name = f"execute_tool {record.name}"
    if record.source == "mcp":
        name = f"tools/call {record.name}"
        attrs["mcp.method.name"] = "tools/call"
        if record.server:
            attrs["mcp.server.name"] = record.server
        if record.session_id:
            attrs["mcp.session.id"] = record.session_id
    error = record.error if record.error else ("tool reported an error" if record.is_error else None)
    if error is not None:
        attrs["langfuse.observation.level"] = "ERROR"
        attrs["langfuse.observation.status_message"] = error
    return SpanSpec(
        name,
        trace_id,
        _child_id(namespace, trajectory_id, "tool", str(index)),
        root_id,
        start,
        end,
        attrs,
        error=error,
    )


def score_spans(
    trajectory: Trajectory,
    *,
    at_ns: int | None = None,
    namespace: str = "",
    judges: Sequence[Mapping[str, Any]] | None = None,
) -> list[SpanSpec]:
    """One evaluator span per score, child of the rollout's root span (empty when unscored).

    A score (RULER's, the reward, each rubric dimension's ``ruler.<dimension>``, the ensemble's
    ``judge_agreement``: :func:`~art_adapters.observe._scores.score_records`) is an *evaluator*
    span ``score {name}`` with the value and the comment (the judge's explanation) as attributes
    and a ``gen_ai.evaluation.result`` event, so any OTLP backend shows it; the Langfuse SDK path
    also sends it as a Langfuse score. A score a judge gave names that judge
    (:func:`~art_adapters.observe._scores.judge_attributes`: ``art_adapters.judge.ids``,
    ``art_adapters.judge.models``, ``art_adapters.judges``), from ``judges`` (the group's judge
    identities) or, without them, the ids an ensemble's verdicts carry.
    """
    trace_id, root_id = trajectory_span_ids(trajectory, namespace)
    end = _ns(trajectory.finished_at) or _ns(trajectory.started_at) or 0
    at = at_ns if at_ns is not None else end
    spans: list[SpanSpec] = []
    for score in score_records(trajectory, judges):
        name, value, comment = score.name, score.value, score.comment
        attrs: dict[str, AttributeValue] = {
            "langfuse.observation.type": "evaluator",
            "langfuse.observation.output": _json({"value": value, "comment": comment}),
            "gen_ai.evaluation.name": name,
            "gen_ai.evaluation.score.value": value,
            f"{ATTRIBUTE_PREFIX}.score.name": name,
            f"{ATTRIBUTE_PREFIX}.score.value": value,
            f"{ATTRIBUTE_PREFIX}.trajectory.id": trajectory.id,
        }
        event: dict[str, AttributeValue] = {
            "gen_ai.evaluation.name": name,
            "gen_ai.evaluation.score.value": value,
        }
        if comment:
            attrs[f"{ATTRIBUTE_PREFIX}.score.comment"] = comment
            attrs["gen_ai.evaluation.explanation"] = comment
            event["gen_ai.evaluation.explanation"] = comment
        named = judge_attributes(score.judges)
        attrs.update(named)
        if named:
            event[f"{ATTRIBUTE_PREFIX}.judge.ids"] = named[f"{ATTRIBUTE_PREFIX}.judge.ids"]
        spans.append(
            SpanSpec(
                f"score {name}",
                trace_id,
                _child_id(namespace, trajectory.id, "score", name),
                root_id,
                at,
                at + 1,
                attrs,
                events=[("gen_ai.evaluation.result", event)],
            )
        )
    return spans


def group_context(group: TrajectoryGroup, **fields: Any) -> RolloutContext:
    """The :class:`RolloutContext` of a group's trajectories (its judges: :func:`group_judges`)."""
    scenario = group.metadata.get("scenario_id")
    fields.setdefault("judges", group_judges(group))
    return RolloutContext(
        group_id=group.id, scenario_id=str(scenario) if scenario is not None else None, **fields
    )


def train_step_spans(
    step: int, metrics: Mapping[str, Any], *, run: str, at_ns: int, duration_ns: int = 1
) -> list[SpanSpec]:
    """One span (its own trace) holding a training step's metrics as ``art_adapters.train.*`` attributes.

    Its ids derive from the run, the step and the time, so two runs of the same name (every
    ``art-adapters demo`` is ``demo``) never share a trace: a backend keeps one span per id.
    """
    key = (run, str(step), str(at_ns))
    trace_id = int.from_bytes(_digest("art-adapters-train", *key)[:16], "big") or 1
    span_id = int.from_bytes(_digest("art-adapters-train-span", *key)[:8], "big") or 1
    attrs: dict[str, AttributeValue] = {
        "langfuse.observation.type": "span",
        "langfuse.trace.name": f"train step {step}",
        "langfuse.trace.tags": ["train", f"step:{step}", f"run:{run}"],
        "langfuse.trace.metadata.step": step,
        "langfuse.trace.metadata.run": run,
        "langfuse.observation.output": _json({k: v for k, v in metrics.items()}),
        f"{ATTRIBUTE_PREFIX}.step": step,
        f"{ATTRIBUTE_PREFIX}.run": run,
    }
    attrs.update(_scalar_metrics(metrics, f"{ATTRIBUTE_PREFIX}.train"))
    return [
        SpanSpec(f"train_step {step}", trace_id, span_id, None, at_ns, at_ns + max(1, duration_ns), attrs)
    ]


def failed_trajectory(group: TrajectoryGroup, failure: RolloutFailure) -> Trajectory:
    """The trajectory to export for a failed rollout: its partial capture (or an empty one) with the error."""
    error = f"{failure.type}: {failure.message}" if failure.message else failure.type
    if failure.trajectory is not None:
        trajectory = failure.trajectory.model_copy()
        trajectory.error = trajectory.error or error
    else:
        key = f"{group.id}:{failure.scenario_id}:{failure.rollout_index}:{failure.occurred_at.isoformat()}"
        trajectory = Trajectory(
            id=f"failed-{_digest(key).hex()[:16]}", error=error, started_at=failure.occurred_at
        )
    trajectory.metadata = {
        **trajectory.metadata,
        "scenario_id": failure.scenario_id,
        "rollout_index": failure.rollout_index,
    }
    return trajectory
