"""TrajectorySpanProcessor on the real OTel SDK pipeline: API, isolation from other processors, robustness."""

from __future__ import annotations

import gc
import json
import logging
import threading
import time
from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from art_adapters._capture import otel_trace
from art_adapters._capture.otel import TrajectorySpanProcessor
from art_adapters._errors import ConfigError
from art_adapters._trajectory import Trajectory

SYSTEM = [{"type": "text", "content": "You are a calculator."}]
USER = {"role": "user", "parts": [{"type": "text", "content": "add 1 and 2"}]}
CALL = {
    "role": "assistant",
    "parts": [{"type": "tool_call", "id": "c1", "name": "add", "arguments": {"a": 1, "b": 2}}],
}
RESULT = {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1", "response": "3"}]}
FINAL = {"role": "assistant", "parts": [{"type": "text", "content": "1 + 2 = 3"}], "finish_reason": "stop"}
TOOLS = [{"type": "function", "name": "add", "description": "Add.", "parameters": {"type": "object"}}]


@pytest.fixture
def provider() -> Iterator[TracerProvider]:
    """A real SDK provider, shut down after the test."""
    tracer_provider = TracerProvider()
    yield tracer_provider
    tracer_provider.shutdown()


def chat(tracer: trace.Tracer, inputs: list[dict], output: dict, response_id: str | None = None) -> None:
    """End one GenAI chat span in the current context."""
    with tracer.start_as_current_span("chat tiny") as span:
        span.set_attribute("gen_ai.operation.name", "chat")
        span.set_attribute("gen_ai.system_instructions", json.dumps(SYSTEM))
        span.set_attribute("gen_ai.input.messages", json.dumps(inputs))
        span.set_attribute("gen_ai.output.messages", json.dumps([output]))
        span.set_attribute("gen_ai.tool.definitions", json.dumps(TOOLS))
        span.set_attribute("gen_ai.usage.input_tokens", 10)
        span.set_attribute("gen_ai.usage.output_tokens", 5)
        if response_id:
            span.set_attribute("gen_ai.response.id", response_id)


def tool(tracer: trace.Tracer, call_id: str = "c1", result: str = "3") -> None:
    """End one GenAI execute_tool span in the current context."""
    with tracer.start_as_current_span("execute_tool add") as span:
        span.set_attribute("gen_ai.operation.name", "execute_tool")
        span.set_attribute("gen_ai.tool.name", "add")
        span.set_attribute("gen_ai.tool.call.id", call_id)
        span.set_attribute("gen_ai.tool.call.arguments", json.dumps({"a": 1, "b": 2}))
        span.set_attribute("gen_ai.tool.call.result", result)


def agent_run(tracer: trace.Tracer, tag: str = "") -> int:
    """One agent run as a trace (chat -> tool -> chat); returns its trace id."""
    with tracer.start_as_current_span(f"invoke_agent calc{tag}") as root:
        root.set_attribute("gen_ai.operation.name", "invoke_agent")
        chat(tracer, [USER], CALL, response_id=f"chatcmpl-a{tag}")
        tool(tracer, result=f"3{tag}")
        final = dict(RESULT, parts=[{"type": "tool_call_response", "id": "c1", "response": f"3{tag}"}])
        chat(tracer, [USER, CALL, final], FINAL, response_id=f"chatcmpl-b{tag}")
        return root.get_span_context().trace_id


def test_one_trajectory_per_trace_with_messages_tools_and_completion_ids(provider: TracerProvider) -> None:
    capture = TrajectorySpanProcessor()
    provider.add_span_processor(capture)
    trace_id = agent_run(provider.get_tracer("test"))

    trajectory = capture.trajectory
    assert trajectory is not None and len(capture.trajectories) == 1
    assert trajectory.openai_messages() == [
        {"role": "system", "content": "You are a calculator."},
        {"role": "user", "content": "add 1 and 2"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}
            ],
        },
        {
            "role": "tool",
            "content": "3",
            "name": "add",
            "tool_call_id": "c1",
        },  # named after the call it answers
        {"role": "assistant", "content": "1 + 2 = 3"},
    ]
    assert [m.completion_id for m in trajectory.messages if m.role == "assistant"] == [
        "chatcmpl-a",
        "chatcmpl-b",
    ]
    assert trajectory.tools is not None and [t.name for t in trajectory.tools] == ["add"]
    assert trajectory.tools[0].function["parameters"] == {"type": "object"}
    assert trajectory.additional_histories == []
    [record] = trajectory.tool_records
    assert (record.name, record.call_id, record.arguments, record.result, record.source) == (
        "add",
        "c1",
        {"a": 1, "b": 2},
        "3",
        "otel",
    )
    assert trajectory.metrics == {
        "prompt_tokens": 20,
        "completion_tokens": 10,
        "total_tokens": 30,
        "model_calls": 2,
        "tool_calls": 1,
    }
    assert trajectory.metadata["root_span"] == "invoke_agent calc"
    assert trajectory.finished_at is not None and trajectory.finished_at >= trajectory.started_at
    assert capture.trajectory_for_trace(trace_id) is trajectory
    assert capture.trajectory_for_trace(f"{trace_id:032x}") is trajectory
    assert capture.trajectory_for_trace(trace_id + 1) is None
    # JSON round trip of what capture produced
    assert Trajectory.model_validate_json(trajectory.model_dump_json()) == trajectory


