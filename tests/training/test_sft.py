"""SFT as a step: ``model.train_sft`` and ``art-adapters sft`` through the real HTTP API.

Learning (the real bundled model and trainer): a teacher answers "What is a + b?" (a, b in 1..9) with
"The answer is N."; the 135M model never answers in that form at step 0. One SFT step on 16 of the
teacher's trajectories (re-tokenised: the teacher was served elsewhere) must make the greedy answers to 16
other questions match the teacher's. Measured: 0/16 at step 0, 15/16 to 16/16 after (seeds 0 and 1,
in-process and over HTTP).

The loss mask: on a multi-turn tool-calling conversation the server sampled, exactly the recorded
completion tokens carry loss (not the few-shot turn, the user turns, the tool output or the template).

The route's errors, idempotency and retention, and the CLI, run on the fake trainer (``fake_backend``:
the real app, the real sequence building, no torch).
"""

from __future__ import annotations

import asyncio
import json
import random
import uuid
from pathlib import Path
from typing import Any

import openai
import pytest
from art_adapters_backend.serving.chat_template import ChatTemplate
from art_adapters_backend.serving.model_family import bundled_chat_template_path
from art_adapters_backend.training.sft import sft_sequences
from typer.testing import CliRunner

from art_adapters import (
    BackendRequestError,
    ConfigError,
    LocalBackend,
    SFTConfig,
    TrainableModel,
    TrainConfig,
    Trajectory,
    load_groups,
    load_trajectories,
)
from art_adapters._trajectory import Message
from art_adapters.apps._cli import app
from tests.helpers.fake_backend import FakeBackend
from tests.helpers.models import registered, unique_name
from tests.helpers.openai_tools import ADD_TOOL
from tests.helpers.sampled_groups import group_from_choices

# --------------------------------------------------------------------------- the task

PAIRS = [(a, b) for a in range(1, 10) for b in range(1, 10)]
random.Random(0).shuffle(PAIRS)
TRAIN, HELD_OUT = PAIRS[:16], PAIRS[16:32]  # disjoint
#: One SFT step: 2 passes over the 16 demonstrations, 8 a update (4 updates).
SFT = SFTConfig(learning_rate=1e-3, epochs=2, batch_size=8, micro_batch_size=8, lora_rank=8, lora_alpha=16)


def question(a: int, b: int) -> Message:
    return Message(role="user", content=f"What is {a} + {b}?")


def teacher_answer(a: int, b: int) -> str:
    return f"The answer is {a + b}."


def teacher_trajectories(pairs: list[tuple[int, int]]) -> list[Trajectory]:
    """What a stronger model answered (served elsewhere: no completion records, ``model`` set)."""
    return [
        Trajectory(messages=[question(a, b), Message(role="assistant", content=answer, model="teacher")])
        for a, b in pairs
        for answer in [teacher_answer(a, b)]
    ]


async def greedy_answers(model: TrainableModel, step: int, pairs: list[tuple[int, int]] = HELD_OUT) -> list[str]:
    client = model.openai_client()

    async def ask(a: int, b: int) -> str:
        reply = await client.chat.completions.create(
            model=model.served_name(step), messages=[question(a, b).to_openai()], temperature=0, max_tokens=8
        )
        return (reply.choices[0].message.content or "").strip()

    try:
        return list(await asyncio.gather(*(ask(a, b) for a, b in pairs)))
    finally:
        await client.close()


def correct(answers: list[str]) -> float:
    right = sum(ans == teacher_answer(a, b) for ans, (a, b) in zip(answers, HELD_OUT, strict=True))
    return right / len(HELD_OUT)


async def sft_model(backend: Any, prefix: str = "sft") -> TrainableModel:
    return await registered(backend, unique_name(prefix), "sft-tests")


# --------------------------------------------------------------------------- the real trainer


