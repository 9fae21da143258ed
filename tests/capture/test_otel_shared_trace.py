"""Concurrent agent runs that share one trace (under a remote or foreign parent) stay separate trajectories."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import pytest
from opentelemetry import context, trace
from opentelemetry.sdk.trace import TracerProvider

from art_adapters._capture.otel import TrajectorySpanProcessor
from tests.capture.test_otel import CALL, FINAL, RESULT, USER, chat, tool


@pytest.fixture
def provider() -> Iterator[TracerProvider]:
    tracer_provider = TracerProvider()
    yield tracer_provider
    tracer_provider.shutdown()


def test_concurrent_runs_under_one_foreign_parent_do_not_mix(provider: TracerProvider) -> None:
    # E.g. run_groups inside a span of the Langfuse SDK's own provider, or a request carrying a traceparent:
    # every rollout's root span is a local root of the same trace, and they run at the same time.
    capture = TrajectorySpanProcessor()
    provider.add_span_processor(capture)
    tracer = provider.get_tracer("test")
    other = TracerProvider()
    first_turns_done = threading.Barrier(2)
    fast_done = threading.Event()

    def run(tag: str, parent: context.Context) -> None:
        token = context.attach(parent)
        try:
            with tracer.start_as_current_span(f"invoke_agent calc{tag}") as root:
                root.set_attribute("gen_ai.operation.name", "invoke_agent")
                chat(tracer, [USER], CALL, response_id=f"chatcmpl-a{tag}")
                tool(tracer, result=f"3{tag}")
                first_turns_done.wait(10)
                if tag == "slow":
                    fast_done.wait(10)  # the fast run's root ends while this one is mid-run
                result = dict(
                    RESULT, parts=[{"type": "tool_call_response", "id": "c1", "response": f"3{tag}"}]
                )
                chat(tracer, [USER, CALL, result], FINAL, response_id=f"chatcmpl-b{tag}")
            if tag == "fast":
                capture.force_flush()
                fast_done.set()
        finally:
            context.detach(token)

    with other.get_tracer("outer").start_as_current_span("training step"):
        parent = context.get_current()
        threads = [threading.Thread(target=run, args=(tag, parent)) for tag in ("fast", "slow")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    other.shutdown()

    by_root = {t.metadata["root_span"]: t for t in capture.trajectories}
    assert sorted(by_root) == ["invoke_agent calcfast", "invoke_agent calcslow"]
    for tag in ("fast", "slow"):
        trajectory = by_root[f"invoke_agent calc{tag}"]
        assert [r.result for r in trajectory.tool_records] == [f"3{tag}"]
        assert [m.completion_id for m in trajectory.messages if m.completion_id] == [
            f"chatcmpl-a{tag}",
            f"chatcmpl-b{tag}",
        ]
        assert trajectory.metrics["model_calls"] == 2
    assert len({t.metadata["trace_id"] for t in by_root.values()}) == 1  # one trace, two trajectories
    json.dumps([t.model_dump(mode="json") for t in by_root.values()])
    assert trace.get_current_span() is trace.INVALID_SPAN
