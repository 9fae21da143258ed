"""The tool-grounded reward of train-mcp: what counts as a failed call, what the reward adds up, how
``--reward`` picks the scorer, and the bounded schemas of the forced first call."""

from __future__ import annotations

import pydantic
import pytest

import art_adapters as aa
import mcp_tools
from art_adapters.apps._forced_call import bound_schema
from art_adapters.apps._mcp_reward import resolve_reward
from art_adapters.apps._train_mcp import TrainMcpConfig
from mcp_tools._tools import is_error_result
from tests.helpers.plain_error_server import command as plain_error_server


def _call(tool: str, call_id: str = "c1", **arguments: object) -> aa.ToolCall:
    return aa.ToolCall.model_validate(
        {"id": call_id, "type": "function", "function": {"name": tool, "arguments": str(arguments)}}
    )


def _trajectory(*, first_call: bool, records: list[aa.ToolCallRecord], answer: str | None) -> aa.Trajectory:
    messages = [
        aa.Message(role="system", content="You are a helpful assistant with tools."),
        aa.Message(role="user", content="Which books came out after 2019?"),
    ]
    if first_call:
        messages.append(aa.Message(role="assistant", content=None, tool_calls=[_call("read_query")]))
        messages += [aa.Message(role="tool", tool_call_id="c1", content=r.result or r.error) for r in records]
    else:  # a forced call cut by the token limit: the raw text, no parsed call
        messages.append(aa.Message(role="assistant", content='<tool_call>\n{"name": "read_query", "arguments": {"q'))
    if answer is not None:
        messages.append(aa.Message(role="assistant", content=answer))
    return aa.Trajectory(messages=messages, tool_records=records)


OK = aa.ToolCallRecord(name="read_query", result="Piranesi, 2020\nKlara and the Sun, 2021", source="mcp")
FAILED = aa.ToolCallRecord(name="read_query", result="Database error: no such table: movies", is_error=True)


@pytest.mark.parametrize(
    ("first_call", "records", "answer", "parts"),
    [
        (True, [OK], "Piranesi (2020) and Klara and the Sun.", (1.0, 1.0, 1.0)),
        (True, [OK], "I could not find any books.", (1.0, 1.0, 0.0)),  # the answer ignores the result
        (True, [OK, FAILED], "Piranesi.", (1.0, 0.5, 1.0)),
        (True, [FAILED], "There was a database error with the books.", (1.0, 0.0, 0.0)),  # no result to use
        (True, [OK], None, (1.0, 1.0, 0.0)),  # no final answer (the turns ran out)
        (False, [], "Which books came out after 2019?", (0.0, 0.0, 0.0)),  # the task is no tool result
    ],
)
def test_the_tool_reward_adds_up_what_the_tools_did(
    first_call: bool, records: list[aa.ToolCallRecord], answer: str | None, parts: tuple[float, float, float]
) -> None:
    trajectory = _trajectory(first_call=first_call, records=records, answer=answer)
    reward = aa.tool_use_reward(trajectory)
    names = ("first_call_parsed", "tool_calls_ok", "answer_grounded")
    assert tuple(trajectory.metrics[name] for name in names) == parts
    assert reward == pytest.approx(0.2 * parts[0] + 0.5 * parts[1] + 0.3 * parts[2])


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("Database error: no such table: movies", True),  # mcp-server-sqlite's plain-text failure
        ("Error executing tool read_query: bad SQL", True),
        ("ValueError: invalid literal for int()", True),
        ("Traceback (most recent call last):\n  File ...", True),
        ("Errors found: 0", False),
        ("The error handler note says: retry twice", False),  # mentions an error, is none
        ("Piranesi, 2020", False),
    ],
)
def test_a_plain_text_error_result_is_an_error(text: str, error: bool) -> None:
    assert is_error_result({"content": [{"type": "text", "text": text}]}) is error
    assert is_error_result({"content": [{"type": "text", "text": "fine"}], "isError": True})


