"""generate_scenarios with a scripted generator: too few, duplicate and malformed answers -> retries, then
exactly n or a clear error. The server side is real (the bundled notes server over stdio)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatResult
from pydantic import Field

import mcp_tools
from art_adapters._errors import ConfigError
from mcp_tools import ScenarioGenerationError, generate_scenarios, normalize_task
from mcp_tools.servers import server_command
from tests.helpers.scripted_generator import ScriptedGenerator

NOTES_TOOLS = [
    {
        "name": "search_notes",
        "description": "Find notes containing words.",
        "inputSchema": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
    },
    {
        "name": "create_note",
        "description": "Create a note.",
        "inputSchema": {
            "type": "object",
            "properties": {"title": {"type": "string"}, "body": {"type": "string"}},
        },
    },
]


def answer(*items: Any) -> str:
    return json.dumps(
        {"scenarios": [i if not isinstance(i, tuple) else {"task": i[0], "difficulty": i[1]} for i in items]}
    )


async def test_too_few_then_the_missing_ones_are_asked_for() -> None:
    model = ScriptedGenerator(
        script=[
            answer(
                ("Find the note about my Lisbon hotel booking", 1), ("Add a reminder to call the plumber", 2)
            ),
            answer(("Summarise what we decided in the Q3 planning meeting", 3)),
        ],
        prompts=[],
    )
    scenarios = await generate_scenarios(NOTES_TOOLS, n=3, model=model)
    assert [s.difficulty for s in scenarios] == [1, 2, 3]
    assert len({s.id for s in scenarios}) == 3
    assert "Write 3 new tasks (difficulties: 1, 2, 3)" in model.prompts[0]
    # the retry asks for exactly the missing one and shows what is already written
    assert "Write 1 new task (difficulties: 3)." in model.prompts[1]  # the level still missing
    assert "- Find the note about my Lisbon hotel booking" in model.prompts[1]
    assert "search_notes(query: string)" in model.prompts[0]  # tools are described...
    assert "Never name a tool" in model.prompts[0]  # ...and must not be named


async def test_duplicates_malformed_items_and_answers_are_dropped_and_retried() -> None:
    model = ScriptedGenerator(
        script=[
            "this is not JSON at all",
            answer(
                ("Find my Lisbon hotel booking number", 2),
                ("find my lisbon hotel booking number!", 2),  # duplicate once normalised
                {"task": "What did Priya and I discuss last time?"},  # no difficulty
                ("Which notes are tagged with work right now?", 9),  # difficulty out of range
                ("Use search_notes to find the pancake recipe", 1),  # names a tool
                "just a string",  # not an object
                ("ok", 1),  # too short
            ),
            "```json\n" + answer(("What did Priya and I discuss at our last one-on-one?", 2)) + "\n```",
            answer(("FIND MY LISBON HOTEL BOOKING NUMBER", 1), ("Which of my notes mention the car?", 3)),
        ],
        prompts=[],
    )
    scenarios = await generate_scenarios(NOTES_TOOLS, n=3, model=model, max_retries=3)
    assert [s.task for s in scenarios] == [
        "Find my Lisbon hotel booking number",
        "What did Priya and I discuss at our last one-on-one?",
        "Which of my notes mention the car?",
    ]
    assert len(model.prompts) == 4
    assert len({normalize_task(s.task) for s in scenarios}) == 3


async def test_more_than_asked_is_cut_to_exactly_n_in_one_call() -> None:
    model = ScriptedGenerator(
        script=[
            answer(*[(f"Look up the note about topic {w}", 2) for w in ("alpha", "beta", "gamma", "delta")])
        ],
        prompts=[],
    )
    scenarios = await generate_scenarios(NOTES_TOOLS, n=2, model=model)
    assert [s.task for s in scenarios] == [
        "Look up the note about topic alpha",
        "Look up the note about topic beta",
    ]


async def test_an_answer_cut_short_keeps_its_complete_items() -> None:
    cut = answer(("Find the note about my Lisbon hotel booking", 1), ("What is on my grocery list?", 1))[:-30]
    model = ScriptedGenerator(script=[cut, answer(("What is on my grocery list this week?", 1))], prompts=[])
    scenarios = await generate_scenarios(NOTES_TOOLS, n=2, model=model)
    assert [s.task for s in scenarios] == [
        "Find the note about my Lisbon hotel booking",
        "What is on my grocery list this week?",
    ]
    assert "Write 1 new task (" in model.prompts[1]


async def test_existing_scenarios_are_shown_and_never_repeated() -> None:
    have = [mcp_tools.Scenario(task="Find my Lisbon hotel booking number", difficulty=1)]
    model = ScriptedGenerator(
        script=[answer(("find my Lisbon hotel booking number", 2), ("Which notes mention the car?", 2))],
        prompts=[],
    )
    scenarios = await generate_scenarios(NOTES_TOOLS, n=1, model=model, existing=have)
    assert [s.task for s in scenarios] == ["Which notes mention the car?"]
    assert "- Find my Lisbon hotel booking number" in model.prompts[0]
    assert "(difficulties: 2)" in model.prompts[0]  # level 1 is already covered


async def test_garbage_is_not_a_task_and_a_pattern_is_enforced_and_sent() -> None:
    model = ScriptedGenerator(
        script=[
            answer(("2.2.0.1.13, 4", 1), ("baedaaaahh aaa", 1), ("Find: my Lisbon hotel note", 2)),
            answer(("Find my Lisbon hotel note", 2)),
        ],
        prompts=[],
    )
    scenarios = await generate_scenarios(
        NOTES_TOOLS, n=1, model=model, task_pattern=mcp_tools.PLAIN_TASK_PATTERN, max_retries=1
    )
    assert [s.task for s in scenarios] == ["Find my Lisbon hotel note"]  # the colon broke the pattern
    schema = mcp_tools._generate.answer_schema(1, task_pattern=mcp_tools.PLAIN_TASK_PATTERN)
    assert (
        schema["properties"]["scenarios"]["items"]["properties"]["task"]["pattern"]
        == mcp_tools.PLAIN_TASK_PATTERN
    )
    with pytest.raises(ConfigError, match="task_pattern is not a valid regular expression"):
        await generate_scenarios(NOTES_TOOLS, n=1, model=model, task_pattern="([")


async def test_endpoint_errors_are_retried_like_bad_answers() -> None:
    model = ScriptedGenerator(
        script=[ConnectionError("endpoint down"), answer(("Find the note about my Lisbon hotel booking", 1))],
        prompts=[],
    )
    assert len(await generate_scenarios(NOTES_TOOLS, n=1, model=model, max_retries=1)) == 1


async def test_a_generator_that_never_gets_there_is_a_clear_error() -> None:
    same = answer(("Find my Lisbon hotel booking number", 2), ("Call search_notes(query) for pancakes", 1))
    model = ScriptedGenerator(script=[same, same, "{oops", same], prompts=[])
    with pytest.raises(ScenarioGenerationError) as info:
        await generate_scenarios(NOTES_TOOLS, n=3, model=model, max_retries=2)  # call 1 keeps one: no retry used
    message = str(info.value)
    assert "wrote 1 of 3 valid distinct scenarios in 4 call(s)" in message
    assert "2 duplicate" in message  # calls 2 and 4 repeat the accepted task
    assert "3 names a tool" in message and "1 malformed answer" in message
    assert "max_retries" in message  # says what to do
    assert not model.script  # every allowed call was made, no more


async def test_batches_split_large_requests() -> None:
    model = ScriptedGenerator(
        script=[
            answer(*[(f"Look up the note about topic {i} please", 1) for i in range(2)]),
            answer(*[(f"Look up the note about topic {i} please", 1) for i in range(2, 4)]),
            answer((f"Look up the note about topic {4} please", 1)),
        ],
        prompts=[],
    )
    assert len(await generate_scenarios(NOTES_TOOLS, n=5, model=model, batch_size=2, max_retries=0)) == 5
    assert ["Write 2 new tasks" in p for p in model.prompts] == [True, True, False]


async def test_a_server_is_listed_with_its_tools_and_resources() -> None:
    model = ScriptedGenerator(
        script=[answer(("What is the confirmation code of my Lisbon hotel?", 2))], prompts=[]
    )
    scenarios = await generate_scenarios(server_command("notes"), n=1, model=model)
    assert len(scenarios) == 1
    prompt = model.prompts[0]
    assert "read_note(note_id: integer)" in prompt and "create_note(" in prompt
    assert "notes-index" in prompt and "#3 Lisbon trip [travel,personal]" in prompt  # the resource's text


async def test_a_server_over_http_is_listed_too(notes_url: str) -> None:
    model = ScriptedGenerator(script=[answer(("Which of my notes are about the car?", 2))], prompts=[])
    assert len(await generate_scenarios(notes_url, n=1, model=model)) == 1
    assert "search_notes(query: string, limit: integer (optional))" in model.prompts[0]
    assert "#8 Car maintenance [personal,errands]" in model.prompts[0]


async def test_tools_from_load_tools_are_described() -> None:
    tools = await mcp_tools.load_tools(server_command("calculator"))
    text = mcp_tools.describe_tools(tools)
    assert "- add(a: number, b: number):" in text and "- sqrt(x: number):" in text


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n": 0}, "n must be an int >= 1"),
        ({"batch_size": 0}, "batch_size must be an int >= 1"),
        ({"max_retries": -1}, "max_retries must be an int >= 0"),
        ({"max_task_chars": 5}, "max_task_chars must be in"),
    ],
)
async def test_bad_arguments_are_config_errors(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        await generate_scenarios(NOTES_TOOLS, model=ScriptedGenerator(script=[], prompts=[]), **kwargs)


async def test_without_a_model_or_configured_judge_it_says_what_to_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ART_ADAPTERS_JUDGE_MODEL", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)  # alone it names gpt-4o-mini (judge_from_env)
    with pytest.raises(ConfigError, match=r"pass model=.*ART_ADAPTERS_JUDGE_MODEL"):
        await generate_scenarios(NOTES_TOOLS, n=1)
    with pytest.raises(ConfigError, match="no tools"):
        await generate_scenarios([], n=1, model=ScriptedGenerator(script=[], prompts=[]))


async def test_the_configured_judge_is_the_default_generator(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ART_ADAPTERS_JUDGE_MODEL", "judge-x")
    monkeypatch.setenv("ART_ADAPTERS_JUDGE_BASE_URL", "http://127.0.0.1:9/v1")
    generator = mcp_tools._generate.default_generator()
    assert generator.model_name == "judge-x"
    assert str(generator.openai_api_base).startswith("http://127.0.0.1:9")


class SeededGenerator(ScriptedGenerator):
    """A scripted generator with a ``seed`` field, like ``ChatOpenAI``; records the seed of each call."""

    seed: int | None = None
    seeds: list[int | None] = Field(default_factory=list)

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        self.seeds.append(self.seed)
        return super()._generate(messages, stop, run_manager, **kwargs)


@pytest.mark.parametrize(("seed", "expected"), [(7, [7, 8, 9]), (None, [None, None, None])])
async def test_a_seeded_generator_samples_each_retry_with_the_next_seed(
    seed: int | None, expected: list[int | None]
) -> None:
    # the same tasks again: with one seed and an unchanged prompt a seeded sampler would repeat itself
    same = answer(("Find the note about my Lisbon hotel booking", 1))
    model = SeededGenerator(script=[same, same, answer(("Add a reminder to call the plumber", 2))], seed=seed)
    scenarios = await generate_scenarios(NOTES_TOOLS, n=2, model=model, max_retries=2)
    assert len(scenarios) == 2
    assert model.seeds == expected  # (copies share the list) a generator without a seed samples afresh anyway
    assert model.seed == seed  # the caller's model is left as it was
