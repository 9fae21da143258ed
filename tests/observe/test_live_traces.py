"""One live trace per rollout: run_groups' rollout span, the spans inside it, and the scores on it.

Real pieces throughout: a LangGraph ReAct agent (deterministic policy model) calling the bundled
calculator MCP server over stdio, our callback capture, OpenInference's and OpenLLMetry's LangChain
instrumentations on the user's own tracer provider, the OpenTelemetry SDK, and the Observer exporting to an
in-memory exporter (the same batch processor as for OTLP).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import art_adapters as aa
from art_adapters import observe
from tests.helpers.capture_fakes import PolicyChatModel, calculator_policy, react_agent
from tests.helpers.langchain_instrumentations import instrumented_with


def _langchain_already_wrapped() -> bool:
    """Whether some LangChain instrumentation already wraps LangChain's callback manager in this process.

    OpenInference's and OpenLLMetry's ``uninstrument()`` can leave a wrapper behind (seen when a
    test module earlier on the same pytest worker instrumented both, one after the other); that
    stale instrumentation still makes its own spans current, between the rollout span and ours.
    """
    from langchain_core.callbacks.base import BaseCallbackManager

    return type(BaseCallbackManager.__init__).__name__.endswith("FunctionWrapper")


SCENARIOS = [{"id": "calc-a", "q": "what is 2 + 3 times 4"}, {"id": "calc-b", "q": "what is 5 + 1 times 6"}]


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def observer(exporter: InMemorySpanExporter) -> Iterator[observe.Observer]:
    obs = observe.Observer(observe.ObserveConfig(run="live-test"), span_exporter=exporter)
    yield obs
    obs.shutdown()


class UserSpans(InMemorySpanExporter):
    """The user's exported spans.

    Attributes:
        foreign: another instrumentation was already active (see :func:`_under_rollout`).
        kind_key / kinds: the attribute that names a span's kind in this instrumentation's
            conventions, and the kinds a rollout's LLM call and tool call must show.
    """

    foreign = False
    kind_key = "openinference.span.kind"
    kinds = frozenset({"LLM", "TOOL"})


@pytest.fixture(scope="module", params=["openinference", "openllmetry"])
def user_spans(request: pytest.FixtureRequest) -> Iterator[UserSpans]:
    """A LangChain instrumentation on the user's own provider (as in production): OpenInference's
    (OpenInference conventions) or OpenLLMetry's (OTel GenAI conventions)."""
    provider = TracerProvider()
    spans = UserSpans()
    spans.foreign = _langchain_already_wrapped()
    if request.param == "openllmetry":
        spans.kind_key, spans.kinds = "gen_ai.operation.name", frozenset({"chat", "execute_tool"})
    provider.add_span_processor(SimpleSpanProcessor(spans))
    try:
        with instrumented_with(request.param, provider):
            yield spans
    finally:
        provider.shutdown()


@pytest.fixture(scope="module")
async def calculator_tools() -> list[Any]:
    import mcp_tools
    from mcp_tools.servers import server_command

    return await mcp_tools.load_tools(server_command("calculator"))


def _rollout(tools: list[Any], *, fail_on: str | None = None) -> Any:
    import mcp_tools

    agent = react_agent(PolicyChatModel(policy=calculator_policy), tools)

    async def rollout(scenario: dict[str, Any]) -> aa.Trajectory:
        handler = aa.TrajectoryCallbackHandler()
        async with mcp_tools.rollout():
            await agent.ainvoke({"messages": [("user", scenario["q"])]}, config={"callbacks": [handler]})
        if scenario["id"] == fail_on:
            raise RuntimeError("the checker crashed")
        assert handler.trajectory is not None
        handler.trajectory.reward = 1.0 if "20" in str(handler.trajectory.messages[-1].content) else 0.0
        return handler.trajectory

    return rollout


def _by_trace(spans: list[ReadableSpan]) -> dict[int, list[ReadableSpan]]:
    out: dict[int, list[ReadableSpan]] = {}
    for span in spans:
        out.setdefault(span.context.trace_id, []).append(span)
    return out


def _roots(spans: list[ReadableSpan]) -> list[ReadableSpan]:
    return [s for s in spans if s.name.startswith("rollout")]