@pytest.mark.slow
async def test_sft_on_a_teachers_trajectories_raises_held_out_correctness(
    local_backend: LocalBackend,
) -> None:
    model = await sft_model(local_backend)
    before = await greedy_answers(model, 0)
    result = await model.train_sft(teacher_trajectories(TRAIN), config=SFT)
    assert result.trained and result.step == 1 and result.reason is None, result
    m = result.metrics
    assert m["sequences"] == 16 and m["fallback_turns"] == 16 and m["record_turns"] == 0
    assert m["epochs"] == 2 and m["updates"] == 4 and m["learning_rate"] == SFT.learning_rate
    assert 0 < m["loss"] < m["first_pass_loss"], m  # the second pass fits better than the first
    after = await greedy_answers(model, 1)
    print(f"held-out correct: step 0 {correct(before):.3f}, after SFT {correct(after):.3f}; {after[:4]}")
    assert correct(before) <= 0.1, before
    assert correct(after) >= 0.75, after

    # A checkpoint like a GRPO step's: served as name@1 and name, listed with its metrics, atomic on disk,
    # the trajectories saved first as one group; step 0 still serves the base weights.
    checkpoints = await model.checkpoints()
    assert [c.step for c in checkpoints] == [0, 1]
    assert {"loss", "tokens", "sequences", "learning_rate"} <= set(checkpoints[1].metrics)
    folder = Path(local_backend.run_dir) / "models" / model.name / "checkpoints"
    assert sorted(p.name for p in folder.iterdir()) == ["000001"]
    assert (folder / "000001" / "adapter_model.safetensors").is_file()
    saved = load_groups(result.groups_file or "")
    assert [len(g.trajectories) for g in saved] == [16]
    assert await greedy_answers(model, 0, HELD_OUT[:4]) == before[:4]


# The few-shot turn shows a tool call; the model imitates it (its turns are recorded by the server).
TOOLS = [ADD_TOOL]
EXAMPLE = [
    {"role": "user", "content": "Use the add tool to compute 1 + 2."},
    {
        "role": "assistant",
        "content": '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>',
    },
]


@pytest.mark.slow
async def test_loss_is_on_the_recorded_assistant_tokens_only(
    local_backend: LocalBackend, tokenizer: Any
) -> None:
    model = await sft_model(local_backend, "sft-mask")
    client = model.openai_client()
    ask = {"role": "user", "content": "Now compute 12 + 30 with the add tool."}
    first = await client.chat.completions.create(
        model=model.served_name(), messages=[*EXAMPLE, ask], tools=TOOLS, temperature=0, max_tokens=40
    )
    calls = first.choices[0].message.tool_calls or []
    assert calls, f"the model made no tool call: {first.choices[0].message.content!r}"
    call_turn = json.loads(first.choices[0].message.model_dump_json(exclude_none=True))
    tool_outputs = [{"role": "tool", "tool_call_id": c.id, "content": "42"} for c in calls]
    second = await client.chat.completions.create(
        model=model.served_name(), messages=[*EXAMPLE, ask, call_turn, *tool_outputs], tools=TOOLS,
        temperature=0, max_tokens=8,
    )  # fmt: skip
    await client.close()
    records = {r: await local_backend.get_token_record(r) for r in (first.id, second.id)}
    messages = [
        *(Message(**m, generated=False if m["role"] == "assistant" else None) for m in EXAMPLE),
        Message(**ask),
        Message(**call_turn, completion_id=first.id),
        *(Message(**t) for t in tool_outputs),
        Message(role="assistant", content=second.choices[0].message.content, completion_id=second.id),
    ]
    trajectory = Trajectory(messages=messages, tools=TOOLS)
    sampled = [records[r]["choices"][0]["completion_token_ids"] for r in (first.id, second.id)]

    template = ChatTemplate(tokenizer, bundled_chat_template_path().read_text())
    built = sft_sequences([trajectory], records.get, template.encode)
    assert built.metrics.record_turns == 2 and built.metrics.fallback_turns == 0
    assert built.metrics.prompt_turns == 1  # the few-shot turn is prompt
    trained = [[t for t, m in zip(s.token_ids, s.loss_mask, strict=True) if m] for s in built.sequences]
    assert [t for part in trained for t in part] == [t for ids in sampled for t in ids]
    first_prompt = records[first.id]["prompt_token_ids"]  # as rendered when sampled, the few-shot turn in it
    assert built.sequences[0].token_ids[: len(first_prompt)] == first_prompt
    assert not any(built.sequences[0].loss_mask[: len(first_prompt)])

    # Over HTTP, the same trajectory trains those tokens: recorded turns, no re-tokenising.
    result = await model.train_sft([trajectory], config=SFTConfig(lora_rank=8, lora_alpha=16))
    assert result.trained and result.step == 1
    assert result.metrics["record_turns"] == 2 and result.metrics["fallback_turns"] == 0
    assert result.metrics["prompt_turns"] == 1
    assert result.metrics["tokens"] == sum(len(ids) for ids in sampled)


# --------------------------------------------------------------------------- the API on the fake trainer


