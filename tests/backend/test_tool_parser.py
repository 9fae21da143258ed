"""The tool-call parser on adversarial model text: malformed calls stay text, never an exception."""

from __future__ import annotations

import json
import time

import pytest
from art_adapters_backend.serving.tool_parser import StreamingToolParser, parse_reply

DEEP = "[" * 5_000  # a degenerate sample: deeper than Python's recursion limit

ADVERSARIAL = [
    "<tool_call>" + DEEP,
    '<tool_call>{"name": "add", "arguments": ' + DEEP + "]" * 5_000 + "}</tool_call>",
    '<tool_call>{"name": "add", "arguments": "' + DEEP + '"}</tool_call>',
    '<tool_call>{"name": "add", "arguments": {"a": NaN}}</tool_call>',
    '<tool_call>{"name": "add", "arguments": {"a": Infinity}}</tool_call>',
    '<tool_call>{"name": "add", "arguments": {"a": 1e999}}</tool_call>',
]


@pytest.mark.parametrize(
    "text", ADVERSARIAL, ids=["deep", "deep args", "deep args string", "nan", "inf", "1e999"]
)
def test_malformed_call_stays_text(text: str) -> None:
    parsed = parse_reply(text, ["add"])
    assert parsed.tool_calls == []
    assert parsed.content == text
    stream = StreamingToolParser(["add"])
    shown = stream.feed(text)
    rest, calls = stream.finish()
    assert calls == []
    assert shown + rest == text


def test_parsed_arguments_are_strict_json() -> None:
    parsed = parse_reply(
        '<tool_call>{"name": "add", "arguments": {"a": 1.5, "b": [1, {"c": null}]}}</tool_call>'
    )
    assert [call.name for call in parsed.tool_calls] == ["add"]
    assert json.loads(parsed.tool_calls[0].arguments, parse_constant=lambda c: pytest.fail(c)) == {
        "a": 1.5,
        "b": [1, {"c": None}],
    }


def test_a_long_whitespace_run_inside_a_call_parses_in_linear_time() -> None:
    # A degenerate sample (8k tokens of spaces or newlines) used to take ~10 s of regex
    # backtracking on the event loop, stalling every other request.
    text = '<tool_call>\n{"name": "add", "arguments": {' + " " * 40_000 + '"a": 1}}\n</tool_call>'
    started = time.perf_counter()
    parsed = parse_reply(text, ["add"])
    assert time.perf_counter() - started < 1.0
    assert [json.loads(call.arguments) for call in parsed.tool_calls] == [{"a": 1}]


@pytest.mark.parametrize(
    ("text", "content", "calls"),
    [
        ("<tool_call>\n{}\n</tool_call>", "<tool_call>\n{}\n</tool_call>", 0),
        ('Sure.\n<tool_call>\n{"name": "add", "arguments": {"a": 1}}\n</tool_call>\n', "Sure.", 1),
        ('<tool_call>{"name": "add"}</tool_call>  <tool_call>{"name": "add", "arguments": "{}"}', None, 2),
        ('<tool_call>{"name": "add"}</tool_call> and <tool_call>{"name": "add"}</tool_call>', "same", 0),
        ('<tool_call>\n{"name": "add", "arguments": {}}\n', None, 1),
        ('<tool_call>{"name": "add"}</tool_call></tool_call>', "same", 0),
        ("<tool_call><tool_call>{}</tool_call>", "same", 0),
    ],
)
def test_block_splitting(text: str, content: str | None, calls: int) -> None:
    parsed = parse_reply(text, ["add"])
    assert (parsed.content, len(parsed.tool_calls)) == (text if content == "same" else content, calls)


# --------------------------------------------------------------------------- llama3_json

from art_adapters_backend.serving.tool_parser import TOOL_CALL_PARSERS, get_tool_parser  # noqa: E402

LLAMA = TOOL_CALL_PARSERS["llama3_json"]


def test_llama3_json_calls_parse_with_parameters_or_arguments() -> None:
    reply = LLAMA.parse('{"name": "add", "parameters": {"a": 1, "b": 2}}', ["add"])
    assert reply.content is None and [(c.name, json.loads(c.arguments)) for c in reply.tool_calls] == [
        ("add", {"a": 1, "b": 2})
    ]
    two = LLAMA.parse('<|python_tag|>{"name": "add", "arguments": {"a": 1}}; {"name": "add", "parameters": {}}', None)
    assert [json.loads(c.arguments) for c in two.tool_calls] == [{"a": 1}, {}]


@pytest.mark.parametrize(
    "text",
    [
        "The answer is 3.",
        '{"name": "mul", "parameters": {}}',  # not offered
        '{"name": "add", "parameters": {"a": 1}} and more',
        '{"name": "add", "parameters": [1]}',
        '{"name": "add", "parameters": {"a": 1}',  # cut
        'Sure: {"name": "add", "parameters": {}}',  # prose first: Llama 3 calls are the whole reply
    ],
)
def test_llama3_json_non_calls_stay_text(text: str) -> None:
    reply = LLAMA.parse(text, ["add"])
    assert reply.tool_calls == [] and reply.content == text


@pytest.mark.parametrize(
    "text",
    ['{"name": "add", "parameters": {"a": 1}}', "Plain text answer.", "  <|python", "{broken"],
)
@pytest.mark.parametrize("step", [1, 4, 50])
def test_llama3_json_streaming_matches_the_whole_reply(text: str, step: int) -> None:
    stream = LLAMA.streaming(["add"])
    shown = "".join(stream.feed(text[i : i + step]) for i in range(0, len(text), step))
    rest, calls = stream.finish()
    whole = LLAMA.parse(text, ["add"])
    assert [c.arguments for c in calls] == [c.arguments for c in whole.tool_calls]
    assert (shown + rest) == ("" if calls else text)


def test_forced_call_schemas_follow_each_familys_syntax() -> None:
    hermes = get_tool_parser("hermes")
    assert hermes is not None and (hermes.call_prefix, hermes.call_suffix) == ("<tool_call>\n", "\n</tool_call>")
    assert list(hermes.call_schema("add", {"type": "object"})["properties"]) == ["name", "arguments"]
    assert (LLAMA.call_prefix, LLAMA.call_suffix) == ("", "")
    assert list(LLAMA.call_schema("add", {"type": "object"})["properties"]) == ["name", "parameters"]
