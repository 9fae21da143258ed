"""Building training sequences from trajectories, on the bundled model's real token ids."""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest
from art_adapters_backend.training.groups import build_sequences

from art_adapters import Message, Trajectory, TrajectoryGroup
from art_adapters._trajectory import History

_ids = itertools.count()


class Server:
    """Plays the backend: renders prompts with the template and records 'sampled' completions.

    A completion's tokens are what the template puts inside the assistant turn (the content,
    without the end-of-turn tokens: the record excludes EOS), so later prompts extend them.
    ``sampled`` makes the model have sampled other text than the message's ``content`` (e.g.
    thinking that the template drops from later prompts, as Qwen3's does); ``trained_model``
    is the registered model that served it (``None``: the base model), as in the real record.
    """

    def __init__(self, render: Any) -> None:
        self.render = render
        self.records: dict[str, dict[str, Any]] = {}

    def complete(
        self,
        history: list[dict[str, Any]],
        content: str,
        *,
        sampled: str | None = None,
        trained_model: str | None = "agent",
        **prompt_override: Any,
    ) -> Message:
        prompt = prompt_override.get("prompt") or self.render(history, None, add_generation_prompt=True)
        full = self.render(
            [*history, {"role": "assistant", "content": content if sampled is None else sampled}],
            None,
            add_generation_prompt=False,
        )
        completion = full[len(prompt) : len(full) - 2]  # drop "<|im_end|>", "\n"
        cid = f"chatcmpl-{next(_ids)}"
        logprobs = [-0.1 - 0.01 * i for i in range(len(completion))]
        self.records[cid] = {
            "trained_model": trained_model,
            "temperature": prompt_override.get("temperature", 1.0),
            "prompt_token_ids": prompt,
            "choices": [{"index": 0, "completion_token_ids": completion, "logprobs": logprobs}],
        }
        return Message(role="assistant", content=content, completion_id=cid)

    def get(self, cid: str) -> dict[str, Any] | None:
        return self.records.get(cid)


def _masked(seq: Any) -> list[int]:
    return [t for t, m in zip(seq.token_ids, seq.loss_mask, strict=True) if m]


def _group(*trajectories: Trajectory) -> TrajectoryGroup:
    return TrajectoryGroup(trajectories=list(trajectories))


def _server_template(tokenizer: Any, template: str | None = None) -> Any:
    """The server's renderer: the shipped SmolLM2 tool template (or ``template``), rendered as vLLM does."""
    from art_adapters_backend.serving.chat_template import ChatTemplate
    from art_adapters_backend.serving.model_family import bundled_chat_template_path

    text = template if template is not None else bundled_chat_template_path().read_text()
    return ChatTemplate(tokenizer, text)


def test_single_turn_uses_the_recorded_tokens_and_masks_only_the_completion(
    render: Any, tokenizer: Any
) -> None:
    server = Server(render)
    user = {"role": "user", "content": "What is 2+2?"}
    good = Trajectory(messages=[Message(**user), server.complete([user], "The answer is 4.")], reward=1.0)
    bad = Trajectory(messages=[Message(**user), server.complete([user], "Five.")], reward=0.0)
    result = build_sequences([_group(good, bad)], server.get, render)
    assert result.nothing_trainable_reason is None
    seq = result.sequences[0]
    record = server.records[good.messages[1].completion_id]
    completion = record["choices"][0]["completion_token_ids"]
    assert seq.token_ids == record["prompt_token_ids"] + completion
    assert seq.loss_mask == [0] * len(record["prompt_token_ids"]) + [1] * len(completion)
    assert tokenizer.decode(_masked(seq)) == "The answer is 4."
    assert [x for x in seq.old_logprobs if x is not None] == record["choices"][0]["logprobs"]
    assert all(x is None for x, m in zip(seq.old_logprobs, seq.loss_mask, strict=True) if not m)
    assert seq.advantage > 0 > result.sequences[1].advantage
    m = result.metrics
    assert (m.record_turns, m.fallback_turns, m.groups_used, m.trajectories, m.sequences) == (2, 0, 1, 2, 2)
    assert m.loss_tokens == sum(s.loss_tokens for s in result.sequences)
    assert m.reward_mean == 0.5