async def test_bad_input_is_a_clear_error(fake_backend: FakeBackend) -> None:
    model = await sft_model(fake_backend)
    with pytest.raises(ConfigError, match="at least one trajectory"):
        await model.train_sft([])
    with pytest.raises(ConfigError, match="must be an SFTConfig"):
        await model.train_sft(teacher_trajectories(TRAIN[:1]), config=TrainConfig())  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"trajectories\[0\] is a dict"):
        await model.train_sft([{"messages": []}])  # type: ignore[list-item]
    no_turn = Trajectory(messages=[question(1, 2)])
    few_shot_only = Trajectory(
        messages=[question(1, 2), Message(role="assistant", content="3", generated=False), question(2, 2)]
    )
    with pytest.raises(BackendRequestError) as info:
        await model.train_sft([no_turn, few_shot_only])
    assert info.value.status_code == 400
    assert "none of the 2 trajectories has an assistant turn" in str(info.value)

    path = f"/art/models/{model.name}/train_sft"
    cases = [
        ({"trajectories": []}, "trajectories is empty"),
        ({"trajectories": "nope"}, "trajectories"),
        ({"trajectories": [{"messages": [{"role": "robot"}]}]}, "role"),
        ({"trajectories": [], "config": {"epochs": 0}}, "epochs"),
        ({"trajectories": [], "config": {"beta": 0.1}}, "beta"),  # a TrainConfig field
        ({"trajectories": [], "config": {"lora_target_modules": []}}, "lora_target_modules"),
    ]
    for body, needle in cases:
        with pytest.raises(BackendRequestError) as info:
            await fake_backend.request("POST", path, json=body)
        assert info.value.status_code == 400 and needle in str(info.value), (body, str(info.value))
    body = {"trajectories": [t.model_dump(mode="json") for t in teacher_trajectories(TRAIN[:1])],
            "config": {"lora_target_modules": ["no_such_proj"]}}  # fmt: skip
    with pytest.raises(BackendRequestError) as info:
        await fake_backend.request("POST", path, json=body)
    assert info.value.status_code == 400 and "no_such_proj" in str(info.value)
    ghost = TrainableModel(name="never-registered-sft")
    ghost._backend = fake_backend
    with pytest.raises(BackendRequestError) as info:
        await ghost.train_sft(teacher_trajectories(TRAIN[:1]))
    assert info.value.status_code == 404
    assert await model.get_step() == 0


async def test_nothing_trainable_idempotency_retention_and_grpo_after(fake_backend: FakeBackend) -> None:
    model = await sft_model(fake_backend)
    demos = teacher_trajectories(TRAIN[:4])
    # Every sequence too long: said so, no step.
    nothing = await model.train_sft(demos, config=SFTConfig(max_sequence_length=5))
    assert not nothing.trained and nothing.step == 0
    assert "4 sequences longer than max_sequence_length" in (nothing.reason or "")
    # Turns of another model than only_model are prompt: nothing to imitate.
    other = await model.train_sft(demos, config=SFTConfig(only_model="someone-else"))
    assert not other.trained and "4 assistant turns of other models" in (other.reason or "")

    first = await model.train_sft(demos, config=SFTConfig(only_model="teacher"), idempotency_key="sft-key-1")
    assert first.trained and first.step == 1 and first.metrics["sequences"] == 4
    again = await model.train_sft(demos, config=SFTConfig(only_model="teacher"), idempotency_key="sft-key-1")
    assert again.replayed and again.step == 1 and await model.get_step() == 1
    with pytest.raises(BackendRequestError) as info:  # the key with another body
        await model.train_sft(demos[:2], config=SFTConfig(only_model="teacher"), idempotency_key="sft-key-1")
    assert info.value.status_code == 409

    second = await model.train_sft(demos, config=SFTConfig(retention={"keep_latest": 1}))
    assert second.step == 2 and second.deleted_steps == [1]
    assert [c.step for c in await model.checkpoints()] == [0, 2]
    client = model.openai_client()
    reply = await client.chat.completions.create(
        model=f"{model.name}@2", messages=[question(1, 1).to_openai()], max_tokens=2
    )
    assert (await fake_backend.get_token_record(reply.id))["step"] == 2
    with pytest.raises(openai.NotFoundError):
        await client.chat.completions.create(model=f"{model.name}@1", messages=[question(1, 1).to_openai()])
    await client.close()


# --------------------------------------------------------------------------- the CLI


async def cli(*args: str) -> tuple[int, str]:
    result = await asyncio.to_thread(CliRunner().invoke, app, ["sft", *args])
    return result.exit_code, " ".join(result.output.split())  # rich wraps long lines


