"""A multi-turn tool conversation through the real server trains exactly the tokens the model sampled.

The server renders every prompt with the chat template, as vLLM does, so a tool call the model
spaced differently from the template's rendering (``{"name":"add"...}`` vs ``{"name": "add"...}``)
comes back in the next prompt re-rendered: that prompt no longer extends the sampled tokens. The
conversation is then split into one sequence per turn (counted as a prefix break) instead of
training on the re-rendered copy; a call spaced as the template spaces it stays one sequence."""

from __future__ import annotations

import json
import uuid
from typing import Any

import openai
import pytest
from art_adapters_backend.serving.chat_template import ChatTemplate
from art_adapters_backend.serving.model_family import bundled_chat_template_path
from art_adapters_backend.training.groups import build_sequences

from art_adapters import LocalBackend, Trajectory, TrajectoryGroup
from art_adapters._trajectory import Message
from tests.helpers.openai_tools import ADD_TOOL

MODEL = "smollm2-135m-instruct"
TOOLS = [ADD_TOOL]


# An earlier turn written with compact JSON: the model imitates it, unlike the canonical rendering.
# (It was not sampled by the model: a few-shot turn, prompt in training, never loss.)
EXAMPLE = [
    {"role": "user", "content": "Use the add tool to compute 1 + 2."},
    {"role": "assistant", "content": '<tool_call>\n{"name":"add","arguments":{"a":1,"b":2}}\n</tool_call>'},
]


@pytest.mark.slow
async def test_tool_conversations_train_exactly_the_sampled_tokens(local_backend: LocalBackend, tokenizer: Any) -> None:
    client = openai.AsyncOpenAI(base_url=local_backend.openai_base_url, api_key="unused", max_retries=0)
    question = {"role": "user", "content": "Now compute 12 + 30 with the add tool."}
    first = await client.chat.completions.create(
        model=MODEL, messages=[*EXAMPLE, question], tools=TOOLS, n=4, temperature=0.7, max_tokens=40, seed=1
    )
    records = {first.id: await local_backend.get_token_record(first.id)}
    trajectories, respaced, completions = [], 0, {}
    for choice in first.choices:
        calls = choice.message.tool_calls or []
        if not calls:
            continue
        sampled = records[first.id]["choices"][choice.index]["text"]
        canonical = "\n".join(
            '<tool_call>\n{"name": "%s", "arguments": %s}\n</tool_call>'
            % (c.function.name, json.dumps(json.loads(c.function.arguments)))
            for c in calls
        )
        spaced_differently = sampled.strip() != canonical.strip()
        respaced += spaced_differently
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
        # The next prompt is the template's rendering: it extends the sampled tokens only when the
        # model wrote the call as the template writes it.
        head = first_rec["prompt_token_ids"] + first_rec["choices"][choice.index]["completion_token_ids"]
        extends = records[second.id]["prompt_token_ids"][: len(head)] == head
        if spaced_differently:
            assert not extends, (sampled, canonical)
        completions[choice.index] = [
            first_rec["choices"][choice.index]["completion_token_ids"],
            records[second.id]["choices"][0]["completion_token_ids"],
        ]
        messages = [
            *(Message(**m, generated=False if m["role"] == "assistant" else None) for m in EXAMPLE),
            Message(role="user", content=question["content"]),
            Message(
                **json.loads(choice.message.model_dump_json(exclude_none=True)),
                completion_id=first.id,
                choice_index=choice.index,
            ),
            *(Message(role="tool", tool_call_id=c.id, content="42") for c in calls),
            Message(role="assistant", content=second.choices[0].message.content, completion_id=second.id),
        ]
        trajectories.append(
            Trajectory(messages=messages, tools=TOOLS, reward=float(choice.index), metadata={"i": choice.index})
        )
    await client.close()
    assert respaced > 0, "no sampled call differed from the canonical spacing: the test would prove nothing"

    group = TrajectoryGroup(id=f"g-{uuid.uuid4().hex[:6]}", trajectories=trajectories)
    template = ChatTemplate(tokenizer, bundled_chat_template_path().read_text())
    built = build_sequences([group], records.get, template.encode)
    assert len(trajectories) >= 2
    assert built.metrics.record_turns == 2 * len(trajectories)
    assert built.metrics.prefix_breaks >= respaced > 0
    by_trajectory: dict[str, list[list[int]]] = {}
    for sequence in built.sequences:
        trained = [t for t, m in zip(sequence.token_ids, sequence.loss_mask, strict=True) if m]
        by_trajectory.setdefault(sequence.trajectory_id, []).append(trained)
    for trajectory in trajectories:
        sampled_ids = [t for ids in completions[trajectory.metadata["i"]] for t in ids]
        trained_ids = [t for part in by_trajectory[trajectory.id] for t in part]
        # Every trained token is one the model sampled (a sequence's very first token has no
        # context and is not trained): never a re-rendered copy.
        assert trained_ids == sampled_ids or trained_ids == sampled_ids[1:], trajectory.metadata
