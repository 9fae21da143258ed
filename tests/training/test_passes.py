"""Several updates per step on the real bundled model: ``num_iterations`` passes of ``mini_batches``
updates each, against the same updates made one step at a time (TRL's semantics: the old
log-probs stay the sampling ones), per-pass metrics, and a failed step undone."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from art_adapters_backend.training.data import TrainingSequence
from art_adapters_backend.training.peft_trainer import PeftTrainer

from art_adapters import SFTConfig, TrainConfig
from tests.helpers.toy_sequences import toy_sequences

pytestmark = pytest.mark.slow

CONFIG = TrainConfig(learning_rate=2e-3, micro_batch_size=2, lora_rank=8, lora_alpha=16, epsilon=0.05)


@pytest.fixture(scope="module")
def toy(tokenizer: Any, render: Any) -> list[TrainingSequence]:
    """Four conversations in two groups, unequal advantages, old log-probs unknown."""
    return toy_sequences(tokenizer, render, group_of=lambda i: f"g{i // 2}")


def _sampled(trainer: PeftTrainer, sequences: list[TrainingSequence]) -> list[TrainingSequence]:
    """The sequences with 'sampling' log-probs: the fresh adapter's own, shifted so clipping can act."""
    trainer.reset_adapter()
    scored = trainer.score(sequences, CONFIG)
    return [
        s.model_copy(update={"old_logprobs": [x + 0.04 * (t % 3 - 1) if m else None
                                              for t, (x, m) in enumerate(zip(lp, s.loss_mask, strict=True))]})
        for s, lp in zip(sequences, scored, strict=True)
    ]  # fmt: skip


def _weights(trainer: PeftTrainer) -> list[torch.Tensor]:
    assert trainer.model is not None
    return [p.detach().clone() for p in trainer.model.parameters() if p.requires_grad]


