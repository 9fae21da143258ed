"""Issue 15's model-facing training features on each model family: SFT on a teacher's trajectory,
several CISPO updates per GRPO step, and per-turn credit.

* SFT (``model.train_sft``) on a hand-built trajectory the backend never sampled: its two assistant
  turns are re-tokenised with the family's chat template. The test renders the conversation itself
  (the tokenizer's ``apply_chat_template`` with the family's template, vLLM's conversation and tools
  as written in :mod:`tests.helpers.families_support`, not the backend's ``chat_template`` module)
  and checks the loss-token count, the sequences, and the first pass's loss against the base model's
  next-token cross-entropy computed here with plain transformers. The step is served as ``name@1``.
* A GRPO step with ``num_iterations=2, mini_batches=2, loss_type="cispo"`` on four captured runs of
  a real LangGraph graph makes four updates, reports each pass, and its second pass is off-policy.
* ``credit="turn"`` on the same runs with ``metadata["turn_rewards"]`` trains a step.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch

from art_adapters import (
    SFTConfig,
    TrainableModel,
    TrainConfig,
    TrajectoryGroup,
)
from art_adapters._trajectory import Message, ToolSchema, Trajectory
from tests.helpers.families_support import (
    ADD,
    SYSTEM,
    Family,
    assert_served_at_step_1,
    assert_step_1_on_records,
    captured_add_run,
    family_lr,
    family_model,
    forced_add_graph,
    vllm_conversation,
    vllm_tools,
)

#: Real model families only, as in test_family_training.
pytestmark = [pytest.mark.slow, pytest.mark.parametrize("family", ["qwen3", "smollm2"], indirect=True)]

#: The teacher's conversation, as OpenAI messages: a tool call, its result, an answer.
TEACHER: list[dict[str, Any]] = [
    {"role": "system", "content": SYSTEM},
    {"role": "user", "content": "What is 2 + 3?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}
        ],
    },
    {"role": "tool", "content": "5", "tool_call_id": "call_1"},
    {"role": "assistant", "content": "2 + 3 = 5."},
]
ASSISTANT_TURNS = [2, 4]


def _ids(family: Family, messages: list[dict[str, Any]], *, generation_prompt: bool) -> list[int]:
    """``messages`` (with the ``add`` tool) in the family's chat template, tokenised as vLLM does."""
    text = family.tokenizer.apply_chat_template(
        vllm_conversation(messages),
        tools=vllm_tools([ADD]),
        chat_template=family.chat_template,
        add_generation_prompt=generation_prompt,
        tokenize=False,
    )
    return list(family.tokenizer(str(text), add_special_tokens=False)["input_ids"])


def _model_path(family: Family) -> Path:
    if Path(family.base_model).is_dir():
        return Path(family.base_model)
    from art_adapters_backend.bundled import resolve_model_path

    return Path(resolve_model_path(family.base_model))


def _base_loss(family: Family, sequences: list[tuple[list[int], list[int]]]) -> float:
    """The base model's mean next-token cross-entropy over the masked tokens of (ids, mask) sequences."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(_model_path(family)), dtype=torch.float32).eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for ids, mask in sequences:
            logits = model(input_ids=torch.tensor([ids])).logits[0].float()  # (T, V)
            logprobs = torch.log_softmax(logits[:-1], dim=-1)  # position t-1 predicts token t
            for t in range(1, len(ids)):
                if mask[t]:
                    total -= logprobs[t - 1, ids[t]].item()
                    count += 1
    return total / count


@pytest.fixture(scope="session")
async def sft(family: Family) -> dict[str, Any]:
    """One SFT step (two passes) of a fresh model on the teacher's trajectory (step 1)."""
    model = await family_model(family, "sft")
    trajectory = Trajectory(
        messages=[Message.model_validate({**m, "model": "teacher"} if m["role"] == "assistant" else m)
                  for m in TEACHER],  # fmt: skip
        tools=[ToolSchema.model_validate(ADD)],
    )
    result = await model.train_sft([trajectory], config=SFTConfig(epochs=2, learning_rate=5e-4))
    return {"model": model, "result": result}


