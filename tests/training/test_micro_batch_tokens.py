"""``micro_batch_tokens``: a micro-batch stops at a token budget (rows padded to the longest, a shared
prefix counted once), so a step's memory is bounded when sequences are long, and the step is the same.

Why: a notes-server step (16 sequences of ~800 tokens, 4 rows a micro-batch) took the backend from
2.2 GB to 9.9 GB, and under CI's parallel tests the kernel's out-of-memory killer stopped it mid-step.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from art_adapters_backend.training.batches import forwarded_tokens, micro_batches
from art_adapters_backend.training.data import TrainingSequence
from art_adapters_backend.training.peft_trainer import PeftTrainer

from art_adapters import SFTConfig, TrainConfig

from tests.helpers.same_start import from_one_start, off_policy
from tests.helpers.toy_sequences import completion_sequence

CPU = torch.device("cpu")


def _seq(prompt: list[int], own: int, group: str = "g", advantage: float = 1.0, seed: int = 0) -> TrainingSequence:
    gen = torch.Generator().manual_seed(seed)
    completion = torch.randint(100, 1000, (own,), generator=gen).tolist()
    return completion_sequence(prompt, completion, advantage, group, f"{group}{seed}")


def test_rows_stop_at_the_budget_and_a_longer_sequence_goes_alone() -> None:
    seqs = [_seq([7] * n, 10, seed=i) for i, n in enumerate([890, 790, 290, 290, 190, 2990])]
    batches = micro_batches(seqs, 4, 0, CPU, max_tokens=2048)
    widths = [tuple(b.input_ids.shape) for b in batches]
    assert widths == [(1, 3000), (2, 900), (3, 300)], widths  # longest first, greedy within the budget
    assert sorted(int(b.attention_mask.sum()) for b in batches) == [800, 1700, 3000]
    unbounded = micro_batches(seqs, 4, 0, CPU, max_tokens=None)
    assert [tuple(b.input_ids.shape) for b in unbounded] == [(4, 3000), (2, 300)]  # rows only, as before


def test_a_shared_prefix_is_counted_once_against_the_budget() -> None:
    prompt = list(range(100, 800))  # 700 shared prompt tokens
    group = [_seq(prompt, own, seed=i) for i, own in enumerate([150, 120, 100, 90])]
    shared = micro_batches(group, 4, 0, CPU, share_prefix=True, max_tokens=2048)
    assert len(shared) == 1 and shared[0].prefix_len == 700  # 700 + 4 x 150 = 1,300 tokens forwarded
    assert forwarded_tokens(group, share_prefix=True) == 1300
    plain = micro_batches(group, 4, 0, CPU, share_prefix=False, max_tokens=2048)
    assert [b.input_ids.shape[0] for b in plain] == [2, 2]  # 4 x 850 = 3,400 without sharing
    assert all(forwarded_tokens(group[i : i + 2], share_prefix=False) <= 2048 for i in (0, 2))


def test_the_budget_is_a_validated_setting_of_both_objectives() -> None:
    assert TrainConfig().micro_batch_tokens == 1024 and SFTConfig().micro_batch_tokens == 1024
    assert TrainConfig(micro_batch_tokens=None).micro_batch_tokens is None
    with pytest.raises(ValueError, match="micro_batch_tokens"):
        TrainConfig(micro_batch_tokens=0)


@pytest.mark.slow
def test_a_step_cut_by_tokens_equals_the_step_cut_by_rows(bundled_path: Path) -> None:
    trainer = PeftTrainer(bundled_path)
    base = TrainConfig(learning_rate=1e-3, micro_batch_size=4, micro_batch_tokens=None, seed=1)
    trainer.ensure_adapter(base)
    assert trainer.model is not None and trainer.optimizer is not None
    gen = torch.Generator().manual_seed(3)
    prompts = [torch.randint(100, 4000, (60,), generator=gen).tolist() for _ in range(2)]
    seqs = [
        _seq(prompts[g], own, group=f"g{g}", advantage=adv, seed=10 * g + i)
        for g in range(2)
        for i, (own, adv) in enumerate(zip([9, 6, 12, 4], [1.0, -0.5, 0.25, -0.75], strict=True))
    ]
    seqs = off_policy(trainer, seqs, base, 0.2)  # so the ratio is not exactly 1
    by_rows, after_rows, by_tokens, after_tokens = from_one_start(
        trainer,
        lambda: trainer.train_step(seqs, base),
        lambda: trainer.train_step(seqs, base.model_copy(update={"micro_batch_tokens": 90})),  # prefix + 2 rows
    )

    assert (by_rows.micro_batches, by_tokens.micro_batches) == (2, 4)
    assert by_tokens.padded_tokens <= by_rows.padded_tokens + 2 * 60  # each group's prompt forwarded twice
    assert abs(by_tokens.loss - by_rows.loss) < 1e-5, (by_tokens.loss, by_rows.loss)
    assert abs(by_tokens.grad_norm - by_rows.grad_norm) < 1e-4 * max(1.0, by_rows.grad_norm)
    cosine = torch.nn.functional.cosine_similarity(after_rows, after_tokens, dim=0).item()
    assert after_rows.abs().max() > 1e-4 and cosine > 0.999, cosine