async def test_only_model_name_at_step_trains_that_checkpoints_turns_only(fake_backend: FakeBackend) -> None:
    """``only_model="name@step"`` picks one checkpoint's recorded turns; the bare name picks every step's."""
    model = await sft_model(fake_backend, "sft-at")
    assert (await model.train_sft(teacher_trajectories(TRAIN[:2]))).step == 1
    client = model.openai_client()

    async def sampled(served: str) -> Trajectory:
        """A run whose one assistant turn ``served`` answered (linked to its token record)."""
        ask = question(2, 3)
        reply = await client.chat.completions.create(model=served, messages=[ask.to_openai()], max_tokens=4)
        return group_from_choices([ask], reply, reward=lambda _: 0.0).trajectories[0]

    runs = [await sampled(f"{model.name}@0"), await sampled(f"{model.name}@1")]
    at_1 = await model.train_sft(runs, config=SFTConfig(only_model=f"{model.name}@1"))
    assert at_1.trained and at_1.metrics["sequences"] == 1 and at_1.metrics["other_model_turns"] == 1, at_1
    assert at_1.metrics["record_turns"] == 1, at_1.metrics  # the exact sampled tokens, from the record
    at_5 = await model.train_sft(runs, config=SFTConfig(only_model=f"{model.name}@5"))
    assert not at_5.trained and "2 assistant turns of other models" in (at_5.reason or ""), at_5
    every = await model.train_sft(runs, config=SFTConfig(only_model=model.name))
    assert every.trained and every.metrics["sequences"] == 2, every
    assert every.metrics["other_model_turns"] == 0, every


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


async def test_cli_trains_a_trajectories_file_and_says_what_is_wrong(
    fake_backend: FakeBackend, tmp_path: Path
) -> None:
    name = f"sft-cli-{uuid.uuid4().hex[:6]}"
    common = ["--model", name, "--backend", fake_backend.base_url, "--epochs", "2"]
    common += ["--learning-rate", "0.001"]
    demos = teacher_trajectories(TRAIN[:3])
    good = write_lines(tmp_path / "prod.jsonl", [t.model_dump_json() for t in demos] + [""])  # a blank line
    code, output = await cli(str(good), *common)
    assert code == 0, output
    assert "3 trajectories" in output and f"{name}@1 trained and served" in output and "2 epoch(s)" in output
    model = TrainableModel(name=name)
    model._backend = fake_backend
    checkpoints = await model.checkpoints()
    assert [c.step for c in checkpoints] == [0, 1] and checkpoints[1].metrics["learning_rate"] == 0.001

    code, output = await cli(str(tmp_path / "missing.jsonl"), *common)
    assert code == 2 and "no trajectories file at" in output and "art-adapters import" in output
    code, output = await cli(str(write_lines(tmp_path / "empty.jsonl", [])), *common)
    assert code == 2 and "holds no trajectory" in output
    bad = write_lines(tmp_path / "bad.jsonl", [demos[0].model_dump_json(), "{not json"])
    code, output = await cli(str(bad), *common)
    assert code == 2 and "bad.jsonl:2:notJSON" in "".join(output.split())  # (rich may wrap after the path)
    robot = '{"messages": [{"role": "robot"}]}'
    wrong = write_lines(tmp_path / "wrong.jsonl", [demos[0].model_dump_json(), robot])
    code, output = await cli(str(wrong), *common)
    assert code == 2 and "wrong.jsonl:2:notaTrajectory:messages.0.role" in "".join(output.split())
    user_only = Trajectory(messages=[question(1, 2)]).model_dump_json()
    no_turns = write_lines(tmp_path / "users.jsonl", [user_only])
    code, output = await cli(str(no_turns), *common)
    assert code == 2 and "has an assistant turn" in output
    code, output = await cli(str(good), "--model", name, "--backend", fake_backend.base_url, "--epochs", "0")
    assert code == 2 and "epochs" in output
    code, output = await cli(str(good), *common, "--max-sequence-length", "4")
    assert code == 1 and "nothing trained (still at step 1)" in output
    assert [c.step for c in await model.checkpoints()] == [0, 1]


def test_load_trajectories_reads_groups_too(tmp_path: Path) -> None:
    from art_adapters import TrajectoryGroup, save_groups

    demos = teacher_trajectories(TRAIN[:4])
    path = save_groups(tmp_path / "rollouts.jsonl", [TrajectoryGroup(trajectories=demos[:2]),
                                                     TrajectoryGroup(trajectories=demos[2:])])  # fmt: skip
    assert [t.id for t in load_trajectories(path)] == [t.id for t in demos]
    with pytest.raises(ConfigError, match=r"rollouts.jsonl:1: a line must be one Trajectory object"):
        load_trajectories(write_lines(path, ["[1, 2]"]))
