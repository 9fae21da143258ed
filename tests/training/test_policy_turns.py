"""A real LangGraph graph with two chat models trains only the policy's turns.

The policy is ``model.chat_model()`` on the real backend (the bundled model); a reviewer, a
deterministic langchain-core chat model with a name of its own, comments on the policy's
draft in the same conversation, and the policy revises. Capture records whose turn is
whose; in training the reviewer's turn is prompt context (mask 0), the policy's turns are
exactly the token ids the backend recorded as sampled, and the train step's metrics count
the reviewer's turns.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from art_adapters_backend.serving.chat_template import ChatTemplate
from art_adapters_backend.serving.model_family import bundled_chat_template_path
from art_adapters_backend.training.groups import build_sequences
from langchain_core.messages import AIMessage

from art_adapters import LocalBackend, TrainableModel, TrajectoryCallbackHandler, TrajectoryGroup
from art_adapters._train_config import TrainConfig
from tests.helpers.capture_fakes import NamedFakeChatModel, review_graph

REVIEW = "Be more specific."
QUESTIONS = ["Name a colour.", "Name a fruit."]


@pytest.mark.slow
async def test_a_graph_with_a_reviewer_model_trains_only_the_policys_turns(
    local_backend: LocalBackend, tokenizer: Any
) -> None:
    model = TrainableModel(name=f"policy-{uuid.uuid4().hex[:6]}", project="tests")
    await model.register(local_backend)
    policy = model.chat_model(temperature=1.0, max_tokens=6)
    reviewer = NamedFakeChatModel(model="reviewer-x", responses=[AIMessage(content=REVIEW)])
    graph = review_graph(policy, reviewer)
    handler = TrajectoryCallbackHandler()
    for question in QUESTIONS:
        await graph.ainvoke({"messages": [("user", question)]}, config={"callbacks": [handler]})
    scored = zip(handler.trajectories, [1.0, 0.0], strict=True)
    trajectories = [t.model_copy(update={"reward": reward}) for t, reward in scored]

    records: dict[str, dict[str, Any]] = {}
    sampled: dict[str, list[int]] = {}  # trajectory id -> the policy's sampled ids, in order
    for trajectory in trajectories:
        assert trajectory.error is None
        turns = [m for m in trajectory.messages if m.role == "assistant"]
        # the backend answers a bare name as the exact checkpoint that sampled (name@step)
        assert [m.model for m in turns] == [f"{model.name}@0", "reviewer-x", f"{model.name}@0"]
        assert all(m.generated for m in turns)
        assert turns[1].content == REVIEW and turns[1].completion_id is None
        sampled[trajectory.id] = []
        for turn in (turns[0], turns[2]):
            record = await local_backend.get_token_record(turn.completion_id)
            assert record["trained_model"] == model.name
            records[turn.completion_id] = record
            sampled[trajectory.id] += record["choices"][0]["completion_token_ids"]
    group = TrajectoryGroup(trajectories=trajectories)

    template = ChatTemplate(tokenizer, bundled_chat_template_path().read_text())
    built = build_sequences([group], records.get, template.encode, policy=model.name)
    m = built.metrics
    # per trajectory: the reviewer's turn in the main history and in its own; the draft's copy there
    assert (m.other_model_turns, m.record_turns, m.duplicate_turns, m.fallback_turns) == (4, 4, 2, 0)
    assert m.extended_turns + m.prefix_breaks == 2
    for trajectory in trajectories:
        sequences = [s for s in built.sequences if s.trajectory_id == trajectory.id]
        trained = [t for s in sequences for t, mask in zip(s.token_ids, s.loss_mask, strict=True) if mask]
        assert trained == sampled[trajectory.id]  # exactly the recorded completion ids, nothing else
        last = sequences[-1]
        masked = [t for t, k in zip(last.token_ids, last.loss_mask, strict=True) if k]
        assert REVIEW in tokenizer.decode(last.token_ids) and REVIEW not in tokenizer.decode(masked)

    # The server's train step does the same with the model it trains as the policy, and says so.
    result = await model.train([group], config=TrainConfig(learning_rate=1e-5))
    assert result.trained and result.step == 1
    assert (result.metrics["other_model_turns"], result.metrics["record_turns"]) == (4, 4)
    assert result.metrics["loss_tokens"] == m.loss_tokens
    assert result.metrics["extended_turns"] + result.metrics["prefix_breaks"] == 2