async def test_sft_on_a_teachers_trajectory_trains_the_chat_templates_tokens_of_its_assistant_turns(
    family: Family, sft: dict[str, Any]
) -> None:
    result = sft["result"]
    assert result.trained and result.step == 1, result
    metrics = result.metrics

    # The rule data.py implements for a turn without a record: its prompt is the history before it
    # rendered WITH the generation prompt, its loss tokens what rendering the turn itself (no
    # generation prompt) adds after that. So the generation prompt (``<|im_start|>assistant\n``) is
    # prompt, and the turn's closing tokens (``<|im_end|>\n``: the template's newline too) are loss.
    # On Qwen3 the loss tokens also hold the empty ``<think>\n\n</think>\n\n`` block its template
    # writes before the last assistant turn.
    turns = []
    for index in ASSISTANT_TURNS:
        prompt = _ids(family, TEACHER[:index], generation_prompt=True)
        full = _ids(family, TEACHER[: index + 1], generation_prompt=False)
        assert full[: len(prompt)] == prompt, index  # the template renders turns prefix-stably
        turns.append((prompt, full))
    (prompt_1, full_1), (prompt_2, full_2) = turns
    loss_tokens = sum(len(full) - len(prompt) for prompt, full in turns)

    # The answer turn joins the call turn's sequence when its prompt extends it; Qwen3's template
    # drops the empty thinking block from the call turn once it is history, so there it does not.
    extends = prompt_2[: len(full_1)] == full_1
    assert extends == (family.name != "qwen3")
    if extends:
        mask_2 = [0] * len(prompt_1) + [1] * (len(full_1) - len(prompt_1))
        mask_2 += [0] * (len(prompt_2) - len(full_1)) + [1] * (len(full_2) - len(prompt_2))
        sequences = [(full_2, mask_2)]
    else:
        sequences = [
            (full, [0] * len(prompt) + [1] * (len(full) - len(prompt))) for prompt, full in turns
        ]
    assert sum(sum(mask) for _, mask in sequences) == loss_tokens

    print(
        f"{family.name}: SFT on {loss_tokens} loss tokens in {len(sequences)} sequence(s); "
        f"loss {metrics['first_pass_loss']:.4f} -> {metrics['loss']:.4f}"
    )
    built = (metrics["record_turns"], metrics["fallback_turns"], metrics["missing_records"])
    assert built == (0, 2, 0), metrics
    assert (metrics["unlocated_turns"], metrics["prompt_turns"], metrics["other_model_turns"]) == (0, 0, 0)
    assert metrics["tokens"] == metrics["loss_tokens"] == loss_tokens, metrics
    assert metrics["sequences"] == len(sequences) and metrics["prefix_breaks"] == (0 if extends else 1)
    assert metrics["sequence_tokens"] == sum(len(ids) for ids, _ in sequences), metrics
    assert (metrics["epochs"], metrics["updates"]) == (2, 2), metrics  # one update per pass (batch_size 8)
    # The first pass's one update is measured on the weights the step started from: the base model
    # (a new LoRA adapter's B matrices are zero), here in plain transformers on the same tokens.
    assert metrics["first_pass_loss"] == pytest.approx(_base_loss(family, sequences), rel=1e-4)
    assert math.isfinite(metrics["loss"]) and metrics["loss"] < metrics["first_pass_loss"]
    assert metrics["grad_norm"] > 0


async def test_the_sft_step_is_served_as_name_at_1(family: Family, sft: dict[str, Any]) -> None:
    model: TrainableModel = sft["model"]
    await assert_served_at_step_1(family, model)


# --------------------------------------------------------------------------- GRPO on captured runs


@pytest.fixture(scope="session")
async def captured(family: Family) -> dict[str, Any]:
    """A fresh model and four captured graph runs of it (step 0), rewards [1, 0, 1, 0]."""
    model = await family_model(family, "grpo")
    graph = forced_add_graph(model, answer_tokens=6)
    runs = [await captured_add_run(graph) for _ in range(4)]
    runs = [run.model_copy(update={"reward": r}) for run, r in zip(runs, [1.0, 0.0, 1.0, 0.0], strict=True)]
    return {"model": model, "runs": runs}


@pytest.fixture(scope="session")
async def cispo(family: Family, captured: dict[str, Any]) -> Any:
    """Step 1: two passes of two CISPO updates each on the captured runs."""
    config = TrainConfig(learning_rate=family_lr(family), num_iterations=2, mini_batches=2, loss_type="cispo")
    return await captured["model"].train([TrajectoryGroup(trajectories=captured["runs"])], config=config)


async def test_a_grpo_step_makes_two_passes_of_two_cispo_updates(family: Family, cispo: Any) -> None:
    assert_step_1_on_records(cispo, 8)
    metrics = cispo.metrics
    assert metrics["updates"] == 4, metrics
    for key in ("loss", "clip_low_fraction", "clip_high_fraction", "ratio_mean", "policy_shift"):
        assert math.isfinite(metrics[f"pass_1_{key}"]) and math.isfinite(metrics[f"pass_2_{key}"]), key
    assert not any(key.startswith("pass_3_") for key in metrics), metrics
    print(
        f"{family.name}: CISPO 2x2 updates on {metrics['sequences']} sequences, ratio mean "
        f"pass 1 {metrics['pass_1_ratio_mean']:.6f}, pass 2 {metrics['pass_2_ratio_mean']:.6f}; policy shift "
        f"pass 1 {metrics['pass_1_policy_shift']:.6f}, pass 2 {metrics['pass_2_policy_shift']:.6f}"
    )
    # The second pass scores its tokens with weights two updates past the sampling ones.
    assert metrics["pass_2_ratio_mean"] != 1.0
    assert metrics["pass_2_ratio_mean"] != metrics["pass_1_ratio_mean"]


async def test_per_turn_credit_trains_a_step_on_the_same_runs(
    family: Family, captured: dict[str, Any], cispo: Any
) -> None:
    turn_rewards = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, 0.0]]  # one per assistant message
    runs = [
        run.model_copy(update={"metadata": {**run.metadata, "turn_rewards": rewards}})
        for run, rewards in zip(captured["runs"], turn_rewards, strict=True)
    ]
    config = TrainConfig(learning_rate=family_lr(family), credit="turn")
    result = await captured["model"].train([TrajectoryGroup(trajectories=runs)], config=config)
    assert result.trained and result.step == cispo.step + 1, result
    assert (result.metrics["record_turns"], result.metrics["fallback_turns"]) == (8, 0), result.metrics
    assert result.metrics["grad_norm"] > 0
