"""The sampled EOS is part of the exact-token record (so GRPO learns to end a turn), not of the text,
and a two-turn conversation still builds ONE training sequence with the EOS masked in."""

from __future__ import annotations

import uuid

import openai
import pytest
from art_adapters_backend.training.groups import build_sequences

from art_adapters import LocalBackend, Trajectory, TrajectoryGroup
from art_adapters._trajectory import Message

IM_END = 2  # <|im_end|> of the bundled SmolLM2 (its EOS)


@pytest.mark.slow
async def test_eos_in_record_not_in_text_and_multi_turn_is_one_sequence(local_backend: LocalBackend) -> None:
    client = openai.AsyncOpenAI(base_url=local_backend.openai_base_url, api_key="unused", max_retries=0)
    model = "smollm2-135m-instruct"
    history = [{"role": "user", "content": "What is the capital of France? One word."}]
    first = await client.chat.completions.create(
        model=model, messages=history, max_tokens=24, temperature=0, logprobs=True
    )
    choice = first.choices[0]
    assert choice.finish_reason == "stop"
    record = await local_backend.get_token_record(first.id)
    ids = record["choices"][0]["completion_token_ids"]
    assert ids[-1] == IM_END and len(record["choices"][0]["logprobs"]) == len(ids)
    assert "<|im_end|>" not in (choice.message.content or "")
    assert choice.logprobs is not None and len(choice.logprobs.content or []) == len(ids) - 1
    assert first.usage is not None and first.usage.completion_tokens == len(ids)  # counted, as OpenAI does

    # Streaming gives the same record shape.
    stream = await client.chat.completions.create(
        model=model, messages=history, max_tokens=24, temperature=0, stream=True
    )
    streamed_id = None
    async for chunk in stream:
        streamed_id = chunk.id
    assert streamed_id is not None
    streamed = await local_backend.get_token_record(streamed_id)
    assert streamed["choices"][0]["completion_token_ids"] == ids

    history += [
        {"role": "assistant", "content": choice.message.content},
        {"role": "user", "content": "And of Italy?"},
    ]
    second = await client.chat.completions.create(model=model, messages=history, max_tokens=8, temperature=0)
    await client.close()
    record2 = await local_backend.get_token_record(second.id)
    # The next turn's prompt extends prompt + completion (EOS included): one conversation, one sequence.
    assert record2["prompt_token_ids"][: len(record["prompt_token_ids"]) + len(ids)] == (
        record["prompt_token_ids"] + ids
    )

    messages = [
        Message(role="user", content=history[0]["content"]),
        Message(role="assistant", content=choice.message.content, completion_id=first.id),
        Message(role="user", content="And of Italy?"),
        Message(role="assistant", content=second.choices[0].message.content, completion_id=second.id),
    ]
    records = {first.id: record, second.id: record2}
    group = TrajectoryGroup(
        id=f"g-{uuid.uuid4().hex[:6]}",
        trajectories=[
            Trajectory(messages=messages, reward=1.0),
            Trajectory(messages=messages[:2], reward=0.0),
        ],
    )
    built = build_sequences([group], records.get, None)
    assert built.metrics.prefix_breaks == 0 and built.metrics.record_turns == 3
    full = next(s for s in built.sequences if s.turns == 2)
    eos_at = len(record["prompt_token_ids"]) + len(ids) - 1
    assert full.token_ids[eos_at] == IM_END and full.loss_mask[eos_at] == 1  # trained: ending the turn
    assert full.old_logprobs[eos_at] == record["choices"][0]["logprobs"][-1]