def test_failed_root_span_keeps_trajectory_with_error(provider: TracerProvider) -> None:
    capture = TrajectorySpanProcessor()
    provider.add_span_processor(capture)
    tracer = provider.get_tracer("test")
    with pytest.raises(RuntimeError), tracer.start_as_current_span("run"):
        chat(tracer, [USER], CALL)
        raise RuntimeError("node exploded")
    trajectory = capture.trajectory
    assert trajectory is not None
    assert trajectory.error == "RuntimeError: node exploded"
    assert [m.role for m in trajectory.messages] == ["system", "user", "assistant"]


def test_sibling_batch_exporter_still_receives_every_span(provider: TracerProvider) -> None:
    exporter = InMemorySpanExporter()
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=50))
    capture = TrajectorySpanProcessor()
    provider.add_span_processor(capture)
    tracer = provider.get_tracer("test")
    for index in range(5):
        agent_run(tracer, tag=str(index))
        with tracer.start_as_current_span("unrelated http request"):
            pass
    assert provider.force_flush(5_000)
    names = [span.name for span in exporter.get_finished_spans()]
    assert len(names) == 5 * (4 + 1)  # root, chat, tool, chat per run, plus the unrelated span
    assert names.count("execute_tool add") == 5
    # unrelated traces (no model or tool call) give no trajectory
    assert [t.metadata["root_span"] for t in capture.trajectories] == [
        f"invoke_agent calc{i}" for i in range(5)
    ]


def test_garbage_attributes_are_skipped_and_break_nothing(provider: TracerProvider) -> None:
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    capture = TrajectorySpanProcessor()
    provider.add_span_processor(capture)
    tracer = provider.get_tracer("test")
    garbage = [
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.input.messages": "{not json",
            "gen_ai.output.messages": "[1, 2]",
        },
        {"gen_ai.operation.name": "chat", "gen_ai.input.messages": json.dumps([{"role": 7, "parts": "x"}])},
        {"gen_ai.operation.name": "chat", "gen_ai.input.messages": json.dumps({"role": "user"})},
        {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": 12,
            "gen_ai.tool.call.result": b"\xff".hex(),
        },
        {"gen_ai.operation.name": "execute_tool"},
        {
            "openinference.span.kind": "LLM",
            "llm.input_messages.x.message.role": "user",
            "llm.tools.0.tool": "no",
        },
        {"openinference.span.kind": "LLM", "llm.input_messages.0.message.role": ["user", "x"]},
        {"openinference.span.kind": "TOOL", "input.value": "[[[", "output.value": json.dumps({"lc": 1})},
        {"mcp.method.name": "tools/call", "gen_ai.tool.call.arguments": "nope", "mcp.session.id": 3},
        {"gen_ai.system": "openai", "gen_ai.prompt.0.role": "alien", "gen_ai.completion.0.content": 5},
        {"gen_ai.operation.name": "chat", "gen_ai.tool.definitions": json.dumps([{"nameless": True}, "str"])},
    ]
    with tracer.start_as_current_span("run"):
        for attributes in garbage:
            with tracer.start_as_current_span("weird") as span:
                span.set_attributes(attributes)  # type: ignore[arg-type]
        chat(tracer, [USER], FINAL)
    trajectory = capture.trajectory
    assert trajectory is not None
    assert len(exporter.get_finished_spans()) == len(garbage) + 2
    # the one good chat call is the main conversation
    assert trajectory.openai_messages()[-1] == {"role": "assistant", "content": "1 + 2 = 3"}
    # the tool-ish garbage spans become records with whatever could be read, never an exception
    assert {r.source for r in trajectory.tool_records} <= {"otel", "mcp"}
    mcp = [r for r in trajectory.tool_records if r.source == "mcp"]
    assert mcp and mcp[0].name == "weird" and mcp[0].arguments == "nope" and mcp[0].session_id == "3"