def _same(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return max(float((x - y).abs().max()) for x, y in zip(a, b, strict=True))


def _relative(a: list[torch.Tensor], b: list[torch.Tensor], start: list[torch.Tensor]) -> float:
    """How far ``b`` is from ``a``, as a fraction of how far ``a`` moved from ``start`` (L2 over every weight)."""
    flat = [torch.cat([t.flatten() for t in ts]) for ts in (a, b, start)]
    return float((flat[0] - flat[1]).norm() / (flat[0] - flat[2]).norm())


def test_passes_and_mini_batches_are_the_updates_made_one_at_a_time(
    trainer: PeftTrainer, toy: list[TrainingSequence]
) -> None:
    batch = _sampled(trainer, toy)
    # One step: 2 passes x 2 mini-batches (the first two sequences, then the last two).
    trainer.reset_adapter()
    step = trainer.train_step(batch, CONFIG.model_copy(update={"num_iterations": 2, "mini_batches": 2}))
    together = _weights(trainer)
    assert step.updates == 4 and step.step == 1 and len(step.passes) == 2
    # The same four updates as four one-update steps on the halves, old log-probs unchanged.
    trainer.reset_adapter()
    singles = [trainer.train_step(half, CONFIG) for _ in range(2) for half in (batch[:2], batch[2:])]
    assert _same(_weights(trainer), together) < 1e-6
    for number, one in enumerate(step.passes):
        first, second = singles[2 * number], singles[2 * number + 1]
        assert one.loss == pytest.approx((first.loss + second.loss) / 2, abs=1e-6)
        clipped_high = first.clip_high_fraction * first.tokens + second.clip_high_fraction * second.tokens
        assert one.clip_high_fraction == pytest.approx(clipped_high / step.tokens, abs=1e-9)
        ratio_sum = first.ratio_mean * first.tokens + second.ratio_mean * second.tokens
        assert one.ratio_mean == pytest.approx(ratio_sum / step.tokens, abs=1e-6)
    # After the first update the ratio moves off 1 and the clip acts.
    assert abs(step.passes[1].ratio_mean - step.passes[0].ratio_mean) > 1e-3
    assert step.passes[1].clip_low_fraction + step.passes[1].clip_high_fraction > 0
    assert step.clip_fraction == pytest.approx(
        sum(p.clip_low_fraction + p.clip_high_fraction for p in step.passes) / 2, abs=1e-9
    )
    assert step.loss == pytest.approx(sum(s.loss for s in singles) / 4, abs=1e-6)
    flat = step.scalars()
    assert flat["pass_2_ratio_mean"] == step.passes[1].ratio_mean and flat["updates"] == 4
    assert {"pass_1_loss", "pass_1_clip_low_fraction", "pass_1_clip_high_fraction"} <= set(flat)
    assert "passes" not in flat and "step" not in flat


def test_unknown_old_logprobs_are_scored_once_by_the_starting_weights(
    trainer: PeftTrainer, toy: list[TrainingSequence]
) -> None:
    config = CONFIG.model_copy(update={"num_iterations": 3})
    trainer.reset_adapter()
    trainer.ensure_adapter(config)
    start = _weights(trainer)
    scored = trainer.score(toy, config)  # what the step's starting weights give
    known = [
        s.model_copy(
            update={"old_logprobs": [x if m else None for x, m in zip(lp, s.loss_mask, strict=True)]}
        )
        for s, lp in zip(toy, scored, strict=True)
    ]
    unknown = trainer.train_step(toy, config)
    after_unknown = _weights(trainer)
    trainer.reset_adapter()
    given = trainer.train_step(known, config)
    # The same update, up to float rounding: score() runs in eval mode on micro-batches in input order,
    # the step on its own length-sorted ones, so the two old log-probs differ in the last bits, and Adam
    # divides each gradient by its own size, which turns that into up to 1e-4 on a few weights whose
    # gradient is near 0 (measured on an Intel Xeon: largest 4.9e-5 on 1 thread, 1.1e-4 on 2; the mean
    # weight differed by 1e-8 and moved by 3e-3). Over all weights, it is 5e-5 of how far the step
    # moved them; three steps that each score anew (ratio 1 in every pass) land 0.85 of it away.
    assert _relative(after_unknown, _weights(trainer), start) < 1e-3
    # the same rounding: 2.3e-6 apart at a ratio of 0.55 in the third pass (1 thread, Intel Xeon)
    assert [p.ratio_mean for p in unknown.passes] == pytest.approx(
        [p.ratio_mean for p in given.passes], rel=1e-4
    )
    assert unknown.passes[0].ratio_mean == pytest.approx(1.0, abs=1e-6)
    assert abs(unknown.passes[2].ratio_mean - 1.0) > 1e-4  # not re-scored each pass
    # The first pass is on-policy; the later ones see the policy moved the way the advantages ask.
    assert unknown.passes[0].policy_shift == pytest.approx(0.0, abs=1e-6)
    assert 0 < unknown.passes[1].policy_shift < unknown.passes[2].policy_shift, unknown.passes
    assert unknown.scalars()["pass_3_policy_shift"] == unknown.passes[2].policy_shift


def test_more_mini_batches_than_sequences_gives_one_sequence_each(
    trainer: PeftTrainer, toy: list[TrainingSequence]
) -> None:
    trainer.reset_adapter()
    step = trainer.train_step(toy[:3], CONFIG.model_copy(update={"mini_batches": 8}))
    assert step.updates == 3 and len(step.passes) == 1 and step.micro_batches == 3


def test_a_non_finite_update_leaves_the_weights_as_before_the_step(
    trainer: PeftTrainer, toy: list[TrainingSequence]
) -> None:
    trainer.reset_adapter()
    trainer.train_step(toy, CONFIG)
    before, state = _weights(trainer), trainer.optimizer.state_dict()["state"] if trainer.optimizer else {}
    steps = {k: float(v["step"]) for k, v in state.items()}
    wild = CONFIG.model_copy(update={"learning_rate": 1e30, "num_iterations": 2, "max_grad_norm": None})
    with pytest.raises(FloatingPointError, match="update 2 of 2"):
        trainer.train_step(toy, wild)  # the first update blows the weights up, the second is NaN
    assert _same(_weights(trainer), before) == 0.0 and trainer.steps_done == 1
    assert trainer.optimizer is not None
    assert {k: float(v["step"]) for k, v in trainer.optimizer.state_dict()["state"].items()} == steps


def test_a_non_finite_sft_update_also_leaves_the_weights_as_before_the_step(
    trainer: PeftTrainer, toy: list[TrainingSequence]
) -> None:
    """SFT runs on the same update loop, so it fails the same way (it once left earlier updates applied)."""
    trainer.reset_adapter()
    trainer.train_step(toy, CONFIG)
    before = _weights(trainer)
    wild = SFTConfig(learning_rate=1e30, epochs=2, max_grad_norm=None, lora_rank=8, lora_alpha=16)
    with pytest.raises(FloatingPointError, match=r"non-finite SFT step at update 2 of 2"):
        trainer.sft_step(toy, wild)  # the first update blows the weights up, the second is NaN
    assert _same(_weights(trainer), before) == 0.0 and trainer.steps_done == 1
    sane = trainer.sft_step(toy, SFTConfig(epochs=2, lora_rank=8, lora_alpha=16))
    assert sane.updates == 2 and sane.step == 2 and sane.loss < sane.first_pass_loss
