"""Trajectory records: lossless JSON round trip, JSONL files, OpenAI message shape."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from art_adapters import (
    Message,
    RolloutFailure,
    ToolCallRecord,
    Trajectory,
    TrajectoryGroup,
    load_groups,
    save_groups,
)


def _trajectory() -> Trajectory:
    return Trajectory.model_validate(
        {
            "messages": [
                {"role": "system", "content": "You add numbers."},
                {"role": "user", "content": [{"type": "text", "text": "2+3?"}]},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}
                    ],
                    "completion_id": "chatcmpl-abc",
                },
                {"role": "tool", "tool_call_id": "call_1", "content": "5"},
                {"role": "assistant", "content": "5", "completion_id": "chatcmpl-def", "reasoning": "kept"},
            ],
            "tools": [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}],
            "additional_histories": [{"messages": [{"role": "user", "content": "summarise"}]}],
            "tool_records": [{"name": "add", "call_id": "call_1", "arguments": {"a": 2, "b": 3}, "result": "5"}],
            "reward": 0.75,
            "metrics": {"tool_calls": 1, "correct": True},
            "metadata": {"scenario_id": "s1", "nested": {"k": [1, 2]}},
            "logs": ["note"],
        }
    )


def test_json_round_trip_is_lossless() -> None:
    original = _trajectory()
    restored = Trajectory.model_validate_json(original.model_dump_json())
    assert restored == original
    assert restored.messages[4].model_extra == {"reasoning": "kept"}
    assert restored.messages[2].completion_id == "chatcmpl-abc"


def test_openai_messages_drop_link_fields_and_keep_tool_calls() -> None:
    messages = _trajectory().openai_messages()
    assert "completion_id" not in json.dumps(messages)
    assert messages[2]["content"] is None
    assert messages[2]["tool_calls"][0]["function"]["name"] == "add"
    assert messages[3] == {"role": "tool", "tool_call_id": "call_1", "content": "5"}


def test_unscored_reward_is_none_not_zero() -> None:
    assert Trajectory().reward is None
    assert TrajectoryGroup(trajectories=[Trajectory(), _trajectory()]).rewards == [None, 0.75]


def test_invalid_role_is_rejected() -> None:
    with pytest.raises(ValueError, match="role"):
        Message.model_validate({"role": "robot", "content": "hi"})


def test_groups_jsonl_round_trip_with_exceptions(tmp_path: Path) -> None:
    try:
        raise RuntimeError("tool server crashed")
    except RuntimeError as exc:
        failure = RolloutFailure.from_exception(exc, scenario_id="s1", rollout_index=3)
    groups = [
        TrajectoryGroup(trajectories=[_trajectory()], exceptions=[failure], metadata={"scenario_id": "s1"}),
        TrajectoryGroup(trajectories=[Trajectory(tool_records=[ToolCallRecord(name="x", source="mcp")])]),
    ]
    path = save_groups(tmp_path / "sub" / "groups.jsonl", groups)
    assert len(path.read_text().splitlines()) == 2
    assert load_groups(path) == groups
    assert failure.type == "builtins.RuntimeError"
    assert "tool server crashed" in failure.traceback

    save_groups(path, groups[:1], append=True)
    assert len(load_groups(path)) == 3


def test_malformed_jsonl_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "groups.jsonl"
    path.write_text(TrajectoryGroup().model_dump_json() + "\n{not json\n")
    with pytest.raises(ValueError, match=r"groups\.jsonl:2"):
        load_groups(path)