def _under_rollout(top: ReadableSpan, trace_id: int, roots: list[ReadableSpan], foreign: bool) -> bool:
    """Whether a user's topmost span hangs under the rollout span of its trace.

    Its parent is the rollout span itself, unless another LangChain instrumentation is active in
    this process (one a test module earlier on this pytest worker left instrumented, which wraps
    LangChain globally): then the parent is that instrumentation's span, itself in the trace.
    """
    (root,) = [r for r in roots if r.context.trace_id == trace_id]
    return top.parent is not None and top.context.trace_id == trace_id and (
        top.parent.span_id == root.context.span_id or foreign
    )


async def test_one_trace_per_rollout_with_rl_attributes_and_the_users_spans_inside(
    observer: observe.Observer,
    exporter: InMemorySpanExporter,
    user_spans: UserSpans,
    calculator_tools: list[Any],
) -> None:
    rollout = _rollout(calculator_tools)  # builds the agent (OpenLLMetry traces that too, in a trace of its own)
    user_spans.clear()
    tracing = observe.RolloutTracing(observer=observer, step=3, policy="calc@3")
    groups = await aa.run_groups(rollout, SCENARIOS, n=2, progress=False, tracing=tracing)
    assert observer.force_flush(10)
    ours = list(exporter.get_finished_spans())
    roots = _roots(ours)
    assert len(roots) == 4  # one rollout span per rollout
    assert len({r.context.trace_id for r in roots}) == 4  # each its own trace
    for group in groups:
        assert group.metadata["traced"] == "live"
        for trajectory in group.trajectories:
            (root,) = [r for r in roots if f"{r.context.trace_id:032x}" == trajectory.metadata["trace_id"]]
            assert f"{root.context.span_id:016x}" == trajectory.metadata["rollout_span_id"]
            assert root.parent is None
            attrs = root.attributes or {}
            assert attrs["art_adapters.scenario.id"] == group.metadata["scenario_id"]
            assert attrs["art_adapters.group.id"] == group.id == trajectory.metadata["group_id"]
            assert attrs["art_adapters.rollout.index"] == trajectory.metadata["rollout_index"]
            assert attrs["art_adapters.step"] == 3
            assert attrs["art_adapters.policy.version"] == "calc@3"
            assert attrs["art_adapters.trajectory.id"] == trajectory.id
            assert attrs["art_adapters.reward"] == trajectory.reward  # known when the rollout ended
            assert "step:3" in attrs["langfuse.trace.tags"] and f"group:{group.id}" in attrs["langfuse.trace.tags"]
            assert attrs["langfuse.session.id"] == group.id
            children = [s for s in ours if s.context.trace_id == root.context.trace_id and s is not root]
            kinds = sorted(str((s.attributes or {}).get("gen_ai.operation.name")) for s in children)
            assert kinds == ["chat", "chat", "execute_tool", "execute_tool"]
            assert all(s.parent is not None and s.parent.span_id == root.context.span_id for s in children)
            mcp = [s for s in children if (s.attributes or {}).get("mcp.method.name") == "tools/call"]
            assert len(mcp) == 2
    # The user's spans of each rollout sit in that rollout's trace, under its span.
    theirs = _by_trace(list(user_spans.get_finished_spans()))
    assert set(theirs) == {r.context.trace_id for r in roots}
    for trace_id, spans in theirs.items():
        assert all(s.parent is not None for s in spans)  # the rollout span is the trace's one root
        ids = {s.context.span_id for s in spans}
        tops = [s for s in spans if s.parent is None or s.parent.span_id not in ids]
        assert len(tops) == 1 and _under_rollout(tops[0], trace_id, roots, user_spans.foreign)
        kinds = {(s.attributes or {}).get(user_spans.kind_key) for s in spans}
        assert user_spans.kinds <= kinds, kinds


