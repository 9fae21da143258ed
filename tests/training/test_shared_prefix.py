"""Prefix sharing (a group's common prompt forwarded once per micro-batch) gives the same step:
same loss, KL, gradient norm and updated LoRA weights as forwarding every sequence in full."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from art_adapters_backend.training.data import TrainingSequence
from art_adapters_backend.training.peft_trainer import PeftTrainer
from art_adapters_backend.training.batches import shared_prefix_length

from art_adapters import SFTConfig, TrainConfig

from tests.helpers.same_start import from_one_start, off_policy
from tests.helpers.toy_sequences import completion_sequence

PROMPT = 48


def _group(vocab: int) -> list[TrainingSequence]:
    gen = torch.Generator().manual_seed(5)
    prompt = torch.randint(100, vocab, (PROMPT,), generator=gen).tolist()
    out = []
    for i, length in enumerate([5, 9, 7, 6]):
        completion = torch.randint(100, vocab, (length,), generator=gen).tolist()
        advantage = [1.0, -0.5, 0.25, -0.75][i]
        out.append(completion_sequence(prompt, completion, advantage, "g", f"t{i}", temperature=0.8))
    return out


def test_shared_prefix_length_stops_at_the_first_loss_token_and_leaves_a_token() -> None:
    def seq(ids: list[int], mask: list[int]) -> TrainingSequence:
        return TrainingSequence(token_ids=ids, loss_mask=mask, old_logprobs=[None] * len(ids), advantage=0.0,
                                group_id="g", trajectory_id="t")  # fmt: skip

    assert shared_prefix_length([seq([1, 2, 3, 4], [0, 0, 1, 1]), seq([1, 2, 3, 5], [0, 0, 0, 1])]) == 2
    assert shared_prefix_length([seq([1, 2, 3], [0, 0, 0]), seq([1, 2, 3, 4], [0, 0, 0, 1])]) == 2
    assert shared_prefix_length([seq([7, 2], [0, 1]), seq([1, 2], [0, 1])]) == 0


@pytest.mark.slow
def test_shared_prefix_step_equals_the_full_step(bundled_path: Path) -> None:
    trainer = PeftTrainer(bundled_path)
    base = TrainConfig(learning_rate=1e-3, beta=0.05, micro_batch_size=4, seed=1)
    trainer.ensure_adapter(base)
    assert trainer.model is not None and trainer.optimizer is not None
    seqs = off_policy(trainer, _group(int(trainer.model.config.vocab_size)), base, 0.3)
    full, update_full, shared, update_shared = from_one_start(
        trainer,
        lambda: trainer.train_step(seqs, base.model_copy(update={"share_prefix": False})),
        lambda: trainer.train_step(seqs, base.model_copy(update={"share_prefix": True})),
    )

    assert shared.padded_tokens < full.padded_tokens  # the prompt was forwarded once, not 4 times
    assert shared.clip_fraction == full.clip_fraction and shared.clip_fraction > 0
    assert abs(shared.loss - full.loss) < 1e-5 and abs((shared.kl or 0) - (full.kl or 0)) < 1e-6
    assert abs(shared.grad_norm - full.grad_norm) < 1e-4 * max(1.0, full.grad_norm)
    # Adam's first update is ~lr x sign(grad), so compare the update directions (entries whose
    # gradient is ~0 may flip sign on float noise; the step as a whole must agree).
    cosine = torch.nn.functional.cosine_similarity(update_full, update_shared, dim=0).item()
    assert update_full.abs().max() > 1e-4 and cosine > 0.999, cosine


@pytest.mark.slow
def test_an_sft_step_shares_the_prefix_too_and_equals_the_full_step(bundled_path: Path) -> None:
    """SFT goes through the same update loop and micro-batches: its sequences (one group) forward a shared
    prompt once, with the same loss, gradient norm and update as forwarding each in full."""
    trainer = PeftTrainer(bundled_path)
    sft = SFTConfig(learning_rate=1e-3, batch_size=4, micro_batch_size=4, seed=1)
    trainer.ensure_adapter(TrainConfig(**sft.adapter_settings()))
    assert trainer.model is not None and trainer.optimizer is not None
    seqs = [s.model_copy(update={"group_id": "sft"}) for s in _group(int(trainer.model.config.vocab_size))]
    full, after_full, shared, after_shared = from_one_start(
        trainer,
        lambda: trainer.sft_step(seqs, sft.model_copy(update={"share_prefix": False})),
        lambda: trainer.sft_step(seqs, sft),  # share_prefix=True is the default
    )

    assert (full.micro_batches, shared.micro_batches) == (1, 1)
    assert abs(shared.loss - full.loss) < 1e-5 and full.loss > 0
    assert abs(shared.grad_norm - full.grad_norm) < 1e-4 * max(1.0, full.grad_norm)
    cosine = torch.nn.functional.cosine_similarity(after_full, after_shared, dim=0).item()
    assert after_full.abs().max() > 1e-4 and cosine > 0.999, cosine
