"""Per-turn credit (``TrainConfig.credit="turn"``): each assistant turn's tokens get that turn's
advantage within the group, from RULER's per-turn scores, end to end through the train API."""

from __future__ import annotations

import math
import uuid
from typing import Any

import pytest
from art_adapters_backend.training.data import TurnRewardsError
from art_adapters_backend.training.groups import build_sequences
from langchain_openai import ChatOpenAI

from art_adapters import (
    BackendRequestError,
    LocalBackend,
    Message,
    TrainableModel,
    TrainConfig,
    Trajectory,
    TrajectoryGroup,
    ruler_score_group,
)
from art_adapters._trajectory import History
from tests.helpers.judge_server import JudgeServer, request_ids, request_turns, turn_scores
from tests.helpers.models import registered

QUESTIONS = ["Name a colour.", "Name an animal.", "Name a fruit."]


def conversation(*answers: str) -> list[Message]:
    """The questions, each answered in turn (assistant turns without records: re-tokenised)."""
    messages = [Message(role="system", content="Answer in one word.")]
    for question, answer in zip(QUESTIONS, answers, strict=False):
        messages += [Message(role="user", content=question), Message(role="assistant", content=answer)]
    return messages


def turn_credit(a: float, mean: float, std: float) -> float:
    return (a - mean) / (std + 1e-4)


def loss_values(seq: Any) -> set[float]:
    """The distinct advantages on a sequence's loss tokens."""
    return {a for a, m in zip(seq.token_advantages, seq.loss_mask, strict=True) if m}


def test_each_turns_tokens_get_that_turns_advantage_relative_to_the_group(
    render: Any, tokenizer: Any
) -> None:
    good_bad_good = Trajectory(messages=conversation("Blue", "Stone", "Apple"), reward=0.7)
    steady = Trajectory(messages=conversation("Red", "Cat", "Pear"), reward=0.9)
    short = Trajectory(messages=conversation("Green"), reward=0.2)
    good_bad_good.metadata["turn_rewards"] = [0.9, 0.1, 0.9]
    steady.metadata["turn_rewards"] = [0.6, 0.6, 0.6]
    short.metadata["turn_rewards"] = [0.3]
    groups = [TrajectoryGroup(trajectories=[good_bad_good, steady, short])]

    built = build_sequences(groups, lambda _: None, render, credit="turn")

    pooled = [0.9, 0.1, 0.9, 0.6, 0.6, 0.6, 0.3]
    mean = sum(pooled) / 7
    std = math.sqrt(sum((r - mean) ** 2 for r in pooled) / 6)  # Bessel-corrected, as GRPO's rewards
    (seq,) = [s for s in built.sequences if s.trajectory_id == good_bad_good.id]
    assert seq.turns == 3 and seq.token_advantages is not None
    by_value: dict[float, list[int]] = {}
    for token, advantage, mask in zip(seq.token_ids, seq.token_advantages, seq.loss_mask, strict=True):
        if mask:
            by_value.setdefault(advantage, []).append(token)
        else:
            assert advantage == 0.0  # prompt, questions, template: no loss, no advantage
    bad, good = sorted(by_value)
    assert [bad, good] == pytest.approx([turn_credit(0.1, mean, std), turn_credit(0.9, mean, std)])
    assert bad < 0 < good
    assert tokenizer.decode(by_value[bad]).startswith("Stone")  # the bad turn, and only it, is pushed down
    assert "Blue" in tokenizer.decode(by_value[good]) and "Apple" in tokenizer.decode(by_value[good])
    # The sequence's scalar advantage is its loss tokens' mean; the other trajectories' turns likewise.
    assert seq.advantage == pytest.approx(sum(seq.token_advantages) / seq.loss_tokens)
    (short_seq,) = [s for s in built.sequences if s.trajectory_id == short.id]
    assert short_seq.token_advantages is not None
    assert list(loss_values(short_seq)) == pytest.approx([turn_credit(0.3, mean, std)])

    # Per-trajectory credit (the default) is unchanged: one advantage per trajectory, none per token.
    default = build_sequences(groups, lambda _: None, render)
    assert all(s.token_advantages is None for s in default.sequences)
    unscaled = build_sequences(groups, lambda _: None, render, credit="turn", scale_rewards=False)
    (plain,) = [s for s in unscaled.sequences if s.trajectory_id == good_bad_good.id]
    assert plain.token_advantages is not None
    assert min(plain.token_advantages) == pytest.approx(0.1 - mean)