async def test_a_span_kept_open_gets_the_judges_score_and_keeps_the_rollouts_end_time(
    observer: observe.Observer, exporter: InMemorySpanExporter, calculator_tools: list[Any]
) -> None:
    tracing = observe.RolloutTracing(observer=observer, step=0, policy="calc@0", keep_open=True)
    groups = await aa.run_groups(_rollout(calculator_tools), SCENARIOS[:1], n=2, progress=False, tracing=tracing)
    returned_ns = time.time_ns()
    observer.force_flush(10)
    assert _roots(list(exporter.get_finished_spans())) == []  # still open: waiting for their scores
    await asyncio.sleep(0.3)  # the judge takes its time
    for k, trajectory in enumerate(groups[0].trajectories):
        trajectory.reward = 0.25 * (k + 1)
        trajectory.metrics["ruler_score"] = trajectory.reward
        trajectory.metadata["ruler_explanation"] = f"because t{k}"
    ids = observer.log_rollouts(groups, step=0, model="calc@0")
    observer.force_flush(10)
    spans = list(exporter.get_finished_spans())
    roots = _roots(spans)
    assert sorted(f"{r.context.trace_id:032x}" for r in roots) == sorted(ids)
    for trajectory in groups[0].trajectories:
        (root,) = [r for r in roots if f"{r.context.trace_id:032x}" == trajectory.metadata["trace_id"]]
        attrs = root.attributes or {}
        assert attrs["art_adapters.reward"] == trajectory.reward
        assert attrs["art_adapters.judge.explanation"] == trajectory.metadata["ruler_explanation"]
        assert root.end_time is not None and root.end_time <= returned_ns  # the rollout's end, not the scoring
        scores = [s for s in spans if s.name.startswith("score ") and s.context.trace_id == root.context.trace_id]
        assert {s.name for s in scores} == {"score ruler", "score reward"}
        assert all(s.parent is not None and s.parent.span_id == root.context.span_id for s in scores)
    # no second, after-the-fact trace of the same rollouts
    assert len({s.context.trace_id for s in spans}) == 2


async def test_a_failed_rollout_is_its_own_error_trace_and_not_exported_twice(
    observer: observe.Observer, exporter: InMemorySpanExporter, calculator_tools: list[Any]
) -> None:
    groups = await aa.run_groups(
        _rollout(calculator_tools, fail_on="calc-b"), SCENARIOS, n=1, progress=False,
        tracing=observe.RolloutTracing(observer=observer), max_failure_rate=1.0,
    )  # fmt: skip
    observer.log_rollouts(groups)
    observer.force_flush(10)
    roots = _roots(list(exporter.get_finished_spans()))
    assert len(roots) == 2
    (failed,) = [r for r in roots if r.status.status_code is StatusCode.ERROR]
    assert (failed.attributes or {})["art_adapters.scenario.id"] == "calc-b"
    assert "failed" in (failed.attributes or {})["langfuse.trace.tags"]
    assert "RuntimeError: the checker crashed" in (failed.status.description or "")
    assert any(e.name == "exception" for e in failed.events)


