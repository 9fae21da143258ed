"""A multi-turn tool conversation through the real server is ONE training sequence, with no prefix
break, even when the model spaced its ``<tool_call>`` JSON differently from the canonical rendering
(the server renders tool-call turns it issued with the exact tokens it sampled)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import openai
import pytest
from art_adapters_backend.chat_template import ChatTemplate, render_tool_call
from art_adapters_backend.training.data import build_sequences

from art_adapters import LocalBackend, Trajectory, TrajectoryGroup
from art_adapters.trajectory import Message

MODEL = "smollm2-135m-instruct"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            },
        },
    }
]


# An earlier turn written with compact JSON: the model imitates it, unlike the canonical rendering.
# (It was not sampled by the server, so training re-tokenises it: one fallback turn per conversation.)
EXAMPLE = [
    {"role": "user", "content": "Use the add tool to compute 1 + 2."},
    {"role": "assistant", "content": '<tool_call>\n{"name":"add","arguments":{"a":1,"b":2}}\n</tool_call>'},
]


@pytest.mark.slow
async def test_tool_conversations_are_one_sequence_each(local_backend: LocalBackend, tokenizer: Any) -> None:
    client = openai.AsyncOpenAI(base_url=local_backend.openai_base_url, api_key="unused", max_retries=0)
    question = {"role": "user", "content": "Now compute 12 + 30 with the add tool."}
    first = await client.chat.completions.create(
        model=MODEL, messages=[*EXAMPLE, question], tools=TOOLS, n=4, temperature=0.7, max_tokens=40, seed=1
    )
    records = {first.id: await local_backend.get_token_record(first.id)}
    trajectories, respaced = [], 0
    for choice in first.choices:
        calls = choice.message.tool_calls or []
        if not calls:
            continue
        sampled = records[first.id]["choices"][choice.index]["text"]
        canonical = "\n".join(render_tool_call(c.function.name, c.function.arguments) for c in calls)
        respaced += sampled.strip() != canonical.strip()
        history = [
            *EXAMPLE,
            question,
            choice.message.model_dump(exclude_none=True),
            *({"role": "tool", "tool_call_id": c.id, "content": "42"} for c in calls),
        ]
        second = await client.chat.completions.create(
            model=MODEL, messages=history, tools=TOOLS, max_tokens=6, temperature=0.7, seed=2
        )
        records[second.id] = await local_backend.get_token_record(second.id)
        first_rec = records[first.id]
        # The next prompt extends the first prompt + the sampled tokens, EOS included.
        head = first_rec["prompt_token_ids"] + first_rec["choices"][choice.index]["completion_token_ids"]
        assert records[second.id]["prompt_token_ids"][: len(head)] == head, (sampled, canonical)
        messages = [
            *(Message(**m) for m in EXAMPLE),
            Message(role="user", content=question["content"]),
            Message(
                **json.loads(choice.message.model_dump_json(exclude_none=True)),
                completion_id=first.id,
                choice_index=choice.index,
            ),
            *(Message(role="tool", tool_call_id=c.id, content="42") for c in calls),
            Message(role="assistant", content=second.choices[0].message.content, completion_id=second.id),
        ]
        trajectories.append(Trajectory(messages=messages, tools=TOOLS, reward=float(choice.index)))
    await client.close()
    assert respaced > 0, "no sampled call differed from the canonical spacing: the test would prove nothing"

    group = TrajectoryGroup(id=f"g-{uuid.uuid4().hex[:6]}", trajectories=trajectories)
    built = build_sequences([group], records.get, ChatTemplate(tokenizer).encode)
    assert built.metrics.prefix_breaks == 0 and built.metrics.record_turns == 2 * len(trajectories)
    assert built.metrics.fallback_turns == len(trajectories)  # the example turn
    assert len(trajectories) >= 2
    assert len(built.sequences) == len(trajectories) and all(s.turns == 3 for s in built.sequences)