def test_multi_turn_is_one_sequence_with_tool_output_masked_out(render: Any, tokenizer: Any) -> None:
    server = Server(render)
    h: list[dict[str, Any]] = [
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "Add 2 and 3"},
    ]
    a1 = server.complete(h, "Calling add(2, 3).")
    h2 = [*h, a1.to_openai(), {"role": "user", "content": "Tool result: 5"}]
    a2 = server.complete(h2, "It is 5.")
    msgs = [Message(**h[0]), Message(**h[1]), a1, Message(**h2[3]), a2]
    result = build_sequences(
        [_group(Trajectory(messages=msgs, reward=1.0), Trajectory(messages=msgs[:3], reward=0.0))],
        server.get,
        render,
    )
    seq = result.sequences[0]
    assert seq.turns == 2 and result.metrics.prefix_breaks == 0
    assert (
        seq.token_ids
        == server.records[a2.completion_id]["prompt_token_ids"]
        + server.records[a2.completion_id]["choices"][0]["completion_token_ids"]
    )
    assert tokenizer.decode(_masked(seq)) == "Calling add(2, 3).It is 5."
    # everything between the two completions (end of turn, the tool's output, headers) is masked out
    unmasked = tokenizer.decode([t for t, m in zip(seq.token_ids, seq.loss_mask, strict=True) if not m])
    assert "Tool result: 5" in unmasked and "Add 2 and 3" in unmasked
    assert result.metrics.record_turns == 3


