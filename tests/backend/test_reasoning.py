"""Reasoning parsers (vLLM's qwen3 and deepseek_r1 semantics), whole replies and streamed."""

from __future__ import annotations

import pytest
from art_adapters_backend.serving.reasoning import REASONING_PARSERS, get_reasoning_parser

QWEN3 = REASONING_PARSERS["qwen3"]
R1 = REASONING_PARSERS["deepseek_r1"]
OFF = {"enable_thinking": False}


@pytest.mark.parametrize(
    ("parser", "text", "kwargs", "expected"),
    [
        (QWEN3, "<think>\nplan\n</think>\n\nHello", None, ("\nplan\n", "\n\nHello")),
        (QWEN3, "plan</think>Hello", None, ("plan", "Hello")),  # <think> in the prompt
        (QWEN3, "<think>\nplan\n</think>", None, ("\nplan\n", None)),
        (QWEN3, "<think>\ncut while thinking", None, ("\ncut while thinking", None)),
        (QWEN3, "plain answer", OFF, (None, "plain answer")),
        (QWEN3, "<think>\n\n</think>\n\nanswer", OFF, ("\n\n", "\n\nanswer")),
        (R1, "plain answer", OFF, ("plain answer", None)),
        (R1, "<think>x</think>y", None, ("x", "y")),
    ],
)
def test_split(parser, text, kwargs, expected) -> None:  # type: ignore[no-untyped-def]
    assert parser.split(text, kwargs) == expected


@pytest.mark.parametrize("kwargs", [None, OFF])
@pytest.mark.parametrize(
    "text",
    [
        "<think>\nLet me think about < and </ signs.\n</think>\n\nThe answer is 4.",
        "reasoning only, cut",
        "  <think>a</think>b",
        "<thi",
        "x</think",
    ],
)
@pytest.mark.parametrize("step", [1, 2, 5, 100])
def test_streaming_matches_the_whole_reply(text: str, step: int, kwargs: dict | None) -> None:
    for parser in (QWEN3, R1):
        expected_reasoning, expected_content = parser.split(text, kwargs)
        stream = parser.streaming(kwargs)
        reasoning, content = "", ""
        for i in range(0, len(text), step):
            r, c = stream.feed(text[i : i + step])
            reasoning, content = reasoning + r, content + c
        r, c = stream.finish()
        reasoning, content = reasoning + r, content + c
        if expected_reasoning is not None and expected_content is not None:
            assert (reasoning, content) == (expected_reasoning, expected_content)
        else:  # one side is None: the stream carries everything on the other (leading <think> dropped)
            assert (reasoning or None, content or None) == (expected_reasoning or None, expected_content or None)


def test_lookup() -> None:
    assert get_reasoning_parser(None) is None and get_reasoning_parser("qwen3") is QWEN3
    with pytest.raises(KeyError):
        get_reasoning_parser("nope")
