"""The topic check of generated scenarios (``generate_scenarios(topic_check=True)``, on in train-mcp with
its small local writer): measured on 42 labelled tasks for the real notes server, in the spirit of what
the bundled 135M writer produced (5 of 42 on topic), and in a generation run."""

from __future__ import annotations

import json
from pathlib import Path

import mcp_tools
from mcp_tools._generate import _tool_specs
from mcp_tools._topic import on_topic, topic_words
from mcp_tools.servers import server_command, shipped_scenarios
from tests.helpers.scripted_generator import ScriptedGenerator

SAMPLES = Path(__file__).parent / "data" / "notes_topic_samples.jsonl"


async def _notes_topic() -> mcp_tools._topic.Topic:
    tools = await mcp_tools.load_tools(server_command("notes"))
    specs, _ = await _tool_specs(tools, None)
    async with mcp_tools.McpSession(server_command("notes")) as session:
        return topic_words(specs, await session.read_resources())


async def test_the_topic_check_keeps_on_topic_tasks_and_drops_the_rest_on_42_samples() -> None:
    topic = await _notes_topic()
    rows = [json.loads(line) for line in SAMPLES.read_text().splitlines()]
    assert len(rows) == 42 and sum(r["on_topic"] for r in rows) == 12
    kept = [r for r in rows if on_topic(r["task"], topic)]
    precision = sum(r["on_topic"] for r in kept) / len(kept)
    recall = sum(r["on_topic"] for r in kept) / 12
    # measured: precision 1.00 (11 of 11 kept are on topic), recall 0.92 ("What did Priya ask for in our 1:1?")
    assert precision >= 0.9 and recall >= 0.8, (precision, recall, [r["task"] for r in kept])
    assert not on_topic("The 4th easy task", topic)
    assert not on_topic("Implement a custom error handler", topic)


async def test_arithmetic_in_symbols_or_words_is_on_the_calculators_topic() -> None:
    specs, _ = await _tool_specs(await mcp_tools.load_tools(server_command("calculator")), None)
    topic = topic_words(specs)
    calculator = shipped_scenarios(" ".join(server_command("calculator")))
    assert calculator is not None
    assert all(on_topic(s.task, topic) for s in mcp_tools.load_scenarios(calculator))
    assert not on_topic("Write a poem about the sea", topic)


async def test_generation_with_the_topic_check_rejects_off_topic_tasks_and_says_why() -> None:
    first = {"scenarios": [{"task": "The 4th easy task", "difficulty": 1},
                           {"task": "Implement a custom error handler", "difficulty": 2},
                           {"task": "Find my notes tagged travel", "difficulty": 1}]}  # fmt: skip
    second = {"scenarios": [{"task": "Search my notes for the Lisbon budget", "difficulty": 2}]}
    model = ScriptedGenerator(script=[json.dumps(first), json.dumps(second)])
    scenarios = await mcp_tools.generate_scenarios(
        server_command("notes"), n=2, model=model, batch_size=3, topic_check=True
    )
    assert [s.task for s in scenarios] == ["Find my notes tagged travel", "Search my notes for the Lisbon budget"]
    assert "The 4th easy task (off topic)" in model.prompts[1]  # the next call is told why
