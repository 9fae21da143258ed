"""The tool-call parser on adversarial model text: malformed calls stay text, never an exception."""

from __future__ import annotations

import json

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
