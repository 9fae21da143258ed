"""Langfuse trace exports (JSON with observations and scores) become trajectories."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import art_adapters as aa
from art_adapters._errors import ConfigError

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two numbers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
            },
        },
    }
]
SYSTEM = {"role": "system", "content": "You are a calculator."}
USER = {"role": "user", "content": "what is 2 + 3"}
CALL = {
    "role": "assistant",
    "content": "",
    "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}
    ],
}
RESULT = {"role": "tool", "content": "5", "tool_call_id": "call_1"}
ANSWER = {"role": "assistant", "content": "The sum is 5."}


def langfuse_trace(trace_id: str = "5f1b2c3d4e5f60718293a4b5c6d7e8f9") -> dict[str, Any]:
    """A trace as Langfuse exports it (GET /api/public/traces/{id}): observations and scores inline."""
    return {
        "id": trace_id,
        "name": "calculator-agent",
        "timestamp": "2026-11-20T10:00:00.000Z",
        "sessionId": "session-7",
        "tags": ["prod"],
        "metadata": {"scenario_id": "add-2-3"},
        "observations": [
            {
                "id": "obs-root",
                "traceId": trace_id,
                "type": "AGENT",
                "name": "LangGraph",
                "startTime": "2026-11-20T10:00:00.000Z",
                "endTime": "2026-11-20T10:00:03.000Z",
                "parentObservationId": None,
                "input": {"messages": [USER]},
                "output": ANSWER,
            },
            {
                "id": "obs-gen1",
                "traceId": trace_id,
                "type": "GENERATION",
                "name": "ChatOpenAI",
                "startTime": "2026-11-20T10:00:00.100Z",
                "endTime": "2026-11-20T10:00:01.000Z",
                "parentObservationId": "obs-root",
                "model": "qwen3-8b",
                "input": {"messages": [SYSTEM, USER], "tools": TOOLS},
                "output": CALL,
                "usageDetails": {"input": 40, "output": 12, "total": 52},
                "metadata": {"completion_id": "chatcmpl-abc"},
            },
            {
                "id": "obs-tool",
                "traceId": trace_id,
                "type": "TOOL",
                "name": "add",
                "startTime": "2026-11-20T10:00:01.100Z",
                "endTime": "2026-11-20T10:00:01.300Z",
                "parentObservationId": "obs-root",
                "input": {"a": 2, "b": 3},
                "output": "5",
                "metadata": {"tool_call_id": "call_1"},
            },
            {
                "id": "obs-mcp",
                "traceId": trace_id,
                "type": "SPAN",
                "name": "tools/call add",
                "startTime": "2026-11-20T10:00:01.150Z",
                "endTime": "2026-11-20T10:00:01.250Z",
                "parentObservationId": "obs-tool",
                "input": {"a": 2, "b": 3},
                "output": "5",
                "metadata": {"mcp.session.id": "sess-9", "mcp.server.name": "calculator"},
            },
            {
                "id": "obs-gen2",
                "traceId": trace_id,
                "type": "GENERATION",
                "name": "ChatOpenAI",
                "startTime": "2026-11-20T10:00:01.400Z",
                "endTime": "2026-11-20T10:00:02.900Z",
                "parentObservationId": "obs-root",
                "model": "qwen3-8b",
                "input": [SYSTEM, USER, CALL, RESULT],
                "output": ANSWER,
                "usage": {"input": 60, "output": 6, "total": 66},
            },
        ],
        "scores": [
            {"name": "reward", "value": 0.75, "comment": "correct, slow", "dataType": "NUMERIC"},
            {"name": "helpfulness", "value": 1, "dataType": "NUMERIC"},
        ],
    }


def test_langfuse_export_becomes_a_trajectory(tmp_path: Path) -> None:
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(langfuse_trace()))
    (trajectory,) = aa.trajectories_from_langfuse(path)
    assert [m.to_openai() for m in trajectory.messages] == [
        SYSTEM,
        USER,
        CALL,
        RESULT | {"name": "add"},
        ANSWER,
    ]
    assert trajectory.messages[2].completion_id == "chatcmpl-abc"
    assert [t.name for t in trajectory.tools] == ["add"]
    (record,) = trajectory.tool_records  # the MCP call inside the tool observation replaces it
    assert (
        record.name,
        record.call_id,
        record.arguments,
        record.result,
        record.source,
        record.session_id,
    ) == ("add", "call_1", {"a": 2, "b": 3}, "5", "mcp", "sess-9")
    assert trajectory.metrics["prompt_tokens"] == 100 and trajectory.metrics["completion_tokens"] == 18
    assert trajectory.reward == 0.75
    assert trajectory.metadata["scores"] == {"reward": 0.75, "helpfulness": 1}
    assert trajectory.metadata["scenario_id"] == "add-2-3"
    assert trajectory.metadata["langfuse_sessionId"] == "session-7"
    assert trajectory.started_at.isoformat().startswith("2026-11-20T10:00:00")


def test_api_list_shape_and_several_traces() -> None:
    page = {"data": [langfuse_trace(), langfuse_trace("0" * 31 + "1")], "meta": {"page": 1}}
    trajectories = aa.trajectories_from_langfuse(page)
    assert len(trajectories) == 2
    assert {t.metadata["langfuse_trace_id"] for t in trajectories} == {
        "5f1b2c3d4e5f60718293a4b5c6d7e8f9",
        "0" * 31 + "1",
    }


def test_bad_langfuse_input_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such Langfuse export file"):
        aa.trajectories_from_langfuse(tmp_path / "missing.json")
    with pytest.raises(ConfigError, match="observations"):
        aa.trajectories_from_langfuse({"id": "t", "name": "no observations"})
    with pytest.raises(ConfigError, match="resourceSpans"):
        aa.trajectories_from_otlp_json({"spans": []})
    with pytest.raises(ConfigError, match="no such OTLP JSON file"):
        aa.trajectories_from_otlp_json(tmp_path / "missing.json")
    lines = tmp_path / "traces.jsonl"
    lines.write_text(json.dumps(langfuse_trace()) + "\n{not json\n")
    with pytest.raises(ConfigError, match=r"traces\.jsonl:2: not JSON"):
        aa.trajectories_from_langfuse(lines)


def test_a_langfuse_export_in_json_lines_and_an_api_page_in_a_file(tmp_path: Path) -> None:
    lines = tmp_path / "traces.jsonl"
    lines.write_text(json.dumps(langfuse_trace()) + "\n\n" + json.dumps(langfuse_trace("0" * 31 + "1")) + "\n")
    page = tmp_path / "page.json"
    page.write_text(json.dumps({"data": [langfuse_trace()], "meta": {"page": 1}}))
    assert len(aa.trajectories_from_langfuse(lines)) == 2
    (trajectory,) = aa.trajectories_from_langfuse(page)
    assert trajectory.reward == 0.75
