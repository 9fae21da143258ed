"""PeftTrainer on the real bundled model: on-policy ratio, learning on a toy batch, save/resume."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
from art_adapters_backend.training.checkpoints import CheckpointStore
from art_adapters_backend.training.data import NothingTrainableError, TrainingSequence
from art_adapters_backend.training.peft_trainer import PeftTrainer

from art_adapters import TrainConfig
from tests.helpers.toy_sequences import toy_sequences

pytestmark = pytest.mark.slow

CONFIG = TrainConfig(learning_rate=5e-4, micro_batch_size=2, lora_rank=8, lora_alpha=16)


def transformers_5() -> bool:
    import transformers

    return int(transformers.__version__.split(".")[0]) >= 5


@pytest.fixture(scope="module")
def toy(tokenizer: Any, render: Any) -> list[TrainingSequence]:
    """Four real conversations: prompt (masked out) + completion (masked in), unequal advantages."""
    return toy_sequences(tokenizer, render, group_of=lambda i: "g")


def _with_old_logprobs(
    sequences: list[TrainingSequence], logprobs: list[list[float]]
) -> list[TrainingSequence]:
    return [
        s.model_copy(
            update={"old_logprobs": [x if m else None for x, m in zip(lp, s.loss_mask, strict=True)]}
        )
        for s, lp in zip(sequences, logprobs, strict=True)
    ]


def test_ratio_is_one_on_policy_and_the_loss_falls_on_a_fixed_batch(
    trainer: PeftTrainer, toy: list[TrainingSequence], tmp_path: Path
) -> None:
    # Old log-probs from our own forward pass (full logits): the first step is exactly on-policy,
    # which also checks the step's loss-only logits path (transformers 5) against the full one.
    assert trainer.select_logits or not transformers_5()
    batch = _with_old_logprobs(toy, trainer.score(toy, CONFIG))
    first = trainer.train_step(batch, CONFIG)
    assert first.ratio_mean == pytest.approx(1.0, abs=1e-5)
    assert first.clip_fraction == 0.0 and first.kl is None
    expected = -sum(s.advantage * s.loss_tokens for s in toy) / sum(s.loss_tokens for s in toy)
    assert first.loss == pytest.approx(expected, abs=1e-4)  # on-policy: -mean over tokens of A
    assert (
        first.tokens == sum(s.loss_tokens for s in toy) and first.micro_batches == 2 and first.grad_norm > 0
    )
    losses = [first.loss] + [trainer.train_step(batch, CONFIG).loss for _ in range(2)]
    assert losses[-1] < losses[0] - 0.03, losses
    assert all(b <= a + 1e-6 for a, b in itertools.pairwise(losses)), losses
    # The policy moved in the advantage's direction: up for A > 0, down for A < 0.
    now = trainer.score(toy, CONFIG)
    for seq, after in zip(batch, now, strict=True):
        delta = sum(a - b for a, b, m in zip(after, seq.old_logprobs, seq.loss_mask, strict=True) if m)
        assert (delta > 0) == (seq.advantage > 0), (seq.advantage, delta)

    # Save atomically; train on; resume from the folder: the same policy and the same next step
    # (so the optimizer state came back too).
    saved = trainer.save_adapter(tmp_path / "ckpt")
    assert {"adapter_config.json", "adapter_model.safetensors", "optimizer.pt"} <= {
        p.name for p in saved.iterdir()
    }
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]
    with pytest.raises(FileExistsError):
        trainer.save_adapter(tmp_path / "ckpt")
    ahead = trainer.train_step(batch, CONFIG)
    trainer.load_adapter(saved, CONFIG)
    assert trainer.steps_done == 3
    resumed = trainer.score(toy, CONFIG)
    assert (
        max(abs(a - b) for x, y in zip(now, resumed, strict=True) for a, b in zip(x, y, strict=True)) < 1e-5
    )
    again = trainer.train_step(batch, CONFIG)
    assert again.loss == pytest.approx(ahead.loss, abs=1e-5) and again.grad_norm == pytest.approx(
        ahead.grad_norm, rel=1e-4
    )
    assert again.step == 4
    assert trainer.score(toy[:1], CONFIG)[0] != resumed[0]  # and it trains on from there

    # The checkpoint store writes the same folder under its step, and lists it once complete.
    store = CheckpointStore(tmp_path / "store")
    checkpoint = store.write(5, trainer.write_adapter, {"reward_mean": 0.5})
    assert store.latest() == checkpoint and (checkpoint.path / "adapter_model.safetensors").is_file()


def test_kl_to_the_adapter_free_reference_starts_at_zero(
    bundled_path: Path, toy: list[TrainingSequence], tmp_path: Path
) -> None:
    fresh = PeftTrainer(bundled_path)
    with pytest.raises(RuntimeError, match="no adapter"):
        fresh.save_adapter(tmp_path / "x")
    assert not (tmp_path / "x").exists()
    with pytest.raises(ValueError, match="set lora_target_modules"):
        fresh.train_step(toy, CONFIG.model_copy(update={"lora_target_modules": ("no_such_proj",)}))
    assert not fresh.has_adapter
    config = CONFIG.model_copy(update={"beta": 0.1})
    first = fresh.train_step(toy, config)  # LoRA B starts at 0: the policy equals the reference
    assert first.kl == pytest.approx(0.0, abs=1e-7)
    second = fresh.train_step(toy, config)
    assert second.kl is not None and second.kl > 0


def test_nothing_trainable_is_an_error_never_a_silent_no_op(
    trainer: PeftTrainer, toy: list[TrainingSequence]
) -> None:
    with pytest.raises(NothingTrainableError, match="no sequences"):
        trainer.train_step([], CONFIG)
    masked_out = [s.model_copy(update={"loss_mask": [0] * len(s.token_ids)}) for s in toy]
    with pytest.raises(NothingTrainableError, match="loss token"):
        trainer.train_step(masked_out, CONFIG)
    broken = toy[0].model_copy(update={"loss_mask": [1]})
    with pytest.raises(ValueError, match="same non-zero length"):
        trainer.train_step([broken], CONFIG)


def test_unknown_old_logprobs_are_on_policy(trainer: PeftTrainer, toy: list[TrainingSequence]) -> None:
    """Fallback turns (no sampling log-probs) are scored by the current policy: ratio 1 at any step."""
    metrics = trainer.train_step(toy, CONFIG)
    assert metrics.ratio_mean == pytest.approx(1.0, abs=1e-6) and metrics.clip_fraction == 0.0


def test_scores_use_each_sequence_sampling_temperature(
    trainer: PeftTrainer, toy: list[TrainingSequence]
) -> None:
    hot = [toy[0].model_copy(update={"temperature": 2.0}), toy[1]]
    plain, tempered = trainer.score(toy[:2], CONFIG), trainer.score(hot, CONFIG)
    assert tempered[1] == pytest.approx(plain[1], abs=1e-5)  # same row, temperature 1
    # The first row is scored at temperature 2: different log-probs.
    diffs = [a - b for a, b, m in zip(tempered[0], plain[0], toy[0].loss_mask, strict=True) if m]
    assert max(abs(d) for d in diffs) > 1e-3


def test_load_adapter_rejects_a_folder_without_an_adapter(trainer: PeftTrainer, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="adapter_config.json"):
        trainer.load_adapter(tmp_path)


def test_train_groups_goes_from_scored_groups_to_one_step_or_says_why_not(
    trainer: PeftTrainer, tokenizer: Any, render: Any
) -> None:
    from art_adapters import Message, Trajectory, TrajectoryGroup

    user = {"role": "user", "content": "Reply with one word."}
    records: dict[str, dict[str, Any]] = {}

    def trajectory(i: int, text: str, reward: float) -> Trajectory:
        prompt = render([user], None, add_generation_prompt=True)
        ids = tokenizer.encode(text, add_special_tokens=False)
        records[f"c{i}"] = {
            "prompt_token_ids": prompt,
            "temperature": 1.0,
            "choices": [{"index": 0, "completion_token_ids": ids, "logprobs": [-1.0] * len(ids)}],
        }
        return Trajectory(
            messages=[Message(**user), Message(role="assistant", content=text, completion_id=f"c{i}")],
            reward=reward,
        )

    good = TrajectoryGroup(trajectories=[trajectory(0, "Yes", 1.0), trajectory(1, "Well, maybe so", 0.0)])
    flat = TrajectoryGroup(trajectories=[trajectory(2, "Yes", 0.5), trajectory(3, "No", 0.5)])
    result = trainer.train_groups([good, flat], records.get, render, CONFIG)
    assert result.trained and result.step is not None and result.step.sequences == 2
    assert result.data.groups_used == 1 and result.data.groups_dropped == {"zero_variance": 1}
    assert result.step.tokens == result.data.loss_tokens
    steps_before = trainer.steps_done
    skipped = trainer.train_groups([flat], records.get, render, CONFIG)
    assert not skipped.trained and skipped.step is None and trainer.steps_done == steps_before
    assert "nothing trainable" in (skipped.nothing_trainable_reason or "")
