"""TrajectoryRecorder and the shared assembly, without LangChain: run trees, ordering, MCP records, histories."""

from __future__ import annotations

import json
import threading

import pytest

from art_adapters._capture.assembly import ModelCall, assemble, conversations
from art_adapters._capture.recorder import TrajectoryRecorder
from art_adapters._errors import ConfigError
from art_adapters._trajectory import FunctionCall, Message, ToolCall, ToolCallRecord, Trajectory


def add_turns(a: int, b: int, call_id: str) -> tuple[Message, Message, Message, Message]:
    """"add a and b": the user's question, the assistant's ``add`` call, the tool's result, the answer."""
    arguments = json.dumps({"a": a, "b": b})
    call = Message(
        role="assistant",
        content="",
        tool_calls=[ToolCall(id=call_id, function=FunctionCall(name="add", arguments=arguments))],
    )
    question = Message(role="user", content=f"add {a} and {b}")
    result = Message(role="tool", content=str(a + b), tool_call_id=call_id)
    return question, call, result, Message(role="assistant", content=str(a + b))


SYSTEM = Message(role="system", content="be brief")
USER, CALL, RESULT, FINAL = add_turns(1, 2, "c1")


def answered(message: Message, completion_id: str) -> Message:
    return message.model_copy(update={"completion_id": completion_id})


def one_run(recorder: TrajectoryRecorder, root: str, *, fail: bool = False) -> None:
    """graph -> agent node -> model; tools node -> tool; agent node -> model."""
    recorder.start_run(root, None, name="graph", metadata={"scenario": root, "obj": object()})
    recorder.start_run(f"{root}/agent", root)
    recorder.start_model_call(f"{root}/m1", f"{root}/agent", [SYSTEM, USER])
    recorder.end_model_call(
        f"{root}/m1", answered(CALL, f"chatcmpl-{root}1"), usage={"prompt_tokens": 5, "completion_tokens": 2}
    )
    recorder.end_run(f"{root}/agent")
    recorder.start_tool(f"{root}/t1", root, name="add", arguments={"a": 1, "b": 2}, call_id="c1")
    recorder.end_tool(f"{root}/t1", result="3")
    recorder.start_model_call(f"{root}/m2", root, [SYSTEM, USER, CALL, RESULT])
    if fail:
        recorder.end_model_call(f"{root}/m2", None, error="RuntimeError: model down")
        recorder.end_run(root, error="RuntimeError: model down")
        return
    recorder.end_model_call(
        f"{root}/m2", answered(FINAL, f"chatcmpl-{root}2"), usage={"prompt_tokens": 9, "completion_tokens": 1}
    )
    recorder.end_run(root)


