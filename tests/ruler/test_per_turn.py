"""RULER per turn (``per_turn=True``) against the scripted judge server on 127.0.0.1: the numbered
turns it is shown, the turn scores it must give (validated, retried), where they land, and a cache
that keeps per-turn and per-trajectory answers apart."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from langchain_openai import ChatOpenAI

import art_adapters as aa
from art_adapters.ruler import RulerCache, RulerConfig, build_request
from art_adapters.ruler._answer import InvalidAnswer, parse_answer
from tests.helpers.judge_server import JudgeServer, request_turns, scores, turn_scores

SYSTEM = "You are a calculator agent. Use the add tool. Marker SYS-51d0."
USER = "What is 2 + 3? Marker USR-8e4b."


def tool_then_answer(arguments: str, result: str, answer: str) -> list[aa.Message]:
    """Two assistant turns: a tool call (turn 1), its result, the final answer (turn 2)."""
    call = aa.ToolCall(id="c1", function={"name": "add", "arguments": arguments})
    return [
        aa.Message(role="assistant", tool_calls=[call]),
        aa.Message(role="tool", tool_call_id="c1", name="add", content=result),
        aa.Message(role="assistant", content=answer),
    ]


def make_group(*endings: list[aa.Message]) -> aa.TrajectoryGroup:
    prefix = [aa.Message(role="system", content=SYSTEM), aa.Message(role="user", content=USER)]
    return aa.TrajectoryGroup(
        trajectories=[aa.Trajectory(messages=[*prefix, *ending]) for ending in endings],
        metadata={"scenario_id": "add-2-3"},
    )


def group_of_three() -> aa.TrajectoryGroup:
    """t1: right call, right answer; t2: a guess, no tool (one turn); t3: right call, wrong answer."""
    return make_group(
        tool_then_answer('{"a": 2, "b": 3}', "5", "The answer is 5."),
        [aa.Message(role="assistant", content="It is 6.")],
        tool_then_answer('{"a": 2, "b": 3}', "5", "The answer is 7."),
    )


def user_text(body: dict[str, Any]) -> str:
    return str(body["messages"][1]["content"])


async def test_turns_are_numbered_and_their_scores_stored_per_trajectory(
    server: JudgeServer, judge: ChatOpenAI, tmp_path: Path
) -> None:
    group = group_of_three()
    answer = turn_scores([("t1", 0.9, [1.0, 0.9]), ("t2", 0.1, [0.1]), ("t3", 0.4, [1, "0.05"])])
    server.reset([{"content": answer}])

    scored = await aa.ruler_score_group(group, judge=judge, cache=tmp_path, per_turn=True)

    (body,) = server.requests
    text = user_text(body)
    # Every assistant turn is numbered inside its trajectory's block; the context holds no turn.
    context = text.split("</context>")[0]
    assert "SYS-51d0" in context and "USR-8e4b" in context and "### assistant" not in context
    assert request_turns(body) == {"t1": 2, "t2": 1, "t3": 2}
    assert text.count("### assistant (turn 1)") == 3 and text.count("### assistant (turn 2)") == 2
    assert "so t1 has 2, t2 has 1, t3 has 2." in text
    assert "Also score each assistant turn" in body["messages"][0]["content"]
    item = body["response_format"]["json_schema"]["schema"]["properties"]["scores"]["items"]
    assert "turn_scores" in item["required"]
    turn_schema = item["properties"]["turn_scores"]
    assert turn_schema["minItems"] == 1 and turn_schema["maxItems"] == 2

    assert scored.rewards == [0.9, 0.1, 0.4]
    assert [t.metadata["turn_rewards"] for t in scored.trajectories] == [[1.0, 0.9], [0.1], [1.0, 0.05]]
    assert all(isinstance(x, float) for t in scored.trajectories for x in t.metadata["turn_rewards"])
    assert scored.metadata["ruler"]["per_turn"] is True and scored.metadata["ruler"]["attempts"] == 1
    assert "(turns: 1.000, 0.050)" in scored.trajectories[2].logs[-1]
    assert "turn_rewards" not in group.trajectories[0].metadata  # the input is not modified


async def test_identical_trajectories_share_one_label_and_its_turn_scores(
    server: JudgeServer, judge: ChatOpenAI
) -> None:
    right = tool_then_answer('{"a": 2, "b": 3}', "5", "5")
    group = make_group(right, [aa.Message(role="assistant", content="6")], right)
    server.reset([{"content": turn_scores([("t1", 1.0, [0.8, 1.0]), ("t2", 0.0, [0.0])])}])

    scored = await aa.ruler_score_group(group, judge=judge, config=RulerConfig(per_turn=True, cache=False))

    assert request_turns(server.requests[0]) == {"t1": 2, "t2": 1}
    assert [t.metadata["turn_rewards"] for t in scored.trajectories] == [[0.8, 1.0], [0.0], [0.8, 1.0]]


async def test_a_wrong_number_of_turn_scores_is_shown_to_the_judge_and_retried(
    server: JudgeServer, judge: ChatOpenAI
) -> None:
    group = group_of_three()
    wrong = turn_scores([("t1", 0.9, [1.0]), ("t2", 0.1, [0.1]), ("t3", 0.4, [1.0, 0.0])])
    right = turn_scores([("t1", 0.9, [1.0, 0.9]), ("t2", 0.1, [0.1]), ("t3", 0.4, [1.0, 0.0])])
    server.reset([{"content": wrong}, {"content": right}])

    scored = await aa.ruler_score_group(group, judge=judge, cache=False, per_turn=True)

    first, second = server.requests
    assert second["messages"][:2] == first["messages"][:2]
    assert second["messages"][2] == {"role": "assistant", "content": wrong}
    feedback = second["messages"][3]["content"]
    assert "turn_scores of t1 has 1 score(s), but t1 has 2 assistant turn(s)" in feedback
    assert "t1: 2 turn(s), t2: 1 turn(s), t3: 2 turn(s)" in feedback
    assert scored.metadata["ruler"]["attempts"] == 2
    assert scored.trajectories[0].metadata["turn_rewards"] == [1.0, 0.9]


@pytest.mark.parametrize(
    ("t1_entry", "reason"),
    [
        ({"turn_scores": [1.0, 1.5]}, "turn 2 of t1 has score 1.5, outside [0, 1]"),
        ({"turn_scores": [1.0, True]}, "turn 2 of t1 must have a number as score, got True"),
        ({"turn_scores": [1.0, "high"]}, "turn 2 of t1 must have a number as score, got 'high'"),
        ({"turn_scores": None}, "t1 needs a turn_scores list with one score per assistant turn (2)"),
        ({}, "t1 needs a turn_scores list"),
        ({"turn_scores": [1.0, 0.5, 0.2]}, "turn_scores of t1 has 3 score(s), but t1 has 2"),
    ],
)
async def test_invalid_turn_scores_fail_clearly_after_the_retries_never_silently(
    server: JudgeServer, judge: ChatOpenAI, t1_entry: dict[str, Any], reason: str
) -> None:
    group = make_group(tool_then_answer("{}", "5", "5"), [aa.Message(role="assistant", content="6")])
    t1 = {"trajectory_id": "t1", "explanation": "x", "score": 0.5, **t1_entry}
    t2 = {"trajectory_id": "t2", "explanation": "y", "score": 0.2, "turn_scores": [0.2]}
    server.reset(default={"content": json.dumps({"scores": [t1, t2]})})

    with pytest.raises(aa.JudgeError) as raised:
        await aa.ruler_score_group(group, judge=judge, cache=False, per_turn=True, max_retries=1)
    assert len(server.requests) == 2 and reason in str(raised.value)
    assert "after 2 attempt(s)" in str(raised.value)

    kept = await aa.ruler_score_group(
        group, judge=judge, cache=False, per_turn=True, max_retries=0, swallow_exceptions=True
    )
    assert kept.metadata["ruler"]["status"] == "unscored" and reason in kept.metadata["ruler"]["reason"]
    assert all(t.reward is None and "turn_rewards" not in t.metadata for t in kept.trajectories)


async def test_the_cache_keeps_per_turn_and_per_trajectory_answers_apart(
    server: JudgeServer, judge: ChatOpenAI, tmp_path: Path
) -> None:
    group = group_of_three()
    plain = scores([("t1", 0.8), ("t2", 0.2), ("t3", 0.3)])
    per_turn = turn_scores([("t1", 0.9, [1.0, 0.9]), ("t2", 0.1, [0.1]), ("t3", 0.4, [1.0, 0.0])])
    server.reset([{"content": plain}, {"content": per_turn}])

    first = await aa.ruler_score_group(group, judge=judge, cache=tmp_path)
    turned = await aa.ruler_score_group(group, judge=judge, cache=tmp_path, per_turn=True)
    assert len(server.requests) == 2  # the per-trajectory answer did not answer the per-turn request
    assert "turn_scores" not in server.raw_bodies[0] and "turn_scores" in server.raw_bodies[1]
    assert first.rewards == [0.8, 0.2, 0.3] and "turn_rewards" not in first.trajectories[0].metadata
    assert [t.metadata["turn_rewards"] for t in turned.trajectories] == [[1.0, 0.9], [0.1], [1.0, 0.0]]

    # Both are cached, each under its own key; asked again, neither calls the judge.
    again_turned = await aa.ruler_score_group(group, judge=judge, cache=tmp_path, per_turn=True)
    again_plain = await aa.ruler_score_group(group, judge=judge, cache=tmp_path)
    assert len(server.requests) == 2
    assert again_turned.metadata["ruler"]["cache_hit"] and again_plain.metadata["ruler"]["cache_hit"]
    assert [t.metadata.get("turn_rewards") for t in again_turned.trajectories] == [
        [1.0, 0.9], [0.1], [1.0, 0.0]
    ]  # fmt: skip
    assert again_plain.rewards == [0.8, 0.2, 0.3]
    assert all("turn_rewards" not in t.metadata for t in again_plain.trajectories)

    plain_key = RulerCache.key("j", build_request(group, "r"))
    turn_key = RulerCache.key("j", build_request(group, "r", per_turn=True))
    assert plain_key != turn_key
    # A per-turn entry whose turn scores no longer fit the request (edited, or another version's) misses.
    cache = RulerCache(tmp_path / "other")
    request = build_request(group, "r", per_turn=True)
    short = parse_answer(per_turn, request.labels, request.turns)
    cache.put(turn_key, "j", short)
    assert cache.get(turn_key, request.labels, request.turns) == short
    assert cache.get(turn_key, request.labels, {**request.turns, "t1": 3}) is None


def test_parse_answer_checks_turn_scores_only_when_asked() -> None:
    entry = {"trajectory_id": "t1", "explanation": "e", "score": 1, "turn_scores": [0, 1]}
    text = json.dumps({"scores": [entry]})
    assert parse_answer(text, ["t1"])["t1"].turn_scores is None  # per trajectory: ignored, as before
    assert parse_answer(text, ["t1"], {"t1": 2})["t1"].turn_scores == [0.0, 1.0]
    with pytest.raises(InvalidAnswer, match="has 2 score"):
        parse_answer(text, ["t1"], {"t1": 1})
    # A trajectory without any assistant turn (it failed at once) gets an empty list.
    empty = json.dumps({"scores": [{**entry, "turn_scores": []}]})
    assert parse_answer(empty, ["t1"], {"t1": 0})["t1"].turn_scores == []


def test_the_per_trajectory_request_has_no_trace_of_turns() -> None:
    group = group_of_three()
    plain = build_request(group, "rubric")
    assert not plain.per_turn and plain.turns == {}
    text = json.dumps(plain.messages) + json.dumps(plain.schema)
    assert "(turn " not in text and "turn_scores" not in text and "Also score each" not in text
    assert plain.prefix_messages == 2
