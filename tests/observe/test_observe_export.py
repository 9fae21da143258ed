"""Export of a real scored run: spans in the GenAI + Langfuse conventions, OTLP JSON round trip, scores
logged later, the Langfuse SDK path against a recording HTTP server, and an unreachable endpoint."""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import art_adapters as aa
from art_adapters import observe
from art_adapters._errors import ConfigError
from art_adapters.observe import ObserveConfig, Observer, OtlpJsonFileExporter
from tests.helpers.json_server import JsonServer, Request


def memory_observer(**config: Any) -> tuple[Observer, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    return Observer(ObserveConfig(**config), span_processors=[SimpleSpanProcessor(exporter)]), exporter


def by_trace(spans: list[Any]) -> dict[str, list[Any]]:
    traces: dict[str, list[Any]] = {}
    for span in spans:
        traces.setdefault(f"{span.context.trace_id:032x}", []).append(span)
    return traces


def kind(span: Any) -> str:
    return span.attributes["langfuse.observation.type"]


def test_each_rollout_is_a_trace_with_agent_generations_tools_and_scores(
    scored_groups: list[aa.TrajectoryGroup],
) -> None:
    observer, exporter = memory_observer()
    trace_ids = observer.log_rollouts(scored_groups, step=2, model="calc@2")
    observer.shutdown()
    traces = by_trace(exporter.get_finished_spans())
    trajectories = [t for g in scored_groups for t in g.trajectories]
    assert len(trace_ids) == len(trajectories) == 6 and set(trace_ids) == set(traces)

    for group in scored_groups:
        for index, trajectory in enumerate(group.trajectories):
            spans = traces[trace_ids[[t.id for t in trajectories].index(trajectory.id)]]
            (root,) = [s for s in spans if s.parent is None]
            attrs = root.attributes
            assert kind(root) == "agent" and attrs["gen_ai.operation.name"] == "invoke_agent"
            assert (
                attrs["session.id"] == attrs["langfuse.session.id"] == group.id
            )  # a group compares side by side
            assert {
                f"scenario:{group.metadata['scenario_id']}",
                f"group:{group.id}",
                "step:2",
                "split:train",
            } <= set(attrs["langfuse.trace.tags"])
            assert (
                attrs["langfuse.trace.metadata.rollout_index"] == index == attrs["art_adapters.rollout.index"]
            )
            assert attrs["langfuse.trace.metadata.scenario_id"] == group.metadata["scenario_id"]
            assert attrs["art_adapters.reward"] == trajectory.reward
            started_from = json.loads(attrs["langfuse.observation.input"])
            assert [m["role"] for m in started_from] == ["system", "user"]
            assert json.loads(attrs["langfuse.trace.output"]) == trajectory.messages[-1].content
            assert attrs["art_adapters.metrics.prompt_tokens"] == trajectory.metrics["prompt_tokens"] > 0
            assert all(s.parent is None or s.parent.span_id == root.context.span_id for s in spans)

            generations = [s for s in spans if kind(s) == "generation"]
            assert len(generations) == sum(m.role == "assistant" for m in trajectory.messages) == 2
            for generation in generations:
                assert generation.name == "chat calc@2"
                assert generation.attributes["langfuse.observation.model.name"] == "calc@2"
                assert generation.attributes["gen_ai.request.model"] == "calc@2"
            first_in = json.loads(generations[0].attributes["langfuse.observation.input"])
            assert first_in[-1]["role"] == "user" and "what is" in first_in[-1]["content"]
            first_out = json.loads(generations[0].attributes["gen_ai.output.messages"])
            assert [p["name"] for p in first_out[0]["parts"] if p["type"] == "tool_call"] == [
                "add",
                "multiply",
                "remember",
            ]
            assert (
                json.loads(generations[0].attributes["gen_ai.tool.definitions"])[0]["function"]["name"]
                == "add"
            )
            assert generations[0].attributes["gen_ai.response.id"] == trajectory.messages[2].completion_id

            tools = sorted((s for s in spans if kind(s) == "tool"), key=lambda s: s.name)
            assert [s.name for s in tools] == [
                "execute_tool remember",
                "tools/call add",
                "tools/call multiply",
            ]
            mcp_add = tools[1].attributes
            assert mcp_add["mcp.method.name"] == "tools/call" and mcp_add["mcp.server.name"] == "calculator"
            record = next(r for r in trajectory.tool_records if r.name == "add")
            assert mcp_add["mcp.session.id"] == record.session_id and record.session_id
            assert mcp_add["gen_ai.tool.call.result"] == "5" or mcp_add["gen_ai.tool.call.result"] == "6"
            assert tools[0].attributes["gen_ai.tool.call.result"] == "noted: started"
            # tool spans keep their real timing
            assert abs(tools[1].start_time / 1e9 - record.started_at.timestamp()) < 1e-3

            scores = {s.attributes["art_adapters.score.name"]: s for s in spans if kind(s) == "evaluator"}
            assert set(scores) == {"ruler", "reward"}
            ruler = scores["ruler"]
            assert ruler.attributes["gen_ai.evaluation.score.value"] == trajectory.metrics["ruler_score"]
            explanation = trajectory.metadata["ruler_explanation"]
            assert (
                explanation.startswith("because t")
                and ruler.attributes["gen_ai.evaluation.explanation"] == explanation
            )
            (event,) = ruler.events
            assert event.name == "gen_ai.evaluation.result"
            assert event.attributes["gen_ai.evaluation.explanation"] == explanation


def test_exported_spans_import_back_into_the_same_trajectories(
    scored_groups: list[aa.TrajectoryGroup], tmp_path: Any
) -> None:
    path = tmp_path / "traces.otlp.jsonl"
    observer = Observer(ObserveConfig(), span_exporter=OtlpJsonFileExporter(path))
    observer.log_rollouts(scored_groups, step=1, model="calc@1")
    observer.shutdown()
    request = json.loads(path.read_text().splitlines()[0])
    span = request["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert len(span["traceId"]) == 32 and len(span["spanId"]) == 16  # OTLP JSON: hex ids

    imported = aa.trajectories_from_otlp_json(path)
    originals = {t.id: t for g in scored_groups for t in g.trajectories}
    assert sorted(t.id for t in imported) == sorted(originals)
    for back in imported:
        original = originals[back.id]
        # a turn whose model capture did not know comes back named after the model the rollouts were logged for
        assert back.messages == [
            m.model_copy(update={"model": m.model or "calc@1"}) if m.role == "assistant" else m
            for m in original.messages
        ]
        assert back.tools == original.tools
        assert back.additional_histories == original.additional_histories
        fields = ("name", "call_id", "arguments", "result", "is_error", "server", "session_id", "source")
        assert [r.model_dump(include=set(fields)) for r in back.tool_records] == [
            r.model_dump(include=set(fields)) for r in original.tool_records
        ]
        assert back.reward == original.reward and back.metrics == original.metrics
        for key in ("scenario_id", "rollout_index", "ruler_explanation"):
            assert back.metadata[key] == original.metadata[key]
        assert back.metadata["step"] == 1 and back.metadata["model"] == "calc@1"
    # the same file, parsed first, and the live span processor on the observer agree
    assert [
        t.id
        for t in observe.trajectories_from_otlp_json([json.loads(x) for x in path.read_text().splitlines()])
    ] == [t.id for t in imported]


def test_live_span_processor_on_the_observer_assembles_the_same_conversations(
    scored_groups: list[aa.TrajectoryGroup],
) -> None:
    capture = aa.TrajectorySpanProcessor()
    observer = Observer(ObserveConfig(), span_processors=[capture])
    observer.log_rollouts(scored_groups[:1], scores=False)
    observer.shutdown()
    assert [t.messages for t in capture.trajectories] == [t.messages for t in scored_groups[0].trajectories]


def test_scores_logged_after_the_rollouts_land_in_their_traces(
    scored_groups: list[aa.TrajectoryGroup],
) -> None:
    observer, exporter = memory_observer()
    group = scored_groups[1]
    trace_ids = observer.log_rollouts(
        [
            group.model_copy(
                update={
                    "trajectories": [
                        t.model_copy(update={"reward": None, "metrics": {}}) for t in group.trajectories
                    ]
                }
            )
        ],
        scores=False,
    )
    assert not [s for s in exporter.get_finished_spans() if kind(s) == "evaluator"]
    roots = {
        f"{s.context.trace_id:032x}": s.context.span_id
        for s in exporter.get_finished_spans()
        if s.parent is None
    }
    assert observer.log_scores(group) == 2 * len(group)
    observer.shutdown()
    scores = [s for s in exporter.get_finished_spans() if kind(s) == "evaluator"]
    assert len(scores) == 2 * len(group)
    for span in scores:
        trace = f"{span.context.trace_id:032x}"
        assert trace in trace_ids and span.parent.span_id == roots[trace]


def test_train_metrics_become_a_train_step_trace_and_a_history_row(tmp_path: Any) -> None:
    observer, exporter = memory_observer(metrics_path=tmp_path / "metrics.jsonl", run="exp1")
    observer.log_train_metrics(4, {"loss": 0.25, "kl": 0.01, "note": "ok"}, duration_s=2.0)
    observer.shutdown()
    (span,) = exporter.get_finished_spans()
    assert span.name == "train_step 4" and span.attributes["art_adapters.train.loss"] == 0.25
    assert span.attributes["langfuse.trace.tags"] == ("train", "step:4", "run:exp1")
    assert (span.end_time - span.start_time) == pytest.approx(2e9, rel=1e-3)
    (row,) = observer.history.rows()
    assert row["step"] == 4 and row["loss"] == 0.25 and row["note"] == "ok"
    with pytest.raises(ConfigError, match="step"):
        observer.log_train_metrics(-1, {})


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_unreachable_endpoint_never_slows_the_run_and_warns(
    scored_groups: list[aa.TrajectoryGroup], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="art_adapters.observe")
    port = free_port()  # nothing listens there
    observer = Observer(
        ObserveConfig(
            otlp_endpoint=f"http://127.0.0.1:{port}/v1/traces", export_timeout_s=1.0, schedule_delay_s=0.05
        )
    )
    started = time.perf_counter()
    for step in range(5):
        observer.log_rollouts(scored_groups, step=step)
        observer.log_train_metrics(step, {"loss": 1.0})
    logging_s = time.perf_counter() - started
    # Only builds spans and queues them; exporting inline would cost >= export_timeout_s per batch.
    assert logging_s < 2.5, logging_s
    started = time.perf_counter()
    observer.shutdown(timeout_s=3.0)
    assert time.perf_counter() - started < 6.0
    assert observer.dropped_spans > 0 and observer.exported_spans == 0
    warnings = [r.getMessage() for r in caplog.records if "could not export" in r.getMessage()]
    assert len(warnings) == 1 and f"127.0.0.1:{port}" in warnings[0]


def test_off_by_default_and_the_exporter_is_not_loaded_until_used() -> None:
    code = (
        "import sys, os\n"
        "for k in list(os.environ):\n"
        "    if k.startswith(('LANGFUSE_', 'OTEL_', 'WANDB_')): del os.environ[k]\n"
        "import art_adapters as aa\n"
        "assert 'art_adapters.observe' not in sys.modules\n"
        "from art_adapters import observe\n"
        "obs = observe.get_observer()\n"
        "assert not obs.enabled\n"
        "t = aa.Trajectory(messages=[aa.Message(role='user', content='x')])\n"
        "g = aa.TrajectoryGroup(trajectories=[t])\n"
        "assert len(observe.log_rollouts([g], step=0)) == 1\n"
        "observe.log_train_metrics(0, {'loss': 1.0})\n"
        "heavy = ('opentelemetry.exporter', 'langfuse', 'matplotlib')\n"
        "assert not [m for m in sys.modules if m.startswith(heavy)]\n"
        "print('ok')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_settings_from_the_usual_environment_variables() -> None:
    cfg = ObserveConfig.from_env(
        {
            "LANGFUSE_PUBLIC_KEY": "pk-lf-1",
            "LANGFUSE_SECRET_KEY": "sk-lf-1",
            "LANGFUSE_HOST": "http://lf:3000",
        }
    )
    assert cfg.enabled and cfg.langfuse and cfg.langfuse_base_url == "http://lf:3000"
    assert cfg.langfuse_otlp_url({}) == "http://lf:3000/api/public/otel/v1/traces"
    assert (
        cfg.langfuse_otlp_url({"LANGFUSE_OTEL_TRACES_EXPORT_PATH": "v1/traces"}) == "http://lf:3000/v1/traces"
    )
    assert cfg.langfuse_headers() == {
        "Authorization": "Basic cGstbGYtMTpzay1sZi0x", "x-langfuse-ingestion-version": "4"
    }
    cfg = ObserveConfig.from_env(
        {
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:6006",
            "OTEL_EXPORTER_OTLP_HEADERS": "api_key=abc, x=1",
        }
    )
    assert cfg.otlp_endpoint == "http://127.0.0.1:6006/v1/traces" and cfg.otlp_headers == {
        "api_key": "abc",
        "x": "1",
    }
    assert not cfg.langfuse
    assert not ObserveConfig.from_env({}).enabled
    assert (
        ObserveConfig.from_env({}, otlp_endpoint="http://h:4318").otlp_endpoint == "http://h:4318/v1/traces"
    )
    with pytest.raises(ConfigError, match="both keys"):
        ObserveConfig.from_env({"LANGFUSE_PUBLIC_KEY": "pk"})
    with pytest.raises(ConfigError, match="http"):
        ObserveConfig.from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "127.0.0.1:4318"})
    with pytest.raises(ConfigError, match="key=value"):
        ObserveConfig.from_env({"OTEL_EXPORTER_OTLP_HEADERS": "novalue"})


class Recorder:
    """A real HTTP server standing in for Langfuse: records every POST (path, decoded body)."""

    def __init__(self) -> None:
        self.server = JsonServer(self._answer)
        self.url = self.server.url

    @property
    def posts(self) -> list[tuple[str, bytes]]:
        """Every request's path and decoded body, in order."""
        return [(r.path, r.body) for r in self.server.requests]

    @staticmethod
    def _answer(request: Request) -> tuple[int, Any]:
        if request.path.endswith("/scores"):
            batch = request.json()
            return 200, {"accepted": len(batch) if isinstance(batch, list) else 1, "rejected": 0, "errors": []}
        return 200, {}


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    server = Recorder()
    yield server
    server.server.close()


def test_langfuse_sdk_path_sends_spans_and_scores_with_the_explanation(
    scored_groups: list[aa.TrajectoryGroup], recorder: Recorder
) -> None:
    observer = observe.configure_langfuse("pk-lf-test", "sk-lf-test", recorder.url, run="lf-run")
    assert observer.langfuse_client is not None  # the SDK is installed in the test environment
    trace_ids = observer.log_rollouts(scored_groups[:1], step=3, model="calc@3")
    observer.shutdown()
    paths = [p for p, _ in recorder.posts]
    assert "/api/public/otel/v1/traces" in paths
    traces = b"".join(body for p, body in recorder.posts if p.endswith("/v1/traces"))
    for trace_id in trace_ids:
        assert bytes.fromhex(trace_id) in traces  # protobuf carries the raw 16-byte trace ids
    scores: list[dict[str, Any]] = []
    for path, body in recorder.posts:
        if path.endswith("/scores"):
            batch = json.loads(body)
            scores.extend(batch if isinstance(batch, list) else batch.get("scores", [batch]))
    ruler = [s for s in scores if s["name"] == "ruler"]
    assert len(ruler) == len(trace_ids)
    by_trace = {s["traceId"]: s for s in ruler}
    for trajectory, trace_id in zip(scored_groups[0].trajectories, trace_ids, strict=True):
        assert by_trace[trace_id]["value"] == trajectory.metrics["ruler_score"]
        assert by_trace[trace_id]["comment"] == trajectory.metadata["ruler_explanation"]


def test_trace_ids_are_stable_within_a_run_and_differ_across_runs(
    scored_groups: list[aa.TrajectoryGroup],
) -> None:
    first = Observer(ObserveConfig(run="a")).log_rollouts(scored_groups)
    again = Observer(ObserveConfig(run="a")).log_rollouts(scored_groups)
    other = Observer(ObserveConfig(run="b")).log_rollouts(scored_groups)
    assert first == again and not set(first) & set(other) and len(set(first)) == 6


def test_a_second_langfuse_observer_with_the_same_key_still_delivers(
    scored_groups: list[aa.TrajectoryGroup], recorder: Recorder
) -> None:
    delivered = []
    for run in ("first", "second"):
        observer = observe.configure_langfuse("pk-lf-twice", "sk-lf-twice", recorder.url, run=run)
        trace_ids = observer.log_rollouts(scored_groups[:1], step=0, scores=False)
        observer.shutdown()
        traces = b"".join(body for p, body in recorder.posts if p.endswith("/v1/traces"))
        delivered.append(all(bytes.fromhex(t) in traces for t in trace_ids))
    assert delivered == [True, True]


def _ruler_scores(recorder: Recorder) -> list[dict[str, Any]]:
    scores: list[dict[str, Any]] = []
    for path, body in recorder.posts:
        if path.endswith("/scores"):
            batch = json.loads(body)
            scores.extend(batch if isinstance(batch, list) else batch.get("scores", [batch]))
    return [s for s in scores if s["name"] == "ruler"]


def test_scores_reach_each_host_when_one_key_is_used_for_two_hosts_and_after_a_shutdown(
    scored_groups: list[aa.TrajectoryGroup],
) -> None:
    """The SDK keeps one client per key for the process (with the first one's host, and dropping every
    score once shut down: langfuse-python#1799); each observer's scores still reach its own host."""
    hosts = [Recorder(), Recorder()]
    a, b = hosts
    # (key, host, whether the user shuts the SDK client down): another host for a key in use, and
    # the same host after the shared client was shut down.
    plan = [
        ("pk-lf-hosts", a, False), ("pk-lf-hosts", b, False), ("pk-lf-shut", a, True), ("pk-lf-shut", a, False)
    ]  # fmt: skip
    try:
        for index, (key, host, user_shuts_down) in enumerate(plan):
            observer = observe.configure_langfuse(key, "sk-lf-shared", host.url, run=f"r{index}")
            trace_ids = observer.log_rollouts(scored_groups[:1], step=index)
            if user_shuts_down:
                observer.langfuse_client.shutdown()
            observer.shutdown()
            ruler = [s for s in _ruler_scores(host) if s["traceId"] in trace_ids]
            assert len(ruler) == len(trace_ids), f"observer {index}: {len(ruler)} of {len(trace_ids)} scores"
            values = {t.metrics["ruler_score"] for t in scored_groups[0].trajectories}
            assert {s["value"] for s in ruler} == values
    finally:
        for host in hosts:
            host.server.close()


async def test_failed_rollouts_and_tool_errors_are_error_spans_and_import_back(
    scored_groups: list[aa.TrajectoryGroup], tmp_path: Any
) -> None:
    good = scored_groups[0].trajectories[0].model_copy(deep=True)
    good.id = "traj-tool-error"
    good.tool_records[0].is_error = True
    good.tool_records[0].error = "ToolException: division by zero"
    good.tool_records[0].result = None

    class GraphFailed(RuntimeError):
        def __init__(self, trajectory: aa.Trajectory | None) -> None:
            super().__init__("graph crashed")
            self.trajectory = trajectory

    partial = scored_groups[1].trajectories[0].model_copy(deep=True)
    partial.id = "traj-partial"
    outcomes = iter([good, GraphFailed(partial), GraphFailed(None)])

    async def rollout(scenario: Any) -> aa.Trajectory:
        outcome = next(outcomes)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    groups = await aa.run_groups(
        rollout, [{"id": "mixed"}], n=3, max_concurrency=1, max_failures=2, max_failure_rate=None, progress=False
    )
    assert len(groups[0].trajectories) == 1 and len(groups[0].exceptions) == 2
    exporter = InMemorySpanExporter()
    path = tmp_path / "errors.jsonl"
    observer = Observer(
        ObserveConfig(),
        span_processors=[SimpleSpanProcessor(exporter)],
        span_exporter=OtlpJsonFileExporter(path),
    )
    trace_ids = observer.log_rollouts(groups, step=5)
    observer.shutdown()
    assert len(trace_ids) == 1  # the ids returned are the successful rollouts'
    spans = exporter.get_finished_spans()
    roots = [s for s in spans if s.parent is None]
    assert len(roots) == 3
    failed = [s for s in roots if "failed" in s.attributes["langfuse.trace.tags"]]
    assert len(failed) == 2
    assert all(
        s.status.status_code.name == "ERROR" and "GraphFailed: graph crashed" in s.status.description
        for s in failed
    )
    assert sorted(s.attributes["art_adapters.rollout.index"] for s in failed) == [1, 2]
    tool_error = next(
        s
        for s in spans
        if s.attributes.get("gen_ai.tool.call.id") == good.tool_records[0].call_id
        and s.context.trace_id == int(trace_ids[0], 16)
    )
    assert tool_error.status.status_code.name == "ERROR"
    assert tool_error.attributes["langfuse.observation.level"] == "ERROR"

    back = {t.id: t for t in aa.trajectories_from_otlp_json(path)}
    assert set(back) == {"traj-tool-error", "traj-partial"}  # the empty failure has nothing to import
    record = back["traj-tool-error"].tool_records[0]
    assert (record.is_error, record.error, record.result) == (True, "ToolException: division by zero", None)
    assert back["traj-partial"].error.endswith("GraphFailed: graph crashed")
    assert back["traj-partial"].messages == partial.messages


def test_token_usage_on_generations_when_known_per_call() -> None:
    question = aa.Message(role="user", content="What is 2 + 3?")
    single = aa.Trajectory(
        messages=[question, aa.Message(role="assistant", content="5", completion_id="chatcmpl-1")],
        metrics={"prompt_tokens": 31, "completion_tokens": 2, "total_tokens": 33},
    )
    call = aa.Message(role="assistant", content="", usage={"prompt_tokens": 40, "completion_tokens": 9})
    call.tool_calls = [aa.ToolCall(id="c1", function={"name": "add", "arguments": '{"a": 2, "b": 3}'})]
    two_calls = aa.Trajectory(
        messages=[
            question,
            call,
            aa.Message(role="tool", content="5", tool_call_id="c1"),
            aa.Message(role="assistant", content="5"),
        ],
        metrics={"prompt_tokens": 90, "completion_tokens": 11},
    )
    observer, exporter = memory_observer()
    observer.log_rollouts([aa.TrajectoryGroup(trajectories=[single, two_calls])], model="m@0")
    observer.shutdown()
    generations = sorted(
        (s for s in exporter.get_finished_spans() if kind(s) == "generation"), key=lambda s: s.start_time
    )
    usage = [
        (
            s.attributes.get("gen_ai.usage.input_tokens"),
            s.attributes.get("langfuse.observation.usage_details"),
        )
        for s in generations
    ]
    assert (
        31,
        json.dumps({"input": 31, "output": 2, "total": 33}),
    ) in usage  # the run's only call: its totals
    assert (40, json.dumps({"input": 40, "output": 9, "total": 49})) in usage  # a per-message usage field
    assert (None, None) in usage  # several calls, no per-call record: not invented (totals stay on the root)


def test_each_generation_span_carries_the_usage_capture_kept_on_its_message(
    scored_groups: list[aa.TrajectoryGroup],
) -> None:
    observer, exporter = memory_observer()
    observer.log_rollouts(scored_groups[:1], scores=False)
    observer.shutdown()
    generations = {
        s.attributes["gen_ai.response.id"]: s.attributes
        for s in exporter.get_finished_spans()
        if kind(s) == "generation"
    }
    turns = [m for t in scored_groups[0].trajectories for m in t.messages if m.role == "assistant"]
    assert len(turns) == len(generations) == 6  # several calls a run: the totals alone would not say
    for message in turns:
        attrs = generations[message.completion_id]
        usage = message.usage
        assert usage is not None and usage["prompt_tokens"] > 0  # capture kept each call's own usage
        assert (attrs["gen_ai.usage.input_tokens"], attrs["gen_ai.usage.output_tokens"]) == (
            usage["prompt_tokens"],
            usage["completion_tokens"],
        )
        assert json.loads(attrs["langfuse.observation.usage_details"]) == {
            "input": usage["prompt_tokens"],
            "output": usage["completion_tokens"],
            "total": usage["total_tokens"],
        }
        assert "usage" not in json.loads(attrs["langfuse.observation.output"])
