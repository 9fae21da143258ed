"""Traces from Langfuse or any OTel backend become trajectories (to seed scenarios and evaluation sets).

Both importers feed spans to the live span processor's own per-trace assembly, so an imported trace
gives the trajectory :class:`~art_adapters.TrajectorySpanProcessor` would have built.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, Status, StatusCode, TraceFlags

from art_adapters._capture.otel_trace import TraceState
from art_adapters._errors import ConfigError
from art_adapters._trajectory import Trajectory
from art_adapters.observe._json_values import json_values
from art_adapters.observe._otlp_json import spans_from_otlp_json
from art_adapters.observe._times import iso_ns
from art_adapters.ruler import TrajectoryJudgement

__all__ = ["trajectories_from_langfuse", "trajectories_from_otlp_json", "trajectories_from_spans"]

_P = "art_adapters."


def trajectories_from_spans(spans: Sequence[ReadableSpan], *, keep_empty: bool = False) -> list[Trajectory]:
    """Assemble one trajectory per trace from finished spans (any order), in trace start order."""
    traces: dict[int, list[ReadableSpan]] = {}
    for span in spans:
        traces.setdefault(span.context.trace_id, []).append(span)
    out: list[tuple[int, Trajectory]] = []
    for trace_id, members in traces.items():
        ids = {s.context.span_id for s in members}
        roots = [s for s in members if s.parent is None or s.parent.span_id not in ids]
        root = min(roots, key=lambda s: s.start_time or 0) if roots else None
        state = TraceState(trace_id)
        for span in sorted(members, key=lambda s: s.end_time or 0):
            state.add_span(span)
        if state.empty and not keep_empty:
            continue
        trajectory = state.build(root)
        _restore(trajectory, root, members)
        out.append((root.start_time or 0 if root is not None else 0, trajectory))
    return [t for _, t in sorted(out, key=lambda pair: pair[0])]


def trajectories_from_otlp_json(
    source: str | os.PathLike[str] | Mapping[str, Any] | Sequence[Any], *, keep_empty: bool = False
) -> list[Trajectory]:
    """Trajectories from OTLP JSON (a path or parsed value).

    OTLP JSON is an ``ExportTraceServiceRequest``, from a file (one object, a list, or JSON
    Lines as :class:`~art_adapters.observe._otlp_json.OtlpJsonFileExporter` writes) or a parsed
    dict. The spans go through :class:`art_adapters._capture.otel_trace.TraceState`, so GenAI,
    OpenInference and MCP spans are all understood. Traces exported by
    :class:`~art_adapters.observe.Observer` come back with their trajectory id, scenario id,
    rollout index, step, reward, metrics and scores.

    Raises:
        ConfigError: the file is missing or holds no OTLP trace request.
    """
    return trajectories_from_spans(spans_from_otlp_json(source), keep_empty=keep_empty)


def _restore(trajectory: Trajectory, root: ReadableSpan | None, spans: Sequence[ReadableSpan]) -> None:
    """Put back what our own exporter recorded beyond the GenAI conventions (ids, context, scores)."""
    attrs = dict(root.attributes or {}) if root is not None else {}
    if isinstance(attrs.get(_P + "trajectory.id"), str):
        trajectory.id = attrs[_P + "trajectory.id"]
        for ours, key in (
            ("scenario.id", "scenario_id"),
            ("rollout.index", "rollout_index"),
            ("step", "step"),
            ("group.id", "group_id"),
            ("model", "model"),
            ("split", "split"),
        ):
            if _P + ours in attrs:
                trajectory.metadata[key] = attrs[_P + ours]
        if isinstance(attrs.get(_P + "reward"), int | float):
            trajectory.reward = float(attrs[_P + "reward"])
        metrics = {
            k.removeprefix(_P + "metrics."): v for k, v in attrs.items() if k.startswith(_P + "metrics.")
        }
        if metrics:
            trajectory.metrics = {k: v for k, v in metrics.items() if isinstance(v, int | float | bool)}
    sources: dict[tuple[Any, Any], tuple[Any, Any]] = {}
    for span in spans:
        a = span.attributes or {}
        if _P + "tool.index" in a:
            sources[(a.get("gen_ai.tool.name"), a.get("gen_ai.tool.call.id"))] = (
                a.get(_P + "tool.source"),
                a.get(_P + "tool.index"),
            )
    for record in trajectory.tool_records:
        source, _ = sources.get((record.name, record.call_id), (None, None))
        if source in ("langchain", "otel"):
            record.source = source
    if sources and all((r.name, r.call_id) in sources for r in trajectory.tool_records):
        # the order the run recorded them in (spans are ordered by start time, which can differ)
        trajectory.tool_records.sort(key=lambda r: sources[(r.name, r.call_id)][1])
    for span in spans:
        a = span.attributes or {}
        name = a.get(_P + "score.name")
        value = a.get(_P + "score.value")
        if name == "ruler" and isinstance(value, int | float):
            # the restored metrics may hold the rest of the judgement (dimensions, agreement): kept
            judged = TrajectoryJudgement.read(trajectory) or TrajectoryJudgement(score=float(value))
            comment = a.get(_P + "score.comment")
            update = {"score": float(value)} | ({"explanation": comment} if isinstance(comment, str) else {})
            judged.model_copy(update=update).write(trajectory)


# -- Langfuse --------------------------------------------------------------------------------


def _load(source: str | os.PathLike[str] | Mapping[str, Any] | Sequence[Any]) -> list[Mapping[str, Any]]:
    value: Any = json_values(source, "Langfuse export") if isinstance(source, str | os.PathLike) else source
    if isinstance(value, Mapping):
        value = [value]
    if len(value) == 1 and isinstance(value[0], Mapping) and isinstance(value[0].get("data"), list):
        value = value[0]["data"]  # the API's {"data": [...]}
    traces = [t for t in value if isinstance(t, Mapping) and isinstance(t.get("observations"), list)]
    if not traces:
        raise ConfigError(
            "no Langfuse trace with 'observations' found (export traces with their observations)"
        )
    return traces


def _hex_id(value: Any, size: int, salt: str) -> int:
    text = str(value or "")
    try:
        number = int(text.replace("-", ""), 16)
        if 0 < number < 1 << (size * 8):
            return number
    except ValueError:
        pass
    import hashlib

    return int.from_bytes(hashlib.sha256(f"{salt}:{text}".encode()).digest()[:size], "big") or 1


def _messages(value: Any) -> tuple[Any, Any]:
    """(messages, tools) from a generation's input: a message list, or a dict with ``messages``/``tools``."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return [{"role": "user", "content": value}], None
    if isinstance(value, Mapping):
        return value.get("messages", [value]), value.get("tools")
    return value, None


