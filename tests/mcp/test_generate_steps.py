"""generate_scenarios' steps one by one, without a model: describe the tools, fit the request, ask for a
batch (and survive what goes wrong), check and keep items, stop. The scripted writer stands in where a call
is made."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage, SystemMessage

import mcp_tools
from art_adapters import ConfigError
from mcp_tools._generate import (
    SYSTEM_PROMPT,
    ScenarioGenerationError,
    _ask_batch,
    _generator,
    _keep,
    _Run,
    _tool_specs,
)
from mcp_tools._generate_prompt import Prompt, describe_tools
from tests.helpers.scripted_generator import ScriptedGenerator

TOOLS = [
    {"name": "search_notes", "description": "Find notes.", "inputSchema": {"type": "object"}},
    {"type": "function", "function": {"name": "create_note", "parameters": {"type": "object"}}},
]


def prompt(context_tokens: int | None = None, **fields: Any) -> Prompt:
    settings = {
        "tools_text": describe_tools(TOOLS), "tool_count": 2, "resources": (), "instructions": None,
        "context_tokens": context_tokens, "max_task_chars": 300, "task_pattern": None, **fields,
    }  # fmt: skip
    return Prompt(**settings)


def new_run(n: int = 3, *, batch: int = 10, max_retries: int = 1, **kwargs: Any) -> _Run:
    existing, saved, target = kwargs.get("existing", ()), kwargs.get("saved", []), kwargs.get("target")
    return _Run.start(n, batch, max_retries, existing, list(saved), target)


def item(task: str, difficulty: int = 1) -> dict[str, Any]:
    return {"task": task, "difficulty": difficulty}


# describe the tools


async def test_tool_specs_read_every_tool_form_and_refuse_none() -> None:
    specs, resources = await _tool_specs(TOOLS, None)
    assert [s["name"] for s in specs] == ["search_notes", "create_note"] and resources is None
    with pytest.raises(ConfigError, match="no tools to write scenarios for"):
        await _tool_specs([], None)
    with pytest.raises(ConfigError, match="model must be a LangChain chat model, got int"):
        _generator(3)  # type: ignore[arg-type]


# fit the request


def test_the_request_names_the_count_the_written_tasks_and_the_rejected_ones() -> None:
    written = [mcp_tools.Scenario(task="Find the note about my Lisbon hotel", difficulty=1)]
    messages, trimmed = prompt().request(None, 2, written, [("Use search_notes for cats", "names a tool")])
    system, human = messages
    assert isinstance(system, SystemMessage) and system.content == SYSTEM_PROMPT
    assert isinstance(human, HumanMessage)
    assert "Write 2 new tasks (difficulties: 2, 3)" in human.content and trimmed == 0
    assert "- Find the note about my Lisbon hotel" in human.content
    assert "- Use search_notes for cats (names a tool)" in human.content
    schema = prompt(task_pattern="^[A-Z].*$").schema(2)["properties"]["scenarios"]
    assert schema["minItems"] == schema["maxItems"] == 2 and schema["items"]["properties"]["task"]["pattern"]


def test_tools_that_alone_overflow_the_context_are_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"the 2 tool descriptions alone need about \d+ tokens .* 300"):
        prompt(context_tokens=300).request(None, 1, [], [])


# ask for a batch


async def test_a_batch_is_the_answers_items_or_none_with_the_reason_counted() -> None:
    run = new_run()
    run.next_call()
    good = ScriptedGenerator(script=[json.dumps({"scenarios": [item("Find my notes about the trip")]})])
    schema = prompt().schema(1)
    assert await _ask_batch(good, [HumanMessage("x")], schema, run, structured=False, timeout_s=None) == [
        item("Find my notes about the trip")
    ]
    failing = ScriptedGenerator(script=["no json here", RuntimeError("HTTP 503")])
    for reason in ("malformed answer", "endpoint error"):
        assert await _ask_batch(failing, [], schema, run, structured=False, timeout_s=None) is None
        assert run.rejected[reason] == 1
    assert run.last_error == "call 1: RuntimeError: HTTP 503"


async def test_a_slow_call_times_out_and_a_cut_answer_shrinks_the_batch() -> None:
    class Slow(ScriptedGenerator):
        async def _agenerate(self, *args: Any, **kwargs: Any) -> Any:
            await asyncio.sleep(5)

    run = new_run(n=8, batch=8)
    run.next_call()
    slow = Slow(script=[])
    assert await _ask_batch(slow, [], prompt().schema(8), run, structured=False, timeout_s=0.05) is None
    assert run.rejected["timeout"] == 1 and run.last_error == "call 1: no answer within 0.05s"
    two = json.dumps({"scenarios": [item("Find the trip notes"), item("List my notes on birds")]})[:-2]
    cut = ScriptedGenerator(script=[("cut", two + ', {"task": "Half a ta')])
    items = await _ask_batch(cut, [], prompt().schema(8), run, structured=False, timeout_s=None)
    assert items is not None and len(items) == 2 and run.batch == 2  # the complete items count; ask for 2


async def test_a_context_overflow_from_the_endpoint_ends_the_run_with_what_it_kept() -> None:
    run = new_run(n=2, saved=[mcp_tools.Scenario(task="Find the trip notes please", difficulty=1)])
    run.next_call()
    class ContextLengthExceeded(Exception):
        code = "context_length_exceeded"  # as openai.BadRequestError carries it

    overflow = ScriptedGenerator(script=[ContextLengthExceeded("maximum context length is 512 tokens")])
    with pytest.raises(ScenarioGenerationError, match="does not fit the generator's context") as caught:
        await _ask_batch(overflow, [], prompt().schema(1), run, structured=False, timeout_s=None)
    assert len(caught.value.scenarios) == 1


# check and keep items


def test_keep_accepts_valid_new_items_saves_them_and_says_why_others_are_rejected(tmp_path: Path) -> None:
    target = tmp_path / "scenarios.jsonl"
    existing = [mcp_tools.Scenario(task="Find the note about my Lisbon hotel", difficulty=1)]
    run = new_run(n=2, existing=existing, target=target)
    run.next_call()
    seen: list[str] = []
    items = [
        item("find the note about my lisbon hotel"), "not an object", item("Use search_notes to find cats"),
        item("Add a reminder to call the plumber", 7), item("Add a reminder to call the plumber", 2),
        item("Add a reminder to call the plumber!", 3), item("List every note tagged work"),
        item("One too many for n"),
    ]  # fmt: skip
    _keep(items, run, ["search_notes", "create_note"], prompt(), lambda s: seen.append(s.task))
    assert [s.task for s in run.accepted] == seen
    assert seen == ["Add a reminder to call the plumber", "List every note tagged work"]
    assert run.rejected == {"duplicate": 2, "malformed item": 1, "names a tool": 1, "bad difficulty": 1}
    assert ("Use search_notes to find cats", "names a tool") in run.bad_tasks  # shown in the next prompt
    assert [s.task for s in mcp_tools.load_scenarios(target)] == seen and run.done and run.added == 2


# stop rules


def test_a_run_stops_with_n_kept_or_after_max_retries_calls_that_kept_nothing() -> None:
    run = new_run(n=2, batch=5, max_retries=1)
    assert run.going and run.next_call() == 2
    run.accept(mcp_tools.Scenario(task="Find the trip notes please", difficulty=1))
    run.end_call()  # kept one: progress, no retry used
    assert run.going and run.empty_calls == 0 and run.next_call() == 1
    run.end_call()
    assert run.going and run.empty_calls == 1  # one empty call: the one retry allowed is still ahead
    run.next_call()
    run.end_call()
    assert not run.going and not run.done
    error = run.failure("advice")
    assert "wrote 1 of 2 valid distinct scenarios in 3 call(s)" in str(error)
    assert str(error).endswith("advice.")
    full = new_run(n=1, saved=[mcp_tools.Scenario(task="Find the trip notes please", difficulty=1)])
    assert full.done and not full.going  # a saved file that already holds n: no call at all