def test_nothing_is_traced_and_opentelemetry_is_not_imported_when_nothing_is_configured() -> None:
    code = """
import asyncio, os, sys
for key in list(os.environ):
    if key.startswith(("LANGFUSE_", "OTEL_EXPORTER_OTLP")):
        del os.environ[key]
import art_adapters as aa

async def rollout(scenario):
    return aa.Trajectory(messages=[{"role": "user", "content": "hi"}])

groups = asyncio.run(aa.run_groups(rollout, [{"id": "s"}], n=2, progress=False))
assert "trace_id" not in groups[0].trajectories[0].metadata
assert "traced" not in groups[0].metadata
print(sorted(m for m in sys.modules if m.startswith("opentelemetry")))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


async def test_an_endpoint_that_is_down_slows_neither_the_rollouts_nor_the_shutdown() -> None:
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]

    async def rollout(scenario: dict[str, Any]) -> aa.Trajectory:
        await asyncio.sleep(0.05)
        return aa.Trajectory(messages=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "4"}])

    async def run(observer: observe.Observer) -> tuple[float, float]:
        started = time.perf_counter()
        for step in range(3):
            tracing = observe.RolloutTracing(observer=observer, step=step, keep_open=True)
            groups = await aa.run_groups(rollout, [{"id": i} for i in range(6)], n=4, progress=False, tracing=tracing)
            observer.log_rollouts(groups, step=step)
            observer.log_train_metrics(step, {"loss": 0.5})
            await asyncio.sleep(0.6)  # what a train step would take; exports happen meanwhile
        ran = time.perf_counter() - started
        observer.shutdown()
        return ran, time.perf_counter() - started - ran

    off_run, _ = await run(observe.Observer(observe.ObserveConfig()))
    down = observe.Observer(
        observe.ObserveConfig(otlp_endpoint=f"http://127.0.0.1:{port}/v1/traces", export_timeout_s=1)
    )
    down_run, down_shutdown = await run(down)
    assert down.dropped_spans > 0 and down.exported_spans == 0
    assert down_run < off_run * 1.5 + 0.5, (off_run, down_run)
    assert down_shutdown < 1.0


async def test_langfuse_callback_handler_spans_join_the_rollout_trace_and_import_back_once(
    observer: observe.Observer, exporter: InMemorySpanExporter, calculator_tools: list[Any]
) -> None:
    """A user already tracing with Langfuse's CallbackHandler: its observations land in each rollout's
    trace, and the trace (ours + theirs) imports back as one trajectory with each call counted once."""
    langfuse = pytest.importorskip("langfuse")
    langfuse_langchain = pytest.importorskip("langfuse.langchain")
    import mcp_tools

    foreign = _langchain_already_wrapped()
    key = "pk-lf-art-adapters-live-test"  # Langfuse keeps one client per key for the process
    provider = TracerProvider()
    theirs = InMemorySpanExporter()
    client = langfuse.Langfuse(
        public_key=key, secret_key="sk-lf-live", base_url="http://127.0.0.1:9",
        tracer_provider=provider, span_exporter=theirs,
    )  # fmt: skip
    agent = react_agent(PolicyChatModel(policy=calculator_policy), calculator_tools)

    async def rollout(scenario: dict[str, Any]) -> aa.Trajectory:
        handler = aa.TrajectoryCallbackHandler()
        callbacks = [handler, langfuse_langchain.CallbackHandler(public_key=key)]
        async with mcp_tools.rollout():
            await agent.ainvoke({"messages": [("user", scenario["q"])]}, config={"callbacks": callbacks})
        assert handler.trajectory is not None
        return handler.trajectory

    try:
        groups = await aa.run_groups(
            rollout, SCENARIOS[:1], n=2, progress=False, tracing=observe.RolloutTracing(observer=observer)
        )
        client.flush()
    finally:
        client.shutdown()
        provider.shutdown()
    observer.force_flush(10)
    ours = list(exporter.get_finished_spans())
    langfuse_spans = list(theirs.get_finished_spans())
    for trajectory in groups[0].trajectories:
        trace_id = int(trajectory.metadata["trace_id"], 16)
        mine = [s for s in langfuse_spans if s.context.trace_id == trace_id]
        types = {(s.attributes or {}).get("langfuse.observation.type") for s in mine}
        assert {"generation", "tool"} <= types  # the handler's observations, in the rollout's trace
        ids = {s.context.span_id for s in mine}
        tops = [s for s in mine if s.parent is None or s.parent.span_id not in ids]
        assert tops and all(_under_rollout(top, trace_id, _roots(ours), foreign) for top in tops)
        # Both instrumentations' spans of the trace import back as the one trajectory, each call once.
        (back,) = observe.trajectories_from_spans([s for s in ours + langfuse_spans if s.context.trace_id == trace_id])
        assert back.id == trajectory.id
        assert [m.role for m in back.messages] == [m.role for m in trajectory.messages]
        assert len(back.tool_records) == len(trajectory.tool_records) == 2
        assert back.metrics["model_calls"] == 2


async def test_langfuse_scores_land_on_the_rollouts_own_trace_with_the_explanation() -> None:
    """The Langfuse SDK path: RULER's score and the reward are Langfuse scores on the live trace (and its
    rollout observation), the judge's explanation as the comment. The server is the Langfuse API
    stand-in (tests/helpers/langfuse_api.py): a real Langfuse needs Docker."""
    pytest.importorskip("langfuse")
    from tests.helpers.langfuse_api import LangfuseApiStandIn

    key, secret = "pk-lf-art-adapters-live-scores", "sk-lf-live-scores"

    async def rollout(scenario: dict[str, Any]) -> aa.Trajectory:
        return aa.Trajectory(messages=[{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}])

    with LangfuseApiStandIn([], public_key=key, secret_key=secret) as server:
        config = observe.ObserveConfig(
            langfuse_public_key=key, langfuse_secret_key=secret, langfuse_base_url=server.url, run="scores"
        )
        observer = observe.Observer(config)
        assert observer.langfuse_client is not None
        tracing = observe.RolloutTracing(observer=observer, step=1, policy="calc@1", keep_open=True)
        groups = await aa.run_groups(rollout, [{"id": "s"}], n=2, progress=False, tracing=tracing)
        for k, trajectory in enumerate(groups[0].trajectories):
            trajectory.reward = trajectory.metrics["ruler_score"] = 0.5 * k
            trajectory.metadata["ruler_explanation"] = f"because t{k}"
        observer.log_rollouts(groups, step=1, model="calc@1")
        observer.shutdown()
        assert server.otlp_posts >= 1  # the spans went to Langfuse's OTLP endpoint
        scores = server.created_scores
    assert len(scores) == 4, scores
    for trajectory in groups[0].trajectories:
        mine = {s["name"]: s for s in scores if s["traceId"] == trajectory.metadata["trace_id"]}
        assert set(mine) == {"ruler", "reward"}
        for score in mine.values():
            assert score["observationId"] == trajectory.metadata["rollout_span_id"]
            assert score["value"] == trajectory.reward
        assert mine["ruler"]["comment"] == trajectory.metadata["ruler_explanation"]


@pytest.mark.parametrize("use_sdk", [False, True])
def test_langfuse_otlp_exports_send_the_v4_ingestion_header(use_sdk: bool) -> None:
    """Langfuse v4 processes OTLP spans in real time only with ``x-langfuse-ingestion-version: 4``:
    our direct exporter sends it (``use_langfuse_sdk=False``), as the SDK's own exporter does."""
    if use_sdk:
        pytest.importorskip("langfuse")
    from tests.helpers.langfuse_api import LangfuseApiStandIn

    key, secret = f"pk-lf-ingestion-{int(use_sdk)}", "sk-lf-ingestion"
    trajectory = aa.Trajectory(messages=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}])
    trajectory.reward = 1.0
    with LangfuseApiStandIn([], public_key=key, secret_key=secret) as server:
        config = observe.ObserveConfig(
            langfuse_public_key=key, langfuse_secret_key=secret, langfuse_base_url=server.url,
            use_langfuse_sdk=use_sdk, run="v4",
        )  # fmt: skip
        observer = observe.Observer(config)
        assert (observer.langfuse_client is not None) == use_sdk
        observer.log_rollouts([aa.TrajectoryGroup(trajectories=[trajectory])], step=0)
        observer.shutdown()
        versions = server.otlp_ingestion_versions
    assert versions and set(versions) == {"4"}, versions


