"""An OpenAI Agents SDK agent (``openai-agents``, on the Responses API by default) served by our backend,
traced by OpenInference's Agents instrumentation into ``TrajectorySpanProcessor``: its runs are
exact-token trajectories that train a step, per model family (one run plain, one streamed).

The agent forces an ``add`` call and stops on the tool's result (``tool_use_behavior=
"stop_on_first_tool"``): an unforced second turn of these tiny models runs to ``max_output_tokens``,
which the Agents SDK treats as a failed run (``ModelBehaviorError``: ``response.incomplete``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from art_adapters import TrajectorySpanProcessor
from tests.helpers.families_support import (
    SYSTEM,
    Family,
    family_model,
    trains_step_1,
)

pytestmark = [pytest.mark.slow, pytest.mark.parametrize("family", ["qwen3", "smollm2"], indirect=True)]

agents = pytest.importorskip("agents", reason="openai-agents is not installed")
oi_agents = pytest.importorskip(
    "openinference.instrumentation.openai_agents", reason="openinference-instrumentation-openai-agents is not installed"
)


@pytest.fixture(scope="module")
def capture() -> Iterator[TrajectorySpanProcessor]:
    """The Agents SDK traced (only) into a span processor on a real provider; taken down after."""
    from opentelemetry.sdk.trace import TracerProvider

    agents.set_trace_processors([])  # no export to OpenAI's trace backend
    provider = TracerProvider()
    processor = TrajectorySpanProcessor()
    provider.add_span_processor(processor)
    instrumentor = oi_agents.OpenAIAgentsInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        yield processor
    finally:
        instrumentor.uninstrument()
        provider.shutdown()


@agents.function_tool
def add(a: int, b: int) -> int:
    """Add two small integers."""
    return a + b


async def test_an_agents_sdk_agent_trains_a_step_on_exact_tokens(
    family: Family, capture: TrajectorySpanProcessor
) -> None:
    from openai import AsyncOpenAI

    capture.pop_trajectories()
    model = await family_model(family, "agents")
    client = AsyncOpenAI(base_url=family.backend.openai_base_url, api_key="unused", max_retries=0)
    agent = agents.Agent(
        name="calculator", instructions=SYSTEM, tools=[add], tool_use_behavior="stop_on_first_tool",
        model=agents.OpenAIResponsesModel(model=model.served_name(), openai_client=client),
        model_settings=agents.ModelSettings(tool_choice="add", temperature=1.0, max_tokens=256),
    )  # fmt: skip
    plain = await agents.Runner.run(agent, "What is 2 + 3?", max_turns=2)
    streamed = agents.Runner.run_streamed(agent, "What is 2 + 3?", max_turns=2)  # parses our SSE events
    events = [event.data.type async for event in streamed.stream_events() if event.type == "raw_response_event"]
    assert events[0] == "response.created" and events[-1] == "response.completed", events
    results = [plain, streamed]
    runs = capture.pop_trajectories()
    assert len(runs) == 2, runs
    for run, result in zip(runs, results, strict=True):
        assert run.error is None and [m.role for m in run.messages] == ["system", "user", "assistant"]
        call_turn = run.messages[2]
        assert (call_turn.completion_id or "").startswith("resp_")
        (call,) = call_turn.tool_calls or []
        args = json.loads(call.function.arguments)
        assert call.function.name == "add" and set(args) == {"a", "b"}
        (record,) = run.tool_records
        assert record.name == "add" and record.result == str(result.final_output) == str(args["a"] + args["b"])
        # the turn was prompted as the chat route prompts the captured messages and tools
        token_record = await family.backend.get_token_record(call_turn.completion_id or "")
        chat = await client.chat.completions.create(
            model=family.base_model, messages=run.openai_messages()[:2], max_tokens=1,
            tools=[t.model_dump(exclude_none=True) for t in run.tools or []],
        )  # fmt: skip
        chat_record = await family.backend.get_token_record(chat.id)
        assert token_record["prompt_token_ids"] == chat_record["prompt_token_ids"]
    await client.close()
    await trains_step_1(model, family, runs, 2)