def test_divergent_history_starts_a_new_sequence_and_truncates_nothing(render: Any, tokenizer: Any) -> None:
    server = Server(render)
    h = [{"role": "user", "content": "Summarise: cats are nice."}]
    a1 = server.complete(h, "Cats are nice.")
    # The agent's second call rewrote the history (a summariser with its own prompt).
    h2 = [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Cats are nice. Shorter?"}]
    a2 = server.complete(h2, "Cats: nice.")
    traj = Trajectory(messages=[Message(**h[0]), a1, Message(**h2[1]), a2], reward=1.0)
    other = Trajectory(messages=[Message(**h[0]), server.complete(h, "No.")], reward=0.0)
    result = build_sequences([_group(traj, other)], server.get, render)
    first, second = result.sequences[0], result.sequences[1]
    assert result.metrics.prefix_breaks == 1
    assert (
        first.token_ids
        == server.records[a1.completion_id]["prompt_token_ids"]
        + server.records[a1.completion_id]["choices"][0]["completion_token_ids"]
    )
    assert (
        second.token_ids[: len(server.records[a2.completion_id]["prompt_token_ids"])]
        == server.records[a2.completion_id]["prompt_token_ids"]
    )
    assert (
        tokenizer.decode(_masked(first)) == "Cats are nice."
        and tokenizer.decode(_masked(second)) == "Cats: nice."
    )
    assert first.advantage == second.advantage  # both belong to the same trajectory


def test_turns_without_a_record_are_retokenised_and_counted(render: Any, tokenizer: Any) -> None:
    server = Server(render)
    user = {"role": "user", "content": "Hi"}
    served_elsewhere = Message(role="assistant", content="Hello there!")
    lost = Message(role="assistant", content="Hey.", completion_id="chatcmpl-gone")
    result = build_sequences(
        [
            _group(
                Trajectory(messages=[Message(**user), served_elsewhere], reward=1.0),
                Trajectory(messages=[Message(**user), lost], reward=0.2),
            )
        ],
        server.get,
        render,
    )
    m = result.metrics
    assert (m.fallback_turns, m.missing_records, m.record_turns) == (2, 1, 0)
    seq = result.sequences[0]
    assert seq.token_ids == render([user, served_elsewhere.to_openai()], None, add_generation_prompt=False)
    assert tokenizer.decode(_masked(seq)) == "Hello there!<|im_end|>\n"  # content + end of turn
    assert all(x is None for x in seq.old_logprobs)


def test_fallback_and_record_turns_share_one_sequence(render: Any, tokenizer: Any) -> None:
    server = Server(render)
    user = {"role": "user", "content": "Count"}
    a1 = Message(role="assistant", content="One")  # no record
    u2 = {"role": "user", "content": "More"}
    a2 = server.complete([user, {"role": "assistant", "content": "One"}, u2], "Two")
    result = build_sequences(
        [
            _group(
                Trajectory(messages=[Message(**user), a1, Message(**u2), a2], reward=1.0),
                Trajectory(messages=[Message(**user), a1], reward=0.0),
            )
        ],
        server.get,
        render,
    )
    seq = result.sequences[0]
    assert seq.turns == 2 and result.metrics.prefix_breaks == 0
    assert tokenizer.decode(_masked(seq)) == "One<|im_end|>\nTwo"
    assert seq.old_logprobs[-1] is not None and seq.old_logprobs[-1] == pytest.approx(-0.1)


def test_groups_without_signal_are_dropped_and_counted(render: Any) -> None:
    server = Server(render)
    user = {"role": "user", "content": "Hi"}

    def traj(reward: float | None) -> Trajectory:
        return Trajectory(messages=[Message(**user), server.complete([user], "Hello")], reward=reward)

    groups = [
        _group(traj(0.5), traj(0.5), traj(0.5)),  # zero variance
        _group(traj(1.0), traj(None)),  # one scored
        _group(traj(1.0), traj(0.0), traj(None)),  # used, one unscored
        _group(
            Trajectory(messages=[Message(**user)], reward=1.0),
            Trajectory(messages=[Message(**user)], reward=0.0),
        ),
    ]
    result = build_sequences(groups, server.get, render)
    m = result.metrics
    assert m.groups_dropped == {"zero_variance": 1, "too_few_scored": 1, "no_sequences": 1}
    assert (m.groups_used, m.trajectories, m.trajectories_unscored, m.trajectories_without_turns) == (
        1,
        2,
        2,
        2,
    )
    advantages = sorted(s.advantage for s in result.sequences)
    assert advantages == pytest.approx(
        [-1 / (math.sqrt(0.5) + 1e-4) / 2 * 1, 1 / (math.sqrt(0.5) + 1e-4) / 2]
    )
    unscaled = build_sequences(groups, server.get, render, scale_rewards=False)
    assert sorted(s.advantage for s in unscaled.sequences) == [-0.5, 0.5]


def test_all_groups_dropped_is_reported_as_nothing_trainable(render: Any) -> None:
    server = Server(render)
    user = {"role": "user", "content": "Hi"}
    same = [
        Trajectory(messages=[Message(**user), server.complete([user], "Yo")], reward=1.0) for _ in range(3)
    ]
    result = build_sequences([_group(*same), _group(*same)], server.get, render)
    assert result.sequences == []
    assert (
        "nothing trainable" in result.nothing_trainable_reason
        and "2 zero variance" in result.nothing_trainable_reason
    )
    assert (
        build_sequences([], server.get, render).nothing_trainable_reason == "no trajectory groups were given"
    )


def test_too_long_sequences_are_dropped_not_truncated(render: Any) -> None:
    server = Server(render)
    user = {"role": "user", "content": "Hi"}
    short = Trajectory(messages=[Message(**user), server.complete([user], "Ok")], reward=1.0)
    long = Trajectory(messages=[Message(**user), server.complete([user], "word " * 200)], reward=0.0)
    limit = len(server.records[short.messages[1].completion_id]["prompt_token_ids"]) + 20
    result = build_sequences([_group(short, long)], server.get, render, max_sequence_length=limit)
    assert result.metrics.sequences_too_long == 1 and len(result.sequences) == 1
    assert all(len(s.token_ids) <= limit for s in result.sequences)


def test_sequences_without_a_sampled_token_are_dropped_and_counted(render: Any) -> None:
    server = Server(render)
    user = {"role": "user", "content": "Hi"}
    empty = server.complete([user], "")  # the model stopped at once: no completion tokens
    assert server.records[empty.completion_id]["choices"][0]["completion_token_ids"] == []
    result = build_sequences(
        [
            _group(
                Trajectory(messages=[Message(**user), empty], reward=0.0),
                Trajectory(messages=[Message(**user), server.complete([user], "Hello")], reward=1.0),
            )
        ],
        server.get,
        render,
    )
    assert result.metrics.sequences_without_loss == 1 and len(result.sequences) == 1
    assert result.metrics.trajectories == 1 and result.sequences[0].loss_tokens > 0


def test_additional_histories_become_their_own_sequences_and_duplicates_count_once(render: Any) -> None:
    server = Server(render)
    user = {"role": "user", "content": "Plan"}
    side = {"role": "user", "content": "Summarise the plan"}
    a_main, a_side = server.complete([user], "Step 1"), server.complete([side], "A plan.")
    traj = Trajectory(
        messages=[Message(**user), a_main],
        additional_histories=[
            History(messages=[Message(**side), a_side]),
            History(messages=[Message(**user), a_main]),
        ],
        reward=1.0,
    )
    other = Trajectory(messages=[Message(**user), server.complete([user], "No")], reward=0.0)
    result = build_sequences([_group(traj, other)], server.get, render)
    assert [s.trajectory_id for s in result.sequences].count(traj.id) == 2
    assert result.metrics.duplicate_turns == 1 and result.metrics.prefix_breaks == 0


def test_bad_input_is_a_clear_error(render: Any) -> None:
    server = Server(render)
    user = {"role": "user", "content": "Hi"}
    no_record = Trajectory(messages=[Message(**user), Message(role="assistant", content="x")], reward=1.0)
    pair = [_group(no_record, no_record.model_copy(update={"reward": 0.0}))]
    with pytest.raises(ValueError, match="no completion record and no render callable"):
        build_sequences(pair, server.get, None)
    bad = server.complete([user], "Hello")
    server.records[bad.completion_id]["choices"][0]["logprobs"].pop()
    corrupt = [
        _group(
            Trajectory(messages=[Message(**user), bad], reward=1.0),
            no_record.model_copy(update={"reward": 0.0}),
        )
    ]
    with pytest.raises(ValueError, match="logprobs for"):
        build_sequences(corrupt, server.get, render)
    with pytest.raises(ValueError, match="non-finite"):
        build_sequences(
            [_group(no_record.model_copy(update={"reward": float("inf")}), no_record)], server.get, render
        )


def test_the_sampling_temperature_comes_from_the_record_and_splits_sequences(render: Any) -> None:
    server = Server(render)
    user = {"role": "user", "content": "Hi"}
    a1 = server.complete([user], "Hello", temperature=0.7)
    u2 = {"role": "user", "content": "Again"}
    a2 = server.complete([user, a1.to_openai(), u2], "Hello again", temperature=0.7)
    u3 = {"role": "user", "content": "Once more, greedy"}
    a3 = server.complete([user, a1.to_openai(), u2, a2.to_openai(), u3], "Hi", temperature=0.0)
    msgs = [Message(**user), a1, Message(**u2), a2, Message(**u3), a3]
    result = build_sequences(
        [_group(Trajectory(messages=msgs, reward=1.0), Trajectory(messages=msgs[:2], reward=0.0))],
        server.get,
        render,
    )
    first, second = result.sequences[0], result.sequences[1]
    assert (first.turns, first.temperature) == (2, 0.7)
    assert (second.turns, second.temperature) == (1, 1.0)  # greedy: untempered log-probs
    assert result.metrics.temperature_breaks == 1 and result.metrics.prefix_breaks == 0


def test_tool_call_conversation_with_the_servers_template_and_records(tokenizer: Any) -> None:
    """The wiring case: the server's ChatTemplate renders, CompletionRecords hold the tokens.

    A tool call sampled in the canonical JSON form re-renders to the same tokens, so the
    conversation stays one sequence; one sampled with other spacing cannot, and the next
    turn starts a new sequence (counted) instead of being cut.
    """
    from art_adapters_backend.serving.records import ChoiceRecord, CompletionRecord

    template = _server_template(tokenizer)
    canonical_call = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'
    tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {
        "a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}]  # fmt: skip
    records: dict[str, CompletionRecord] = {}

    def serve(history: list[dict[str, Any]], text: str) -> str:
        cid = f"chatcmpl-{next(_ids)}"
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        records[cid] = CompletionRecord(
            id=cid, model="agent", base_model="smollm2", prompt_token_ids=template.encode(history, tools),
            temperature=1.0, top_p=1.0, max_tokens=64,
            choices=[ChoiceRecord(index=0, completion_token_ids=ids, logprobs=[-0.5] * len(ids),
                                  finish_reason="tool_calls", text=text)],
        )  # fmt: skip
        return cid

    def conversation(sampled_call: str) -> Trajectory:
        user = {"role": "user", "content": "What is 2 + 3?"}
        call = {
            "id": "call_1",
            "type": "function",
            "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'},
        }
        assistant = {"role": "assistant", "content": None, "tool_calls": [call]}
        cid1 = serve([user], sampled_call)
        tool = {"role": "tool", "tool_call_id": "call_1", "content": "5"}
        cid2 = serve([user, assistant, tool], "2 + 3 = 5.")
        return Trajectory(
            messages=[Message(**user), Message(**assistant, completion_id=cid1), Message(**tool),
                      Message(role="assistant", content="2 + 3 = 5.", completion_id=cid2)],
            tools=tools,
        )  # fmt: skip

    canonical = conversation(canonical_call).model_copy(update={"reward": 1.0})
    spaced = conversation('<tool_call>\n{"name":"add","arguments":{"a":2,"b":3}}\n</tool_call>').model_copy(
        update={"reward": 0.0}
    )
    result = build_sequences([_group(canonical, spaced)], records.get, template.encode)
    by_trajectory: dict[str, list[Any]] = {}
    for seq in result.sequences:
        by_trajectory.setdefault(seq.trajectory_id, []).append(seq)
    assert [s.turns for s in by_trajectory[canonical.id]] == [2]
    assert [s.turns for s in by_trajectory[spaced.id]] == [1, 1]
    assert result.metrics.prefix_breaks == 1 and result.metrics.record_turns == 4
    one = by_trajectory[canonical.id][0]
    assert tokenizer.decode(_masked(one)) == canonical_call + "2 + 3 = 5."
    assert "<tools>" in tokenizer.decode(one.token_ids)  # the tool block is context, masked out


def test_few_shot_assistant_turns_captured_from_a_langgraph_run_are_prompt_not_loss(tokenizer: Any) -> None:
    """A graph whose prompt holds a hand-written worked example (user -> assistant tool call -> tool
    result -> answer): capture marks the example's assistant turns ``generated=False``, and they
    stay in the sequence as masked-out context instead of being trained as if the model wrote them."""
    from art_adapters._capture.langchain import TrajectoryCallbackHandler
    from tests.capture.test_langchain import few_shot_graph
    from tests.helpers.capture_fakes import PolicyChatModel, add, calculator_policy, multiply

    handler = TrajectoryCallbackHandler()
    graph = few_shot_graph(PolicyChatModel(policy=calculator_policy), [add, multiply])
    for question in ("what is 2 + 3 times 4", "what is 1 + 2 times 3"):
        graph.invoke({"messages": [("user", question)]}, config={"callbacks": [handler]})
    trajectories = [
        t.model_copy(update={"reward": r}) for t, r in zip(handler.trajectories, [1.0, 0.0], strict=True)
    ]
    assert [[m.generated for m in t.messages if m.role == "assistant"] for t in trajectories] == [
        [False, False, True, True]
    ] * 2
    render = _server_template(tokenizer).encode

    def no_records(completion_id: str) -> None:  # the fake model's turns were served elsewhere: re-tokenised
        return None

    result = build_sequences([_group(*trajectories)], no_records, render)
    m = result.metrics
    assert (m.prompt_turns, m.fallback_turns, m.record_turns, m.sequences) == (4, 4, 0, 2)
    seq = result.sequences[0]
    assert seq.turns == 2
    trained, context = tokenizer.decode(_masked(seq)), tokenizer.decode(seq.token_ids)
    assert "Let me compute." in trained and "The results are 5 and 12." in trained
    assert "I will add." not in trained and "The answer is 2." not in trained
    assert "I will add." in context and "The answer is 2." in context  # still in the tokens, as prompt

    # Before the marker (or for hand-built trajectories, generated=None) the example was trained on.
    unknown = [
        t.model_copy(update={"messages": [msg.model_copy(update={"generated": None}) for msg in t.messages]})
        for t in trajectories
    ]
    before = build_sequences([_group(*unknown)], no_records, render)
    assert (before.metrics.prompt_turns, before.metrics.fallback_turns) == (0, 8)
    assert "The answer is 2." in tokenizer.decode(_masked(before.sequences[0]))
    assert before.sequences[0].token_ids == seq.token_ids  # same tokens, only the loss mask differs
    assert all(new <= old for new, old in zip(seq.loss_mask, before.sequences[0].loss_mask, strict=True))


def _sampled(server: Server, message: Message) -> tuple[list[int], list[int]]:
    """The recorded prompt and completion ids of a served turn."""
    record = server.records[message.completion_id]
    return record["prompt_token_ids"], record["choices"][0]["completion_token_ids"]


def test_a_conversation_whose_every_turn_breaks_is_one_sequence_per_turn_of_exactly_the_sampled_tokens(
    render: Any, tokenizer: Any
) -> None:
    """Qwen3's template drops an earlier turn's thinking from later prompts, so no later prompt
    extends what was sampled: each turn becomes its own sequence, its recorded prompt then its
    sampled completion, instead of a re-tokenised copy of the conversation. Both cases counted."""
    server = Server(render)
    history: list[dict[str, Any]] = []
    messages: list[Message] = []
    thinking: list[Message] = []
    for i, question in enumerate(["Hi", "Add 2 and 3", "Thanks"]):
        history.append({"role": "user", "content": question})
        answer = f"Answer {i}."
        turn = server.complete(history, answer, sampled=f"<think>\nStep {i}.\n</think>\n\n{answer}")
        messages += [Message(**history[-1]), turn]
        thinking.append(turn)
        history.append({"role": "assistant", "content": answer})  # what the next prompt renders
    plain: list[Message] = []  # the same questions without thinking: every turn extends
    flat: list[dict[str, Any]] = []
    for question in ["Hi", "Add 2 and 3", "Thanks"]:
        flat.append({"role": "user", "content": question})
        plain += [Message(**flat[-1]), server.complete(flat, "Ok.")]
        flat.append({"role": "assistant", "content": "Ok."})
    broken, extending = Trajectory(messages=messages, reward=1.0), Trajectory(messages=plain, reward=0.0)

    result = build_sequences([_group(broken, extending)], server.get, render)
    per_turn = [s for s in result.sequences if s.trajectory_id == broken.id]
    assert [s.turns for s in per_turn] == [1, 1, 1]
    for sequence, turn in zip(per_turn, thinking, strict=True):
        prompt, completion = _sampled(server, turn)
        assert sequence.token_ids == prompt + completion
        assert _masked(sequence) == completion  # exactly the sampled ids, thinking included
        assert "<think>" in tokenizer.decode(_masked(sequence))
    (whole,) = [s for s in result.sequences if s.trajectory_id == extending.id]
    assert whole.turns == 3
    m = result.metrics
    assert (m.prefix_breaks, m.extended_turns, m.record_turns, m.fallback_turns) == (2, 2, 6, 0)


def test_only_the_policys_turns_are_trained_other_models_turns_are_prompt(
    render: Any, tokenizer: Any
) -> None:
    """A graph with a reviewer beside the policy: with a record, the record's trained_model says
    whose turn it is; without one, the message's model (unknown = the policy's, as before)."""
    server = Server(render)
    h: list[dict[str, Any]] = [{"role": "user", "content": "Why is the sky blue?"}]
    draft = server.complete(h, "Because of the air.")
    h.append({"role": "assistant", "content": "Because of the air."})
    judge = server.complete(h, "Too vague.", trained_model="judge")  # another model on the same backend
    h.append({"role": "assistant", "content": "Too vague."})
    planner = Message(role="assistant", content="Mention scattering.", model="gpt-4o")  # hosted, no record
    h.append(planner.to_openai())
    revision = server.complete(h, "Rayleigh scattering.")
    messages = [Message(**h[0]), draft, judge, planner, revision]
    traj = Trajectory(messages=messages, reward=1.0)
    other = Trajectory(messages=[Message(**h[0]), server.complete(h[:1], "No idea.")], reward=0.0)

    result = build_sequences([_group(traj, other)], server.get, render, policy="agent")
    (seq,) = [s for s in result.sequences if s.trajectory_id == traj.id]
    assert seq.turns == 2
    assert _masked(seq) == _sampled(server, draft)[1] + _sampled(server, revision)[1]
    context = tokenizer.decode(seq.token_ids)
    assert "Too vague." in context and "Mention scattering." in context  # in the prompt, masked out
    assert seq.token_ids == sum(_sampled(server, revision), [])
    m = result.metrics
    assert (m.other_model_turns, m.record_turns, m.fallback_turns, m.extended_turns) == (2, 3, 0, 1)

    everyone = build_sequences([_group(traj, other)], server.get, render)  # no policy: every turn
    assert everyone.metrics.other_model_turns == 0 and everyone.metrics.fallback_turns == 1
    assert "Too vague." in tokenizer.decode(_masked(everyone.sequences[0]))

    # Without records, the message's model decides: unknown or the policy's name (any step) trains.
    served_elsewhere = [
        Message(**h[0]),
        Message(role="assistant", content="Air.", model="agent@3"),
        Message(role="assistant", content="Vague.", model="judge"),
        Message(role="assistant", content="Scattering."),
    ]
    pair = [
        Trajectory(messages=served_elsewhere, reward=1.0),
        Trajectory(messages=served_elsewhere[:2], reward=0.0),
    ]
    by_model = build_sequences([_group(*pair)], lambda cid: None, render, policy="agent")
    assert (by_model.metrics.other_model_turns, by_model.metrics.fallback_turns) == (1, 3)
    trained = tokenizer.decode(_masked(by_model.sequences[0]))
    assert "Air." in trained and "Scattering." in trained and "Vague." not in trained


def test_a_group_of_only_other_models_turns_says_so() -> None:
    user = Message(role="user", content="Hi")
    pair = [
        Trajectory(messages=[user, Message(role="assistant", content=x, model="gpt-4o")], reward=r)
        for x, r in (("Hello", 1.0), ("Yo", 0.0))
    ]
    result = build_sequences([_group(*pair)], lambda cid: None, None, policy="agent")
    assert result.metrics.other_model_turns == 2 and result.sequences == []
    assert "2 assistant turn(s) came from other models" in (result.nothing_trainable_reason or "")


@pytest.mark.parametrize(
    ("model", "expected"),
    [("agent", True), ("agent@0", True), ("agent@12", True), ("agent@x", False), ("agent2", False),
     ("judge@agent", False), ("agent@", False)],
)  # fmt: skip
def test_names_policy(model: str, expected: bool) -> None:
    from art_adapters_backend.training.data import names_policy

    assert names_policy(model, "agent") is expected


#: DeepSeek-R1's layout: the generation prompt opens a think block that a rendered assistant
#: turn does not have, so re-tokenising a turn cannot find its completion after the prompt.
THINKING_PROMPT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}"
)
#: Mistral's rule: roles must alternate, or the template raises.
ALTERNATING_TEMPLATE = (
    "{% for m in messages %}{% if loop.index0 > 0 and m.role == messages[loop.index0 - 1].role %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.mark.parametrize("template", [THINKING_PROMPT_TEMPLATE, ALTERNATING_TEMPLATE], ids=["r1", "mistral"])
def test_a_turn_the_template_cannot_locate_is_skipped_and_counted_not_raised(
    tokenizer: Any, template: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Turns without a record are re-tokenised with the server's template; with a real model's
    template that may be impossible. The turn is skipped with a warning (no loss, still context for
    the next turn) and the step goes on."""
    render = _server_template(tokenizer, template).encode
    user = Message(role="user", content="Hi")
    first, second = Message(role="assistant", content="Hello."), Message(role="assistant", content="Hi!")
    one = Trajectory(messages=[user, first], reward=1.0)
    two = Trajectory(messages=[user, first, second], reward=0.0)  # two assistant turns in a row
    with caplog.at_level("WARNING", logger="art_adapters_backend.training.data"):
        result = build_sequences([_group(one, two)], lambda cid: None, render)
    m = result.metrics
    if template is THINKING_PROMPT_TEMPLATE:
        assert (m.unlocated_turns, m.fallback_turns) == (3, 0) and result.sequences == []
        assert "no sequences" in (result.nothing_trainable_reason or "")
    else:  # the first turn renders; the second breaks the alternation rule
        assert (m.unlocated_turns, m.fallback_turns) == (1, 2)
        assert all(s.turns == 1 for s in result.sequences)
    assert "cannot be re-tokenised" in caplog.text