def test_the_fallback_score_sink_sends_through_the_sdks_api_client_and_counts_rejections(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Scores sent without the shared ``Langfuse`` client (langfuse-python#1799) go through the SDK's own
    ``LangfuseAPI.scores.create``: one batch, observation-level, with the comment and judge metadata;
    a 207 answer's rejections are counted as dropped and logged with the server's message."""
    pytest.importorskip("langfuse")
    from art_adapters.observe._langfuse_api import LangfuseScoreClient
    from tests.helpers.langfuse_api import LangfuseApiStandIn

    key, secret = "pk-lf-fallback", "sk-lf-fallback"
    with LangfuseApiStandIn([], public_key=key, secret_key=secret) as server:
        server.refuse_score_names = {"bogus"}
        client = LangfuseScoreClient(key, secret, server.url)
        client.create_score(name="ruler", value=0.5, trace_id="a" * 32, observation_id="b" * 16,
                            comment="because", metadata={"judge_ids": ["j1"]})  # fmt: skip
        client.create_score(name="bogus", value=1.0, trace_id="a" * 32)
        client.shutdown()
        posts = server.calls("/api/public/scores")
        (score,) = server.created_scores
    assert len(posts) == 1  # one batch
    assert (score["name"], score["traceId"], score["observationId"], score["comment"]) == (
        "ruler", "a" * 32, "b" * 16, "because"
    )
    assert score["metadata"] == {"judge_ids": ["j1"]} and score["dataType"] == "NUMERIC"
    assert (client.sent, client.dropped) == (1, 1)
    assert "rejected 1 of 2" in caplog.text and "'bogus' is not allowed" in caplog.text