def _observation_span(trace_id: int, obs: Mapping[str, Any]) -> ReadableSpan:
    """A Langfuse observation as the OTel span our span processor reads: a generation as a GenAI chat
    span, a tool observation as an ``execute_tool`` (MCP ``tools/call``) span, anything else as is."""
    kind = str(obs.get("type", "SPAN")).upper()
    name = str(obs.get("name") or kind.lower())
    attributes: dict[str, Any] = {"langfuse.observation.type": kind.lower()}
    events: list[Event] = []
    end = iso_ns(obs.get("endTime")) or iso_ns(obs.get("startTime"))
    metadata = obs.get("metadata") if isinstance(obs.get("metadata"), Mapping) else {}
    if kind == "GENERATION":
        events = _generation_attributes(obs, metadata or {}, attributes, end)
    elif kind == "TOOL" or name.startswith(("tools/call", "execute_tool")):
        attributes.update(_tool_attributes(obs, name, metadata or {}))
    flags = TraceFlags(TraceFlags.SAMPLED)
    parent = obs.get("parentObservationId")
    error = obs.get("level") == "ERROR"
    return ReadableSpan(
        name=name,
        context=SpanContext(trace_id, _hex_id(obs.get("id"), 8, "obs"), False, flags),
        parent=SpanContext(trace_id, _hex_id(parent, 8, "obs"), False, flags) if parent else None,
        attributes=attributes,
        events=events,
        status=Status(StatusCode.ERROR, obs.get("statusMessage")) if error else Status(StatusCode.UNSET),
        start_time=iso_ns(obs.get("startTime")),
        end_time=end,
        instrumentation_scope=InstrumentationScope("langfuse-import"),
    )