async def test_a_server_that_answers_failures_as_plain_text_gets_error_tool_messages() -> None:
    (tool,) = await mcp_tools.load_tools(plain_error_server())
    async with mcp_tools.rollout():
        good = await tool.ainvoke(
            {"args": {"query": "SELECT title FROM books WHERE year > 2019"}, "id": "a", "name": tool.name,
             "type": "tool_call"}  # fmt: skip
        )
        bad = await tool.ainvoke(
            {"args": {"query": "SELECT * FROM movies"}, "id": "b", "name": tool.name, "type": "tool_call"}
        )
    assert (good.status, good.content) == ("success", "Piranesi\nKlara and the Sun")
    assert (bad.status, bad.content) == ("error", "Database error: no such table: movies")


def test_the_reward_defaults_to_judge_and_tools_with_the_local_judge() -> None:
    assert resolve_reward(None, local_judge=True) == "judge+tools"
    assert resolve_reward(None, local_judge=False) == "judge"
    assert resolve_reward("tools", local_judge=False) == "tools"
    assert TrainMcpConfig(server="x", reward="judge").reward == "judge"
    with pytest.raises(pydantic.ValidationError, match="reward"):
        TrainMcpConfig(server="x", reward="vibes")  # type: ignore[arg-type]


def test_cwd_is_for_stdio_servers() -> None:
    with pytest.raises(pydantic.ValidationError, match="--cwd sets a stdio server's working directory"):
        TrainMcpConfig(server="http://127.0.0.1:8123/mcp", cwd="/tmp")


def test_the_forced_calls_schema_bounds_open_strings_and_arrays_only() -> None:
    schema = {
        "type": "object",
        "properties": {
            "title": {"type": "string"},
            "code": {"type": "string", "maxLength": 8},
            "body": {"type": "string", "minLength": 100},
            "kind": {"type": "string", "enum": ["a", "b"]},
            "tags": {"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}]},
            "pair": {"type": "array", "minItems": 5, "items": {"$ref": "#/$defs/Item"}},
        },
        "$defs": {"Item": {"type": "object", "properties": {"type": {"type": ["string", "null"]}}}},
    }
    bounded = bound_schema(schema, max_chars=48, max_items=3)
    props = bounded["properties"]
    assert props["title"]["maxLength"] == 48 and props["code"]["maxLength"] == 8
    assert props["body"]["maxLength"] == 100  # never below its own minimum
    assert "maxLength" not in props["kind"]
    assert props["tags"]["anyOf"][0] == {"type": "array", "items": {"type": "string", "maxLength": 48}, "maxItems": 3}
    assert props["pair"]["maxItems"] == 5
    assert bounded["$defs"]["Item"]["properties"]["type"]["maxLength"] == 48  # a property named "type"
    assert "maxLength" not in schema["properties"]["title"]  # the tool's own schema is untouched


async def test_judge_and_tools_falls_back_to_the_tools_for_a_group_the_judge_cannot_score() -> None:
    from langchain_openai import ChatOpenAI

    from art_adapters.apps._mcp_reward import make_scorer
    from tests.helpers.third_party import free_port

    judge = ChatOpenAI(base_url=f"http://127.0.0.1:{free_port()}/v1", api_key="k", model="gone", max_retries=0)
    group = aa.TrajectoryGroup(
        trajectories=[_trajectory(first_call=True, records=[OK], answer="Piranesi (2020)."),
                      _trajectory(first_call=True, records=[FAILED], answer="No idea.")]
    )  # fmt: skip
    (scored,) = await make_scorer("judge+tools", judge, {"cache": False, "max_retries": 0})([group], [None])
    assert [t.reward for t in scored.trajectories] == pytest.approx([1.0, 0.2])  # the tools' reward alone
    assert scored.metadata["reward_fallback"].startswith("tools only: the judge did not score it (")