def test_turn_credit_drops_groups_whose_turn_rewards_tie_and_credits_other_histories_with_the_mean(
    render: Any,
) -> None:
    # Different trajectory rewards, equal turn rewards: no per-turn signal, dropped as zero variance.
    tie = [
        Trajectory(messages=conversation("Blue"), reward=r, metadata={"turn_rewards": [0.5]}) for r in (0, 1)
    ]
    result = build_sequences([TrajectoryGroup(trajectories=tie)], lambda _: None, render, credit="turn")
    assert result.sequences == [] and result.metrics.groups_dropped == {"zero_variance": 1}

    # A turn outside the main history (the judge never saw it) gets its trajectory's mean turn advantage.
    side = History(
        messages=[Message(role="user", content="Summarise."), Message(role="assistant", content="Ok.")]
    )
    two = Trajectory(messages=conversation("Blue", "Stone"), reward=1.0, metadata={"turn_rewards": [1, 0]})
    two.additional_histories.append(side)
    one = Trajectory(messages=conversation("Red"), reward=0.0, metadata={"turn_rewards": [0.5]})
    groups = [TrajectoryGroup(trajectories=[two, one])]
    main, extra = [s for s in build_sequences(groups, lambda _: None, render, credit="turn").sequences
                   if s.trajectory_id == two.id]  # fmt: skip
    turn_values = loss_values(main)
    assert len(turn_values) == 2
    assert list(loss_values(extra)) == pytest.approx([sum(turn_values) / 2])


@pytest.mark.parametrize(
    ("metadata", "problem"),
    [
        ({}, "has no metadata['turn_rewards']"),
        ({"turn_rewards": [0.5, 0.5]}, "has 2 turn reward(s) in metadata['turn_rewards'] but 1 assistant"),
        ({"turn_rewards": [float("nan")]}, "not a list of finite numbers"),
        ({"turn_rewards": "0.5"}, "not a list of finite numbers"),
    ],
)
def test_a_scored_trajectory_without_valid_turn_rewards_is_named(
    render: Any, metadata: dict[str, Any], problem: str
) -> None:
    ok = Trajectory(messages=conversation("Blue"), reward=1.0, metadata={"turn_rewards": [1.0]})
    bad = Trajectory(messages=conversation("Red"), reward=0.0, metadata=metadata)
    unscored = Trajectory(messages=conversation("Green"))  # no reward: skipped, not checked
    groups = [TrajectoryGroup(trajectories=[ok, bad, unscored])]
    with pytest.raises(TurnRewardsError) as raised:
        build_sequences(groups, lambda _: None, render, credit="turn")
    message = str(raised.value)
    assert f"trajectory {bad.id!r} (groups[0].trajectories[1]" in message and problem in message
    assert "per_turn=True" in message and raised.value.status_code == 400
    assert build_sequences(groups, lambda _: None, render).sequences  # per-trajectory credit needs none


# --------------------------------------------------------------------------- through the server


async def _sampled_group(model: TrainableModel) -> TrajectoryGroup:
    """Three conversations of three turns, every turn sampled by the served model (exact-token records)."""
    client = model.openai_client()
    system = {"role": "system", "content": "Answer in one word."}
    first = await client.chat.completions.create(
        model=model.served_name(),
        messages=[system, {"role": "user", "content": QUESTIONS[0]}],
        n=3, temperature=1.0, max_tokens=6, seed=11,
    )  # fmt: skip
    trajectories = []
    for choice in first.choices:
        messages = [
            Message(**system),
            Message(role="user", content=QUESTIONS[0]),
            Message(role="assistant", content=choice.message.content or "", completion_id=first.id,
                    choice_index=choice.index),
        ]  # fmt: skip
        for question in QUESTIONS[1:]:
            messages.append(Message(role="user", content=question))
            reply = await client.chat.completions.create(
                model=model.served_name(), messages=[m.to_openai() for m in messages],
                temperature=1.0, max_tokens=6, seed=12 + choice.index,
            )  # fmt: skip
            messages.append(
                Message(
                    role="assistant", content=reply.choices[0].message.content or "", completion_id=reply.id
                )
            )
        trajectories.append(Trajectory(messages=messages))
    await client.close()
    return TrajectoryGroup(trajectories=trajectories, metadata={"scenario_id": "three-questions"})


#: What the scripted judge says of the group's distinct trajectories, in order: (score, turn scores).
VERDICTS = [(0.6, [0.9, 0.1, 0.9]), (0.5, [0.5, 0.5, 0.5]), (0.55, [0.6, 0.6, 0.4])]


