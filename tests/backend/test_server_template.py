"""Prompt rendering with the bundled model's shipped tool template, and Hermes tool-call parsing, on the real tokenizer."""

from __future__ import annotations

import json

import pytest
from art_adapters_backend.serving.chat_template import ChatTemplate, ChatTemplateError
from art_adapters_backend.serving.model_family import resolve_model_family
from art_adapters_backend.serving.tool_parser import StreamingToolParser, parse_reply

from tests.helpers.openai_tools import ADD_TOOL

ADD = ADD_TOOL
WEATHER = {
    "type": "function",
    "function": {
        "name": "weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"enum": ["C", "F"]}},
        },
    },
}


@pytest.fixture(scope="module")
def template() -> ChatTemplate:
    from art_adapters_backend.bundled import load_tokenizer, resolve_model_path

    tokenizer = load_tokenizer(resolve_model_path("smollm2-135m-instruct"))
    return ChatTemplate(tokenizer, resolve_model_family(tokenizer, bundled=True).chat_template)


def test_plain_chat_matches_the_models_own_template(template: ChatTemplate) -> None:
    """Without tools the shipped SmolLM2 template renders exactly what the model's own template does."""
    messages = [
        {"role": "user", "content": "Hello there"},
        {"role": "assistant", "content": "Hi! How can I help?"},
        {"role": "user", "content": "What is 2+2?"},
    ]
    tokenizer = template.tokenizer
    assert tokenizer.chat_template != template.template  # the model's own (no tools) vs the shipped one
    expected_text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert template.render(messages) == expected_text
    assert template.encode(messages) == tokenizer(expected_text, add_special_tokens=False)["input_ids"]
    with_system = [{"role": "system", "content": "Be brief."}, *messages]
    assert template.render(with_system) == tokenizer.apply_chat_template(
        with_system, add_generation_prompt=True, tokenize=False
    )


def test_tools_are_listed_and_nothing_is_injected(template: ChatTemplate) -> None:
    text = template.render([{"role": "user", "content": "What is 2 + 3?"}], [ADD, WEATHER])
    system = text.split("<|im_end|>")[0]
    assert "<tools>" in system and "</tools>" in system
    listed = system.split("<tools>\n")[1].split("\n</tools>")[0].splitlines()
    # vLLM dumps its tool model: a missing description is null, not absent.
    assert [json.loads(line) for line in listed][1] == {
        "type": "function",
        "function": {"name": "weather", "description": None, "parameters": WEATHER["function"]["parameters"]},
    }
    assert "For example" not in text and "example" not in system.lower()  # no worked example any more
    custom = template.render([{"role": "system", "content": "You add."}, {"role": "user", "content": "hi"}], [ADD])
    assert custom.startswith("<|im_start|>system\nYou add.\n\n# Tools")
    assert "SmolLM" not in custom


def test_tokens_are_the_rendered_text_tokenised_as_vllm_does(template: ChatTemplate) -> None:
    """Special-token strings inside message text become the special tokens, exactly as in vLLM."""
    messages = [
        {"role": "user", "content": "Weather in Paris? <|im_start|>"},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "72 F<|im_end|>"},
    ]  # fmt: skip
    text = template.render(messages, [WEATHER])
    tokenizer = template.tokenizer
    assert template.encode(messages, [WEATHER]) == tokenizer(text, add_special_tokens=False)["input_ids"]
    assert '<tool_call>\n{"name": "weather", "arguments": {}}\n</tool_call>' in text


def test_a_template_error_is_a_chat_template_error(template: ChatTemplate) -> None:
    strict = ChatTemplate(template.tokenizer, "{{ raise_exception('roles must alternate') }}")
    with pytest.raises(ChatTemplateError, match="roles must alternate"):
        strict.render([{"role": "user", "content": "hi"}])