def test_a_root_run_becomes_one_trajectory_with_ids_usage_and_records() -> None:
    recorder = TrajectoryRecorder()
    one_run(recorder, "r")
    trajectory = recorder.trajectory
    assert trajectory is not None and recorder.active_runs == 0
    assert [m.role for m in trajectory.messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert [m.completion_id for m in trajectory.messages] == [None, None, "chatcmpl-r1", None, "chatcmpl-r2"]
    assert trajectory.metrics == {
        "prompt_tokens": 14,
        "completion_tokens": 3,
        "model_calls": 2,
        "tool_calls": 1,
    }
    assert [(r.name, r.call_id, r.result, r.is_error) for r in trajectory.tool_records] == [
        ("add", "c1", "3", False)
    ]
    assert trajectory.tool_records[0].duration_s is not None
    assert (
        trajectory.metadata["scenario"] == "r" and "obj" not in trajectory.metadata
    )  # only JSON scalars kept
    assert trajectory.additional_histories == [] and trajectory.error is None


def test_a_failed_root_keeps_what_happened_and_the_error() -> None:
    recorder = TrajectoryRecorder()
    one_run(recorder, "r", fail=True)
    trajectory = recorder.trajectory
    assert trajectory is not None
    assert trajectory.error == "RuntimeError: model down"
    assert [m.role for m in trajectory.messages] == ["system", "user", "assistant", "tool"]
    assert trajectory.logs == ["model call failed: RuntimeError: model down"]


def test_interleaved_roots_never_mix() -> None:
    recorder = TrajectoryRecorder()
    recorder.start_run("a", None)
    recorder.start_run("b", None)
    recorder.start_model_call("a/m", "a", [Message(role="user", content="from a")])
    recorder.start_model_call("b/m", "b", [Message(role="user", content="from b")])
    recorder.end_model_call("b/m", Message(role="assistant", content="to b"))
    recorder.end_model_call("a/m", Message(role="assistant", content="to a"))
    recorder.end_run("b")
    assert recorder.active_runs == 1
    recorder.end_run("a")
    assert [t.messages[0].content for t in recorder.trajectories] == ["from b", "from a"]
    assert [t.messages[1].content for t in recorder.trajectories] == ["to b", "to a"]


def test_threads_recording_many_roots_at_once() -> None:
    recorder = TrajectoryRecorder()
    threads = [threading.Thread(target=one_run, args=(recorder, f"r{i}")) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    trajectories = recorder.trajectories
    assert len(trajectories) == 16
    for trajectory in trajectories:
        root = trajectory.metadata["run_id"]
        assert [m.completion_id for m in trajectory.messages][2::2] == [
            f"chatcmpl-{root}1",
            f"chatcmpl-{root}2",
        ]


def test_an_mcp_record_replaces_its_tool_runs_record_and_keeps_the_call_id() -> None:
    recorder = TrajectoryRecorder()
    recorder.start_run("r", None)
    recorder.start_tool("t1", "r", name="add", arguments={"a": 1}, call_id="c1")
    recorder.start_tool("t2", "r", name="lookup", arguments="x", call_id="c2")
    mcp = ToolCallRecord(
        name="add", arguments={"a": 1}, result="1", server="calc", session_id="s1", source="mcp"
    )
    recorder.add_tool_record("t1", mcp)
    recorder.end_tool("t1", result="1")  # LangChain's own end must not overwrite the MCP record
    recorder.end_tool("t2", error="KeyError: 'x'")
    recorder.add_tool_record("r", ToolCallRecord(name="direct", source="mcp"))  # outside a tool run: appended
    recorder.add_tool_record("unknown", ToolCallRecord(name="lost", source="mcp"))  # no run: dropped
    recorder.end_run("r")
    records = recorder.trajectory.tool_records
    assert [(r.name, r.call_id, r.source, r.server) for r in records] == [
        ("add", "c1", "mcp", "calc"),
        ("lookup", "c2", "langchain", None),
        ("direct", None, "mcp", None),
    ]
    assert records[1].is_error and records[1].error == "KeyError: 'x'" and records[1].result is None


def test_unknown_parents_and_repeated_events_do_not_break_recording() -> None:
    recorder = TrajectoryRecorder()
    recorder.start_model_call("m", "parent-never-seen", [USER])  # becomes its own root
    recorder.end_model_call("m", FINAL)
    recorder.end_run("m")  # already ended: ignored
    recorder.end_tool("nothing")
    recorder.end_model_call("nothing", FINAL)
    assert len(recorder.trajectories) == 1
    assert recorder.trajectory.openai_messages() == [USER.to_openai(), FINAL.to_openai()]


def test_on_trajectory_is_called_and_its_errors_are_contained(caplog: pytest.LogCaptureFixture) -> None:
    seen = []

    def callback(trajectory):
        seen.append(trajectory.id)
        raise RuntimeError("callback bug")

    recorder = TrajectoryRecorder(on_trajectory=callback, max_finished=2)
    for index in range(3):
        one_run(recorder, f"r{index}")
    assert len(seen) == 3
    assert [t.id for t in recorder.trajectories] == seen[1:]  # capped at 2, oldest dropped
    assert "on_trajectory callback raised" in caplog.text
    assert len(recorder.pop_trajectories()) == 2 and recorder.trajectories == []


@pytest.mark.parametrize("bad", [{"on_trajectory": 3}, {"max_finished": 0}, {"max_finished": True}])
def test_bad_options_are_config_errors(bad: dict) -> None:
    with pytest.raises(ConfigError):
        TrajectoryRecorder(**bad)


def test_divergent_histories_are_kept_and_the_longest_is_messages() -> None:
    summary_prompt = [
        Message(role="system", content="summarise"),
        Message(role="user", content="the chat so far"),
    ]
    calls = [
        ModelCall(messages=[SYSTEM, USER], output=answered(CALL, "chatcmpl-1")),
        ModelCall(messages=summary_prompt, output=Message(role="assistant", content="a summary")),
        ModelCall(messages=[SYSTEM, USER, CALL, RESULT], output=FINAL),
        ModelCall(messages=[SYSTEM, USER], output=CALL),  # a repeat of a prefix: no new history
    ]
    histories = conversations(calls)
    assert len(histories) == 2
    trajectory = assemble(calls, [])
    assert len(trajectory.messages) == 5 and trajectory.messages[2].completion_id == "chatcmpl-1"
    assert [h.messages[-1].content for h in trajectory.additional_histories] == ["a summary"]
    assert trajectory.metrics["model_calls"] == 4


def test_an_mcp_record_from_the_tool_node_is_matched_by_tool_call_id() -> None:
    recorder = TrajectoryRecorder()
    recorder.start_run("r", None)
    recorder.start_run("tools", "r")
    recorder.start_tool("t1", "tools", name="add", arguments={"a": 1}, call_id="c1")
    recorder.start_tool("t2", "tools", name="add", arguments={"a": 2}, call_id="c2")
    recorder.add_tool_record("tools", ToolCallRecord(name="add", call_id="c2", result="2", source="mcp"))
    recorder.end_tool("t1", result="1")
    recorder.end_tool("t2", result="2")
    recorder.end_run("tools")
    recorder.end_run("r")
    assert [(r.call_id, r.source) for r in recorder.trajectory.tool_records] == [
        ("c1", "langchain"),
        ("c2", "mcp"),
    ]


def test_assistant_turns_are_marked_generated_only_when_a_call_of_the_run_produced_them() -> None:
    few_shot = [SYSTEM, *add_turns(2, 2, "ex1")]

    def fresh(messages: list[Message]) -> list[Message]:  # each call's input converted anew, as capture does
        return [m.model_copy(deep=True) for m in messages]

    calls = [
        ModelCall(messages=fresh([*few_shot, USER]), output=answered(CALL, "chatcmpl-1")),
        ModelCall(messages=fresh([*few_shot, USER, CALL, RESULT]), output=FINAL.model_copy()),
    ]
    trajectory = assemble(calls, [])
    assert [(m.content, m.generated) for m in trajectory.messages if m.role == "assistant"] == [
        ("", False),  # the example's tool call, only ever input
        ("4", False),
        ("", True),  # the run's own tool call
        ("3", True),
    ]
    # a divergent history that quotes the run's output: still generated, matched by content
    summary = ModelCall(
        messages=[Message(role="system", content="summarise"), *fresh([CALL])],
        output=Message(role="assistant", content="a summary"),
    )
    trajectory = assemble([*calls, summary], [])
    assert [m.generated for m in trajectory.additional_histories[0].messages if m.role == "assistant"] == [
        True,
        True,
    ]
    # an earlier call without a recorded output might have produced a later input-only turn: unknown
    lost = ModelCall(messages=fresh([*few_shot, USER]), error="TimeoutError")
    later = ModelCall(messages=fresh([*few_shot, USER, CALL, RESULT]), output=FINAL.model_copy())
    marks = [m.generated for m in assemble([lost, later], []).messages if m.role == "assistant"]
    assert marks == [False, False, None, True]  # the few-shot turns came before the lost call: still prompt


def test_the_generated_marker_round_trips_and_old_json_without_it_loads_as_unknown() -> None:
    marked = Message(role="assistant", content="hi", generated=False)
    assert Message.model_validate_json(marked.model_dump_json()).generated is False
    assert "generated" not in marked.to_openai() and "completion_id" not in marked.to_openai()
    old = Trajectory.model_validate_json(
        '{"id": "traj-old", "messages": [{"role": "user", "content": "q"},'
        ' {"role": "assistant", "content": "a", "completion_id": "chatcmpl-9", "choice_index": 0}]}'
    )
    assert [m.generated for m in old.messages] == [None, None]
    assert Trajectory.model_validate_json(old.model_dump_json()) == old