def test_exception_during_conversion_never_reaches_the_sdk(
    provider: TracerProvider, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Fault injection: the parser and the user's callback both raise; spans still end and export."""
    real_parse = otel_trace.parse_span

    def exploding_parse(span):  # type: ignore[no-untyped-def]
        if span.name == "explode":
            raise RuntimeError("parser bug")
        return real_parse(span)

    monkeypatch.setattr(otel_trace, "parse_span", exploding_parse)
    exporter = InMemorySpanExporter()
    seen: list[Trajectory] = []

    def bad_callback(trajectory: Trajectory) -> None:
        seen.append(trajectory)
        raise ValueError("user callback bug")

    capture = TrajectorySpanProcessor(on_trajectory=bad_callback)
    provider.add_span_processor(capture)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    with caplog.at_level(logging.ERROR, logger="art_adapters._capture.otel"):
        with tracer.start_as_current_span("run"):
            with tracer.start_as_current_span("explode") as span:
                span.set_attribute("gen_ai.operation.name", "chat")
            chat(tracer, [USER], FINAL)
        agent_run(tracer)
        trajectories = capture.trajectories
    assert len(exporter.get_finished_spans()) == 3 + 4
    assert len(trajectories) == 2 and seen == trajectories
    assert trajectories[0].logs == ["1 span(s) could not be parsed and were skipped"]
    assert "on_trajectory callback raised" in caplog.text


def test_concurrent_traces_from_many_threads_each_get_their_own_trajectory(provider: TracerProvider) -> None:
    capture = TrajectorySpanProcessor()
    provider.add_span_processor(capture)
    tracer = provider.get_tracer("test")
    barrier = threading.Barrier(8)
    trace_ids: dict[str, int] = {}

    def worker(tag: str) -> None:
        barrier.wait()
        for _ in range(3):
            trace_ids[tag] = agent_run(tracer, tag=tag)

    threads = [threading.Thread(target=worker, args=(str(i),)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(capture.trajectories) == 24
    for tag, trace_id in trace_ids.items():
        trajectory = capture.trajectory_for_trace(trace_id)
        assert trajectory is not None
        assert trajectory.messages[-2].content == f"3{tag}"  # the tool result of this thread's run
        assert [m.completion_id for m in trajectory.messages if m.completion_id] == [
            f"chatcmpl-a{tag}",
            f"chatcmpl-b{tag}",
        ]
        assert trajectory.tool_records[0].result == f"3{tag}"


def test_pop_trajectories_returns_in_order_and_forgets(provider: TracerProvider) -> None:
    capture = TrajectorySpanProcessor()
    provider.add_span_processor(capture)
    tracer = provider.get_tracer("test")
    first = agent_run(tracer, "x")
    agent_run(tracer, "y")
    popped = capture.pop_trajectories()
    assert [t.metadata["root_span"] for t in popped] == ["invoke_agent calcx", "invoke_agent calcy"]
    assert capture.trajectories == [] and capture.trajectory is None
    assert capture.trajectory_for_trace(first) is None


def test_traces_without_model_calls_are_kept_only_when_asked(provider: TracerProvider) -> None:
    capture = TrajectorySpanProcessor(keep_empty=True)
    provider.add_span_processor(capture)
    with provider.get_tracer("test").start_as_current_span("GET /health"):
        pass
    [trajectory] = capture.trajectories
    assert trajectory.messages == [] and trajectory.metadata["root_span"] == "GET /health"


def test_parent_from_another_provider_makes_a_local_root(provider: TracerProvider) -> None:
    """Our provider's top span under a foreign provider's span still closes the trace."""
    other = TracerProvider()
    capture = TrajectorySpanProcessor()
    provider.add_span_processor(capture)
    with other.get_tracer("http").start_as_current_span("POST /run"):
        agent_run(provider.get_tracer("test"))
        assert capture.trajectory is not None  # assembled before the foreign span ended
    assert capture.trajectory.metadata["root_span"] == "invoke_agent calc"
    other.shutdown()


def test_force_flush_returns_false_on_timeout_and_true_once_drained(provider: TracerProvider) -> None:
    release = threading.Event()
    capture = TrajectorySpanProcessor(on_trajectory=lambda _: release.wait(10))
    provider.add_span_processor(capture)
    agent_run(provider.get_tracer("test"))
    started = time.perf_counter()
    assert capture.force_flush(timeout_millis=100) is False
    assert time.perf_counter() - started < 2
    release.set()
    assert capture.force_flush(timeout_millis=5_000) is True


def test_full_queue_drops_spans_instead_of_blocking(provider: TracerProvider) -> None:
    release = threading.Event()
    capture = TrajectorySpanProcessor(on_trajectory=lambda _: release.wait(10), max_queue_size=3)
    provider.add_span_processor(capture)
    tracer = provider.get_tracer("test")
    chat(tracer, [USER], FINAL)  # a one-span trace: the worker now blocks in the callback
    assert capture.force_flush(100) is False
    started = time.perf_counter()
    for _ in range(20):
        agent_run(tracer)
    assert time.perf_counter() - started < 2
    assert capture.dropped_spans > 0
    assert not capture._open  # a dropped span is forgotten too: no bookkeeping grows while overloaded
    release.set()
    assert capture.force_flush(5_000)
    capture.shutdown()
    agent_run(tracer)  # after shutdown: nothing is kept for spans that will never be handled
    assert not capture._open


def test_unfinished_traces_are_evicted_as_incomplete_trajectories(provider: TracerProvider) -> None:
    capture = TrajectorySpanProcessor(max_pending_traces=2)
    provider.add_span_processor(capture)
    tracer = provider.get_tracer("test")
    roots = []
    for _ in range(3):
        root = tracer.start_span("never ends")
        roots.append(root)
        with trace.use_span(root, end_on_exit=False):
            chat(tracer, [USER], FINAL)
    [evicted] = capture.trajectories
    assert evicted.logs == ["root span never ended; assembled when evicted"]
    assert evicted.metadata["trace_id"] == f"{roots[0].get_span_context().trace_id:032x}"
    for root in roots:
        root.end()


def test_shutdown_is_idempotent_time_bounded_and_stops_capture(provider: TracerProvider) -> None:
    release = threading.Event()
    capture = TrajectorySpanProcessor(on_trajectory=lambda _: release.wait(10), shutdown_timeout_s=0.2)
    provider.add_span_processor(capture)
    tracer = provider.get_tracer("test")
    agent_run(tracer)
    started = time.perf_counter()
    capture.shutdown()
    capture.shutdown()
    assert time.perf_counter() - started < 2
    release.set()
    assert capture.force_flush(5_000)
    agent_run(tracer)  # ignored after shutdown, and harmless
    assert len(capture.trajectories) == 1


def test_on_end_is_cheap() -> None:
    """on_end only filters and enqueues: timed per call on real finished spans, worker held still."""
    exporter = InMemorySpanExporter()
    source = TracerProvider()
    source.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = source.get_tracer("test")
    with tracer.start_as_current_span("root"):
        chat(tracer, [USER, CALL, RESULT], FINAL)
        with tracer.start_as_current_span("some node"):
            pass
    spans = {s.name: s for s in exporter.get_finished_spans()}
    release = threading.Event()
    capture = TrajectorySpanProcessor(on_trajectory=lambda _: release.wait(10))
    capture.on_end(spans["chat tiny"])  # parent unknown: a root, so the worker blocks in the callback
    assert capture.force_flush(50) is False
    capture.on_start(spans["root"])  # type: ignore[arg-type]  # now the spans below have a local parent
    timings = {}
    gc.collect()
    gc.disable()  # a collection of garbage left by earlier tests would be timed as on_end's
    try:
        for name in ("chat tiny", "some node"):
            calls = 2_000
            started = time.perf_counter()
            for _ in range(calls):
                capture.on_end(spans[name])
            timings[name] = (time.perf_counter() - started) / calls * 1e6
    finally:
        gc.enable()
    release.set()
    assert capture.force_flush(10_000)
    capture.shutdown()
    logging.getLogger(__name__).info("on_end per span: %s us", {k: round(v, 2) for k, v in timings.items()})
    assert timings["chat tiny"] < 20 and timings["some node"] < 20, timings


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_queue_size": 0}, "max_queue_size must be a positive number"),
        ({"max_pending_traces": -1}, "max_pending_traces must be a positive number"),
        ({"read_timeout_s": "soon"}, "read_timeout_s must be a positive number"),
        ({"shutdown_timeout_s": True}, "shutdown_timeout_s must be a positive number"),
        ({"on_trajectory": "print"}, "on_trajectory must be callable"),
    ],
)
def test_bad_configuration_is_a_config_error(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        TrajectorySpanProcessor(**kwargs)


@pytest.mark.parametrize("bad", ["not-hex", 1.5, None])
def test_bad_trace_id_is_a_config_error(bad: object) -> None:
    capture = TrajectorySpanProcessor()
    with pytest.raises(ConfigError, match="trace_id must be an int or a hex string"):
        capture.trajectory_for_trace(bad)  # type: ignore[arg-type]
    capture.shutdown()
