"""The tool-call parser on adversarial model text: malformed calls stay text, never an exception."""

from __future__ import annotations

import json
import time

import pytest
from art_adapters_backend.tool_parser import StreamingToolParser, parse_reply

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