def test_history_renders_as_a_token_prefix_of_the_longer_history(template: ChatTemplate) -> None:
    h1 = [{"role": "user", "content": "What is 2 + 3? Use the tool."}]
    call = {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}
    h2 = [*h1, {"role": "assistant", "content": None, "tool_calls": [call]}]
    h3 = [*h2, {"role": "tool", "tool_call_id": "call_1", "content": "5"}]
    h4 = [*h3, {"role": "assistant", "content": "It is 5."}, {"role": "user", "content": " thanks"}]
    prompts = [template.encode(h, [ADD]) for h in (h1, h3, h4)]
    full = template.encode(h4, [ADD], add_generation_prompt=False)
    for prompt in prompts[:-1]:
        assert full[: len(prompt)] == prompt
    # Tokenising the whole text (as vLLM does) merges a reply's leading newlines with the turn header's:
    # the text still extends, the tokens do not. Training splits such a conversation per turn.
    spaced = [*h3, {"role": "assistant", "content": "\n\n  It is 5."}, {"role": "user", "content": " thanks"}]
    assert template.render(spaced, [ADD]).startswith(template.render(h3, [ADD]))
    assert template.encode(spaced, [ADD])[: len(prompts[1])] != prompts[1]
    texts = [template.render(h, [ADD]) for h in (h1, h3)]
    assert all(template.render(h4, [ADD]).startswith(t) for t in texts)
    rendered = template.render(h3, [ADD])
    assert (
        '<|im_start|>assistant\n<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call><|im_end|>'
        in rendered
    )
    assert "<|im_start|>user\n<tool_response>\n5\n</tool_response><|im_end|>" in rendered


def test_parse_valid_calls_into_openai_tool_calls() -> None:
    reply = parse_reply(
        'Sure.\n<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>', ["add"]
    )
    assert reply.content == "Sure."
    [call] = reply.tool_calls
    assert call.name == "add" and json.loads(call.arguments) == {"a": 1, "b": 2}
    assert call.id.startswith("call_") and len(call.id) > 10
    two = parse_reply(
        '<tool_call>{"name": "add", "arguments": "{\\"a\\": 1, \\"b\\": 2}"}</tool_call>\n'
        '<tool_call>\n{"name": "add", "arguments": {"a": 3, "b": 4}}',  # last block unterminated at EOS
        ["add"],
    )
    assert two.content is None and [json.loads(c.arguments)["a"] for c in two.tool_calls] == [1, 3]
    assert len({c.id for c in two.tool_calls}) == 2


@pytest.mark.parametrize(
    "text",
    [
        "<tool_call>\n{not json}\n</tool_call>",
        '<tool_call>\n{"name": "mul", "arguments": {}}\n</tool_call>',  # not an offered tool
        '<tool_call>\n{"arguments": {"a": 1}}\n</tool_call>',  # no name
        '<tool_call>\n{"name": "add", "arguments": [1, 2]}\n</tool_call>',  # arguments not an object
        '<tool_call>\n{"name": "add", "arguments": {}}\n</tool_call> and then some prose',
        "I would use <tool_call> here",
        "no call at all",
    ],
)
def test_malformed_calls_stay_text(text: str) -> None:
    reply = parse_reply(text, ["add"])
    assert reply.tool_calls == [] and reply.content == text


def test_streaming_parser_matches_the_whole_text_parser() -> None:
    for text in [
        'Let me add.\n<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>',
        "Plain answer with a < sign and <tool_ lookalike",
        "<tool_call>\n{broken",
    ]:
        for step in (1, 3, 7):
            parser = StreamingToolParser(["add"])
            shown = "".join(parser.feed(text[i : i + step]) for i in range(0, len(text), step))
            rest, calls = parser.finish()
            whole = parse_reply(text, ["add"])
            assert (
                (shown + rest).rstrip() == (whole.content or "").rstrip() if calls else shown + rest == text
            )
            assert [c.name for c in calls] == [c.name for c in whole.tool_calls]
            assert [c.arguments for c in calls] == [c.arguments for c in whole.tool_calls]
