"""RULER against a scripted OpenAI-compatible judge server on 127.0.0.1: what it receives, retries, cache."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from langchain_openai import ChatOpenAI

import art_adapters as aa
from art_adapters._errors import ConfigError
from art_adapters.ruler import LiteLLMJudge, RulerCache
from tests.helpers.judge_server import JudgeServer, request_ids, scores

SYSTEM = "You are a calculator agent. Use the add tool. Marker SYS-7f3a."
USER = "What is 2 + 3? Marker USR-91c2."


def answer(text: str, *, tool: bool = False) -> list[aa.Message]:
    """An assistant ending: optionally a tool call and its result first."""
    turns: list[aa.Message] = []
    if tool:
        call = aa.ToolCall(id="c1", function={"name": "add", "arguments": '{"a": 2, "b": 3}'})
        turns += [
            aa.Message(role="assistant", tool_calls=[call]),
            aa.Message(role="tool", tool_call_id="c1", name="add", content="5"),
        ]
    return [*turns, aa.Message(role="assistant", content=text)]


def make_group(*endings: list[aa.Message], rewards: list[float | None] | None = None) -> aa.TrajectoryGroup:
    prefix = [aa.Message(role="system", content=SYSTEM), aa.Message(role="user", content=USER)]
    rewards = rewards or [None] * len(endings)
    return aa.TrajectoryGroup(
        trajectories=[
            aa.Trajectory(messages=[*prefix, *e], reward=r) for e, r in zip(endings, rewards, strict=True)
        ],
        metadata={"scenario_id": "add-2-3"},
    )


def user_text(body: dict[str, Any]) -> str:
    return "\n".join(str(m["content"]) for m in body["messages"])


async def test_scores_applied_prefix_sent_once_identical_sent_once(
    server: JudgeServer, judge: ChatOpenAI, tmp_path: Path
) -> None:
    group = make_group(
        answer("The answer is 5.", tool=True),
        answer("It is 6."),
        answer("The answer is 5.", tool=True),
        rewards=[1.0, 0.0, 1.0],
    )
    server.reset([{"content": scores([("t1", 0.9), ("t2", 0.1)], "judged")}])

    scored = await aa.ruler_score_group(group, judge=judge, cache=tmp_path)

    (body,) = server.requests
    raw = server.raw_bodies[0]
    # The shared system/user prefix reached the judge exactly once; three trajectories, two distinct.
    assert raw.count("SYS-7f3a") == 1 and raw.count("USR-91c2") == 1
    assert raw.count("The answer is 5.") == 1
    assert user_text(body).count('<trajectory id="') == 2
    schema = body["response_format"]["json_schema"]["schema"]
    assert body["response_format"]["type"] == "json_schema"
    assert schema["properties"]["scores"]["items"]["properties"]["trajectory_id"]["enum"] == ["t1", "t2"]
    assert schema["properties"]["scores"]["minItems"] == 2

    assert scored.rewards == [0.9, 0.1, 0.9]  # identical trajectories share the score
    first = scored.trajectories[0]
    assert first.metrics == {"independent_reward": 1.0, "ruler_score": 0.9}
    assert first.metadata["ruler_explanation"] == "judged t1" and first.metadata["ruler_label"] == "t1"
    assert any("judged t1" in line for line in first.logs)
    assert scored.metadata["ruler"]["status"] == "scored"
    assert scored.metadata["ruler"]["distinct_trajectories"] == 2
    assert scored.metadata["ruler"]["shared_prefix_messages"] == 2
    assert scored.metadata["ruler"]["judge"].startswith("ChatOpenAI:scripted-judge@http://127.0.0.1:")
    assert group.rewards == [1.0, 0.0, 1.0] and group.trajectories[0].metrics == {}  # input untouched


async def test_every_bad_answer_is_retried_until_a_good_one(
    server: JudgeServer, judge: ChatOpenAI, tmp_path: Path
) -> None:
    good = scores([("t1", 1.0), ("t2", 0.0)])
    server.reset(
        [
            {"content": "{'scores': not json"},
            {"content": scores([("t1", 1.5), ("t2", 0.0)])},
            {"content": scores([("t1", 1.0), ("t9", 0.0)])},
            {"content": scores([("t1", 1.0), ("t1", 0.5)])},
            {"content": scores([("t1", 1.0)])},
            {"sleep": 2.0, "content": good},
            {"status": 500},
            {"content": good},
        ]
    )
    group = make_group(answer("5"), answer("6"))
    scored = await aa.ruler_score_group(
        group, judge=judge, judge_timeout_s=0.5, max_retries=7, cache=tmp_path
    )

    assert len(server.requests) == 8
    assert scored.rewards == [1.0, 0.0]
    assert scored.metadata["ruler"]["attempts"] == 8
    # After an invalid answer the judge is shown it and told what was wrong.
    feedback = [body["messages"][-1]["content"] for body in server.requests[1:6]]
    assert "not valid JSON" in feedback[0]
    assert "outside [0, 1]" in feedback[1]
    assert "unknown trajectory_id 't9'" in feedback[2]
    assert "more than once" in feedback[3]
    assert "no score for trajectory id(s) t2" in feedback[4]
    assert server.requests[1]["messages"][-2] == {"role": "assistant", "content": "{'scores': not json"}


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        ({"content": "I think t1 is better."}, "not valid JSON"),
        ({"content": scores([("t1", -0.2), ("t2", 0.3)])}, "outside [0, 1]"),
        ({"content": scores([("t1", 0.2), ("t3", 0.3)])}, "unknown trajectory_id"),
        ({"content": scores([("t2", 0.2), ("t2", 0.3)])}, "more than once"),
        ({"content": json.dumps({"scores": [{"trajectory_id": "t1", "score": "high"}]})}, "must be a number"),
        ({"sleep": 1.0, "content": "{}"}, "no answer within judge_timeout_s=0.3"),
    ],
)
async def test_retries_exhausted_raise_a_judge_error_naming_the_group(
    server: JudgeServer, judge: ChatOpenAI, tmp_path: Path, entry: dict[str, Any], reason: str
) -> None:
    server.reset([entry, entry], default=entry)
    group = make_group(answer("5"), answer("6"))
    with pytest.raises(aa.JudgeError) as info:
        await aa.ruler_score_group(group, judge=judge, judge_timeout_s=0.3, max_retries=1, cache=tmp_path)
    message = str(info.value)
    assert group.id in message and "scenario add-2-3" in message and "after 2 attempt(s)" in message
    assert reason in message
    assert len(server.requests) == 2


async def test_swallow_exceptions_returns_the_group_unscored(
    server: JudgeServer, judge: ChatOpenAI, tmp_path: Path
) -> None:
    server.reset(default={"content": "no"})
    group = make_group(answer("5"), answer("6"), rewards=[0.5, 0.25])
    result = await aa.ruler_score_group(
        group, judge=judge, max_retries=0, swallow_exceptions=True, cache=tmp_path
    )
    assert result.metadata["ruler"]["status"] == "unscored"
    assert "not valid JSON" in result.metadata["ruler"]["reason"]
    assert result.rewards == [0.5, 0.25]  # untouched, not silently zeroed
    assert all("ruler_score" not in t.metrics for t in result.trajectories)


async def test_rescoring_hits_the_cache_and_sends_nothing(
    server: JudgeServer, judge: ChatOpenAI, tmp_path: Path
) -> None:
    group = make_group(answer("5"), answer("6"))
    first = await aa.ruler_score_group(group, judge=judge, cache=tmp_path)
    assert len(server.requests) == 1 and first.metadata["ruler"]["cache_hit"] is False

    again = await aa.ruler_score_group(make_group(answer("5"), answer("6")), judge=judge, cache=tmp_path)
    assert len(server.requests) == 1  # no new judge call
    assert again.metadata["ruler"]["cache_hit"] is True
    assert again.rewards == first.rewards == [1.0, 0.5]
    assert again.trajectories[1].metadata["ruler_explanation"] == "because t2"

    # A different rubric, judge or content misses.
    await aa.ruler_score_group(group, judge=judge, rubric="Shorter answers are better.", cache=tmp_path)
    other = ChatOpenAI(base_url=server.url, api_key="test", model="other-judge", max_retries=0)
    await aa.ruler_score_group(group, judge=other, cache=tmp_path)
    await aa.ruler_score_group(make_group(answer("5"), answer("7")), judge=judge, cache=tmp_path)
    assert len(server.requests) == 4

    # A corrupted entry is ignored and rewritten.
    for path in tmp_path.rglob("*.json"):
        path.write_text("{broken")
    await aa.ruler_score_group(group, judge=judge, cache=tmp_path)
    assert len(server.requests) == 5
    await aa.ruler_score_group(group, judge=judge, cache=tmp_path)
    assert len(server.requests) == 5


async def test_score_groups_concurrently_in_order_failed_group_marked(
    server: JudgeServer, judge: ChatOpenAI, tmp_path: Path
) -> None:
    def by_content(body: dict[str, Any]) -> dict[str, Any]:
        if "BROKEN" in user_text(body):
            return {"content": "garbage"}
        # Score by the answer's number so each group's result identifies it.
        ids = request_ids(body)
        return {"content": scores([(label, 0.1 * len(ids)) for label in ids])}

    server.reset(default=by_content)
    groups = [
        make_group(answer("5"), answer("6")),
        make_group(answer("BROKEN"), answer("6")),
        make_group(answer("5"), answer("6"), answer("7")),
        aa.TrajectoryGroup(exceptions=[aa.RolloutFailure(type="ValueError", message="boom")]),
    ]
    results = await aa.ruler_score_groups(
        groups, judge=judge, max_concurrency=2, max_retries=0, swallow_exceptions=True, cache=tmp_path
    )
    assert [r.id for r in results] == [g.id for g in groups]
    assert [r.metadata["ruler"]["status"] for r in results] == ["scored", "unscored", "scored", "unscored"]
    assert results[0].rewards == [pytest.approx(0.2)] * 2
    assert results[2].rewards == [pytest.approx(0.3)] * 3
    assert "no trajectories to score" in results[3].metadata["ruler"]["reason"]
    assert len(server.requests) == 3

    with pytest.raises(aa.JudgeError, match=groups[1].id):
        await aa.ruler_score_groups(groups[:2], judge=judge, max_retries=0, cache=False)


async def test_plain_json_mode_parses_fenced_answers(server: JudgeServer, judge: ChatOpenAI) -> None:
    server.reset([{"content": "```json\n" + scores([("t1", 0.25), ("t2", 0.75)]) + "\n```"}])
    scored = await aa.ruler_score_group(
        make_group(answer("5"), answer("6")), judge=judge, structured="none", cache=False
    )
    assert "response_format" not in server.requests[0]
    assert "exactly one entry for each of these trajectory ids: t1, t2" in user_text(server.requests[0])
    assert scored.rewards == [0.25, 0.75]


async def test_custom_rubric_reaches_the_judge(server: JudgeServer, judge: ChatOpenAI) -> None:
    await aa.ruler_score_group(
        make_group(answer("5"), answer("6")), judge=judge, rubric="Prefer answers in French.", cache=False
    )
    system = server.requests[0]["messages"][0]
    assert system["role"] == "system" and "Prefer answers in French." in system["content"]
    assert "must score clearly higher" not in system["content"]  # the default rubric is replaced


async def test_combine_rewards(server: JudgeServer, judge: ChatOpenAI) -> None:
    server.reset([{"content": scores([("t1", 1.0), ("t2", 0.0)])}])
    group = make_group(answer("5"), answer("6"), rewards=[0.0, 1.0])
    scored = await aa.ruler_score_group(
        group, judge=judge, reward_weights={"ruler_score": 3, "independent_reward": 1}, cache=False
    )
    assert scored.rewards == [0.75, 0.25]
    assert scored.metadata["reward_weights"] == {"ruler_score": 3, "independent_reward": 1}

    unrewarded = await aa.ruler_score_group(make_group(answer("5"), answer("6")), judge=judge, cache=False)
    with pytest.raises(ConfigError, match="has no metric 'independent_reward'"):
        aa.combine_rewards(unrewarded, {"ruler_score": 1, "independent_reward": 1})
    with pytest.raises(ConfigError, match="sum to 0"):
        aa.combine_rewards(scored, {"ruler_score": 0})
    with pytest.raises(ConfigError, match=">= 0"):
        aa.combine_rewards(scored, {"ruler_score": -1})


async def test_bad_judge_arguments() -> None:
    group = make_group(answer("5"))
    with pytest.raises(ConfigError, match="needs a judge"):
        await aa.ruler_score_group(group)
    with pytest.raises(ConfigError, match="LangChain chat model or a litellm"):
        await aa.ruler_score_group(group, judge=42)
    with pytest.raises(ImportError, match=r"pip install 'art-adapters\[litellm\]'"):
        await aa.ruler_score_group(group, judge="openai/gpt-4.1-mini")
    with pytest.raises(ConfigError, match="rubric"):
        await aa.ruler_score_group(group, judge=ChatOpenAI(api_key="x"), rubric="  ")


def test_ruler_cache_key_depends_on_judge_rubric_and_content() -> None:
    from art_adapters.ruler import build_request

    group = make_group(answer("5"), answer("6"))
    base = RulerCache.key("judge-a", build_request(group, "rubric"))
    assert base == RulerCache.key("judge-a", build_request(group.model_copy(deep=True), "rubric"))
    assert base != RulerCache.key("judge-b", build_request(group, "rubric"))
    assert base != RulerCache.key("judge-a", build_request(group, "other rubric"))
    assert base != RulerCache.key("judge-a", build_request(make_group(answer("5"), answer("7")), "rubric"))


async def test_litellm_model_string_calls_acompletion_with_the_schema(
    server: JudgeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # litellm itself downgrades openai, so it is not installed here: a stand-in module with
    # litellm's acompletion signature forwards to the scripted server over real HTTP.
    import types

    from openai import AsyncOpenAI

    received: list[dict[str, Any]] = []

    async def acompletion(*, model: str, messages: list[dict[str, str]], **kwargs: Any) -> Any:
        received.append({"model": model, **kwargs})
        client = AsyncOpenAI(base_url=kwargs["api_base"], api_key="test")
        return await client.chat.completions.create(
            model=model, messages=messages, response_format=kwargs["response_format"]
        )

    monkeypatch.setitem(sys.modules, "litellm", types.SimpleNamespace(acompletion=acompletion))
    judge = LiteLLMJudge("hosted_vllm/judge", api_base=server.url)
    scored = await aa.ruler_score_group(make_group(answer("5"), answer("6")), judge=judge, cache=False)
    assert scored.rewards == [1.0, 0.5]
    assert scored.metadata["ruler"]["judge"] == f"litellm:hosted_vllm/judge@{server.url}"
    assert received[0]["response_format"]["json_schema"]["name"] == "ruler_scores"
    assert server.requests[0]["response_format"]["type"] == "json_schema"


async def test_judge_raising_its_own_timeout_without_a_deadline_is_retried_then_reported() -> None:
    from langchain_core.language_models import BaseChatModel

    class Stalling(BaseChatModel):
        calls: int = 0

        @property
        def _llm_type(self) -> str:
            return "stalling"

        def _generate(self, *args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            raise TimeoutError("upstream gave up")

    judge = Stalling()
    with pytest.raises(aa.JudgeError, match="TimeoutError: upstream gave up"):
        await aa.ruler_score_group(
            make_group(answer("5")), judge=judge, judge_timeout_s=None, max_retries=1, cache=False
        )
    assert judge.calls == 2