def _judge_by_label(body: dict[str, Any]) -> dict[str, Any]:
    turns = request_turns(body)
    entries = [(label, *VERDICTS[k]) for k, label in enumerate(request_ids(body))]
    assert all(len(entry[2]) == turns[entry[0]] for entry in entries)
    return {"content": turn_scores(entries)}


@pytest.mark.slow
async def test_a_bad_turn_gets_a_negative_advantage_and_its_good_turns_positive_through_the_train_api(
    local_backend: LocalBackend,
) -> None:
    model = await registered(local_backend, f"turns-{uuid.uuid4().hex[:8]}", "turn-credit")
    group = await _sampled_group(model)
    with JudgeServer() as server:
        server.reset(default=_judge_by_label)
        judge = ChatOpenAI(base_url=server.url, api_key="test", model="scripted-judge", max_retries=0)
        scored = await ruler_score_group(group, judge=judge, per_turn=True, cache=False)
    (mixed,) = [t for t in scored.trajectories if t.metadata["turn_rewards"] == [0.9, 0.1, 0.9]]

    config = TrainConfig(credit="turn", learning_rate=1e-3, seed=0)
    result = await model.train([scored], config=config)
    assert result.trained and result.step == 1
    assert result.metrics["trajectories"] == 3 and result.metrics["record_turns"] == 9

    # The step's sequences, rebuilt from the server's own exact-token records as the server built them.
    records = {
        m.completion_id: await local_backend.get_token_record(m.completion_id)
        for t in scored.trajectories
        for m in t.messages
        if m.completion_id
    }
    built = build_sequences([scored], records.get, None, policy=model.name, credit="turn")
    turns = [m for m in mixed.messages if m.role == "assistant"]

    def sampled(message: Message) -> list[int]:
        record = records[message.completion_id or ""]
        return record["choices"][message.choice_index]["completion_token_ids"]

    negative, positive = [], []
    for seq in (s for s in built.sequences if s.trajectory_id == mixed.id):
        assert seq.token_advantages is not None
        for token, advantage, mask in zip(seq.token_ids, seq.token_advantages, seq.loss_mask, strict=True):
            if mask:
                (negative if advantage < 0 else positive).append(token)
    assert negative == sampled(turns[1])  # exactly the bad turn's sampled tokens are pushed down
    assert positive == sampled(turns[0]) + sampled(turns[2])  # and both good turns' tokens up

    # The server's loss used these per-token advantages: on-policy (ratio ~1) the token-normalised
    # PPO loss is minus their mean over the step's loss tokens, not the per-trajectory one.
    per_turn_loss = -sum(sum(s.token_advantages or []) for s in built.sequences) / sum(
        s.loss_tokens for s in built.sequences
    )
    trajectory = build_sequences([scored], records.get, None, policy=model.name)
    per_trajectory_loss = -sum(s.advantage * s.loss_tokens for s in trajectory.sequences) / sum(
        s.loss_tokens for s in trajectory.sequences
    )
    assert result.metrics["policy_loss"] == pytest.approx(per_turn_loss, abs=2e-3)
    assert abs(per_turn_loss - per_trajectory_loss) > 2e-2, (per_turn_loss, per_trajectory_loss)


@pytest.mark.slow
async def test_turn_credit_without_turn_rewards_is_a_400_naming_the_trajectory(
    local_backend: LocalBackend,
) -> None:
    model = await registered(local_backend, f"turns-{uuid.uuid4().hex[:8]}", "turn-credit")
    client = model.openai_client()
    reply = await client.chat.completions.create(
        model=model.served_name(), messages=[{"role": "user", "content": QUESTIONS[0]}],
        n=2, temperature=1.0, max_tokens=4, seed=5,
    )  # fmt: skip
    await client.close()
    trajectories = [
        Trajectory(
            messages=[Message(role="user", content=QUESTIONS[0]),
                      Message(role="assistant", content=c.message.content or "", completion_id=reply.id,
                              choice_index=c.index)],
            reward=float(c.index),
        )  # fmt: skip
        for c in reply.choices
    ]
    trajectories[0].metadata["turn_rewards"] = [0.0]
    with pytest.raises(BackendRequestError) as raised:
        await model.train([TrajectoryGroup(trajectories=trajectories)], config=TrainConfig(credit="turn"))
    assert raised.value.status_code == 400
    assert trajectories[1].id in str(raised.value) and "turn_rewards" in str(raised.value)
    assert await model.get_step() == 0  # nothing trained