def _generation_attributes(
    obs: Mapping[str, Any], metadata: Mapping[str, Any], attributes: dict[str, Any], end: int | None
) -> list[Event]:
    """Add a generation's GenAI attributes (model, usage, tools, response id) to ``attributes``;
    its prompt and completion, as the GenAI content events."""
    messages, tools = _messages(obs.get("input"))
    output = obs.get("output")
    if isinstance(output, str):
        output = {"role": "assistant", "content": output}
    attributes["gen_ai.operation.name"] = "chat"
    if tools:
        attributes["gen_ai.tool.definitions"] = json.dumps(tools)
    usage = obs.get("usageDetails") or obs.get("usage") or {}
    for ours, keys in (
        ("input_tokens", ("input", "promptTokens")),
        ("output_tokens", ("output", "completionTokens")),
    ):
        for key in keys:
            if isinstance(usage.get(key), int):
                attributes[f"gen_ai.usage.{ours}"] = usage[key]
                break
    if obs.get("model"):
        attributes["gen_ai.request.model"] = str(obs["model"])
    response_id = metadata.get("completion_id") or metadata.get("response_id")
    if isinstance(response_id, str):
        attributes["gen_ai.response.id"] = response_id
    return [
        Event("gen_ai.content.prompt", {"gen_ai.prompt": json.dumps(messages)}, end),
        Event("gen_ai.content.completion", {"gen_ai.completion": json.dumps(output)}, end),
    ]


def _tool_attributes(obs: Mapping[str, Any], name: str, metadata: Mapping[str, Any]) -> dict[str, Any]:
    """A tool observation's ``execute_tool`` attributes; MCP's too when it was an MCP call."""
    tool = name.removeprefix("tools/call").removeprefix("execute_tool").strip() or name
    arguments = obs.get("input")
    result = obs.get("output")
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": tool,
        "gen_ai.tool.call.arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
    }
    if result is not None:
        attributes["gen_ai.tool.call.result"] = result if isinstance(result, str) else json.dumps(result)
    call_id = metadata.get("tool_call_id")
    if isinstance(call_id, str):
        attributes["gen_ai.tool.call.id"] = call_id
    if name.startswith("tools/call") or metadata.get("mcp.session.id"):
        attributes["mcp.method.name"] = "tools/call"
        for key in ("mcp.session.id", "mcp.server.name"):
            if isinstance(metadata.get(key), str):
                attributes[key] = metadata[key]
    return attributes


def trajectories_from_langfuse(
    source: str | os.PathLike[str] | Mapping[str, Any] | Sequence[Any],
) -> list[Trajectory]:
    """Trajectories from Langfuse trace exports (a path, one trace dict, a list, or ``{"data": [...]}``).

    The exports are Langfuse's JSON of traces with their ``observations`` (the UI's "download
    trace" JSON, or ``GET /api/public/traces/{id}``); generations become model calls
    (input/output as OpenAI messages), tool observations and ``tools/call ...`` spans become
    tool calls, and the trace's scores are kept in ``metadata["scores"]`` (a ``reward`` score,
    if any, becomes the reward).

    Raises:
        ConfigError: the file is missing or holds no trace with observations.
    """
    trajectories: list[Trajectory] = []
    for trace in _load(source):
        trace_id = _hex_id(trace.get("id"), 16, "trace")
        spans = [_observation_span(trace_id, o) for o in trace["observations"] if isinstance(o, Mapping)]
        for trajectory in trajectories_from_spans(spans):
            trajectory.metadata["langfuse_trace_id"] = trace.get("id")
            for key in ("name", "sessionId", "tags"):
                if trace.get(key) is not None:
                    trajectory.metadata[f"langfuse_{key}"] = trace[key]
            if isinstance(trace.get("metadata"), Mapping):
                for key in ("scenario_id", "rollout_index", "step", "group_id"):
                    if key in trace["metadata"]:
                        trajectory.metadata[key] = trace["metadata"][key]
            scores = {
                str(s.get("name")): s.get("value")
                for s in trace.get("scores", []) or []
                if isinstance(s, Mapping) and isinstance(s.get("value"), int | float)
            }
            if scores:
                trajectory.metadata["scores"] = scores
                if "reward" in scores:
                    trajectory.reward = float(scores["reward"])
            trajectories.append(trajectory)
    return trajectories
