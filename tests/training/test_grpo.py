"""The GRPO loss functions on small hand-computed cases (no model)."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from art_adapters_backend.training.grpo import (
    IMPORTANCE_LEVELS,
    NORMALIZERS,
    SURROGATES,
    BatchTotals,
    LossOutput,
    LossSettings,
    cispo_surrogate,
    clipped_surrogate,
    group_advantages,
    grpo_loss,
    is_zero_variance,
    k3_kl,
    kept_token_logprobs,
    logits_keep_mask,
    sapo_surrogate,
    sequence_importance,
    token_logprobs,
)
from pydantic import ValidationError

from art_adapters import TrainConfig


def test_advantages_are_mean_centred_and_optionally_std_scaled() -> None:
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0])
    assert group_advantages(rewards, scale=False).tolist() == [0.5, -0.5, -0.5, 0.5]
    std = math.sqrt(1 / 3)  # Bessel: sum of squares 1.0 / (4 - 1)
    expected = [0.5 / (std + 1e-4), -0.5 / (std + 1e-4)] * 2
    assert group_advantages(rewards, scale=True)[[0, 1, 3, 2]].tolist() == pytest.approx(
        [expected[0], expected[1], expected[0], expected[1]]
    )


def test_zero_variance_groups_are_flagged() -> None:
    assert is_zero_variance(torch.tensor([0.3, 0.3, 0.3]))
    assert is_zero_variance(torch.tensor([1.0]))
    assert not is_zero_variance(torch.tensor([0.3, 0.3, 0.31]))


def test_advantages_reject_bad_input() -> None:
    with pytest.raises(ValueError, match=">= 2 rewards"):
        group_advantages(torch.tensor([1.0]), scale=True)
    with pytest.raises(ValueError, match="finite"):
        group_advantages(torch.tensor([1.0, float("nan")]), scale=True)


def test_token_logprobs_match_log_softmax() -> None:
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, 7, generator=g)
    ids = torch.randint(0, 7, (2, 5), generator=g)
    out = token_logprobs(logits, ids)
    ref = torch.log_softmax(logits, -1)
    assert out[:, 0].tolist() == [0.0, 0.0]
    for b in range(2):
        for t in range(1, 5):
            assert out[b, t].item() == pytest.approx(ref[b, t - 1, ids[b, t]].item(), abs=1e-6)
    hot = token_logprobs(logits, ids, temperature=0.5)
    assert hot[0, 1].item() == pytest.approx(
        torch.log_softmax(logits[0, 0] / 0.5, -1)[ids[0, 1]].item(), abs=1e-6
    )
    per_row = token_logprobs(logits, ids, temperature=torch.tensor([0.5, 1.0]))
    assert torch.allclose(per_row[0], hot[0]) and torch.allclose(per_row[1], out[1])


@pytest.mark.parametrize(
    ("ratio", "advantage", "expected_loss"),
    [
        (1.0, 1.0, -1.0),  # on-policy: -A
        (1.1, 1.0, -1.1),  # inside the clip range: unclipped
        (1.2, 1.0, -1.2),  # exactly at 1 + eps: still the same value
        (1.5, 1.0, -1.2),  # above 1 + eps with A > 0: clipped (no incentive to go further)
        (1.5, -1.0, 1.5),  # above 1 + eps with A < 0: unclipped (the pessimistic term)
        (0.8, -1.0, 0.8),  # exactly at 1 - eps
        (0.5, -1.0, 0.8),  # below 1 - eps with A < 0: clipped
        (0.5, 1.0, -0.5),  # below 1 - eps with A > 0: unclipped
    ],
)
def test_clipped_surrogate_at_the_boundaries(ratio: float, advantage: float, expected_loss: float) -> None:
    loss, r = clipped_surrogate(torch.tensor([[math.log(ratio)]]), torch.tensor([[advantage]]), 0.2, 0.2)
    assert loss.item() == pytest.approx(expected_loss, abs=1e-6)
    assert r.item() == pytest.approx(ratio, abs=1e-6)


def test_clipped_gradient_is_zero_outside_the_trust_region() -> None:
    log_w = torch.tensor([[math.log(1.5), math.log(1.1)]], requires_grad=True)
    loss, _ = clipped_surrogate(log_w, torch.tensor([[1.0]]), 0.2, 0.2)
    loss.sum().backward()
    assert log_w.grad[0, 0].item() == 0.0  # clipped: no gradient
    assert log_w.grad[0, 1].item() == pytest.approx(-1.1, abs=1e-6)  # d(-w)/d(log w) = -w


def test_epsilon_high_widens_only_the_upper_side() -> None:
    adv = torch.tensor([[1.0]])
    loss, _ = clipped_surrogate(torch.tensor([[math.log(1.25)]]), adv, 0.2, 0.28)
    assert loss.item() == pytest.approx(-1.25)
    loss, _ = clipped_surrogate(torch.tensor([[math.log(0.7)]]), -adv, 0.2, 0.28)
    assert loss.item() == pytest.approx(0.8)


def test_k3_kl_is_zero_at_equality_and_positive_otherwise() -> None:
    lp = torch.tensor([-1.0, -2.0])
    assert k3_kl(lp, lp).tolist() == [0.0, 0.0]
    d = 0.5
    assert k3_kl(torch.tensor([-1.0]), torch.tensor([-1.0 + d])).item() == pytest.approx(math.exp(d) - d - 1)


def test_sequence_importance_is_the_masked_mean() -> None:
    log_ratio = torch.tensor([[0.0, 0.2, 0.4, 9.0]])
    mask = torch.tensor([[0.0, 1.0, 1.0, 0.0]])
    assert sequence_importance(log_ratio * mask, mask).item() == pytest.approx(0.3)


def test_normalizers_weigh_tokens_as_documented() -> None:
    mask = torch.tensor([[0.0, 1.0, 1.0, 1.0], [0.0, 1.0, 0.0, 0.0]])
    totals = BatchTotals(sequences=2, tokens=4, max_tokens=10)
    assert NORMALIZERS["token"](mask, totals).sum().item() == pytest.approx(1.0)
    seq = NORMALIZERS["sequence"](mask, totals)
    assert seq[0, 1].item() == pytest.approx(1 / 6) and seq[1, 1].item() == pytest.approx(1 / 2)
    assert NORMALIZERS["constant"](mask, totals)[0, 1].item() == pytest.approx(1 / 20)
    assert set(IMPORTANCE_LEVELS) == {"token", "sequence"}


def _loss(
    logprobs: torch.Tensor,
    old: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    config: TrainConfig,
    tokens: int,
    ref: torch.Tensor | None = None,
) -> LossOutput:
    """``grpo_loss`` of one whole batch (its rows are all the step's sequences, ``tokens`` its loss
    tokens) under ``config``'s loss settings."""
    totals = BatchTotals(sequences=logprobs.shape[0], tokens=tokens)
    return grpo_loss(logprobs, old, advantages, mask, LossSettings.from_config(config), totals, ref)


def test_hand_computed_loss_on_policy() -> None:
    """On-policy (ratio 1) the loss is -sum_i A_i * share_i: here token-normalised."""
    logprobs = torch.tensor([[0.0, -1.0, -2.0], [0.0, -0.5, -0.5]], requires_grad=True)
    mask = torch.tensor([[0.0, 1.0, 1.0], [0.0, 1.0, 0.0]])
    adv = torch.tensor([1.0, -2.0])
    out = _loss(logprobs, logprobs.detach().clone(), adv, mask, TrainConfig(), 3)
    assert out.loss.item() == pytest.approx(-(1.0 + 1.0 - 2.0) / 3)
    assert out.ratio_sum == pytest.approx(3.0) and out.tokens == 3
    out.loss.backward()
    # d loss / d logp = -A / N on loss tokens, 0 elsewhere (padding and prompt never get gradient).
    assert torch.allclose(logprobs.grad, torch.tensor([[0.0, -1 / 3, -1 / 3], [0.0, 2 / 3, 0.0]]))


def test_unknown_old_logprobs_count_as_on_policy() -> None:
    logprobs = torch.tensor([[0.0, -1.0, -2.0]])
    old = torch.tensor([[0.0, float("nan"), -2.5]])
    mask = torch.tensor([[0.0, 1.0, 1.0]])
    out = _loss(logprobs, old, torch.tensor([1.0]), mask, TrainConfig(epsilon=0.9), 2)
    assert out.ratio_sum == pytest.approx(1.0 + math.exp(0.5))
    assert out.shift_sum == pytest.approx(0.5)  # A x log-ratio: the unknown token counts as on-policy (0)
    assert math.isfinite(out.loss.item())


def test_policy_shift_sums_advantage_times_log_ratio_over_loss_tokens() -> None:
    """Positive where probability went up on a positive-advantage token or down on a negative one."""
    logprobs = torch.tensor([[0.0, -1.0, -2.0], [-3.0, -0.5, -1.0]])
    old = torch.tensor([[9.0, -1.5, -2.0], [-3.0, -0.25, -9.0]])
    mask = torch.tensor([[0.0, 1.0, 1.0], [0.0, 1.0, 0.0]])
    out = _loss(logprobs, old, torch.tensor([2.0, -4.0]), mask, TrainConfig(epsilon=0.9), 3)
    # 2 x (-1 + 1.5) + 2 x 0 on row 1; -4 x (-0.5 + 0.25) on row 2; masked positions count for nothing
    assert out.shift_sum == pytest.approx(1.0 + 1.0)


def test_nan_in_masked_positions_does_not_leak() -> None:
    logprobs = torch.tensor([[0.0, -1.0, -2.0]])
    old = torch.tensor([[float("inf"), -1.0, float("nan")]])
    mask = torch.tensor([[0.0, 1.0, 0.0]])
    out = _loss(logprobs, old, torch.tensor([1.0]), mask, TrainConfig(), 1)
    assert out.loss.item() == pytest.approx(-1.0)


def test_micro_batch_shares_add_up_to_the_full_batch_loss() -> None:
    g = torch.Generator().manual_seed(3)
    logprobs = -torch.rand(4, 6, generator=g)
    old = logprobs + 0.3 * torch.randn(4, 6, generator=g)
    ref = logprobs + 0.1 * torch.randn(4, 6, generator=g)
    mask = (torch.rand(4, 6, generator=g) > 0.3).float()
    mask[:, 0] = 0
    adv = torch.tensor([0.5, -1.0, 1.5, -0.2])
    for config in [
        TrainConfig(beta=0.1),
        TrainConfig(loss_normalization="sequence", importance_level="sequence"),
        TrainConfig(loss_normalization="constant", max_tokens=8),
    ]:
        settings = LossSettings.from_config(config)
        totals = BatchTotals(sequences=4, tokens=int(mask.sum()), max_tokens=config.max_tokens)
        full = grpo_loss(logprobs, old, adv, mask, settings, totals, ref).loss
        parts = sum(
            grpo_loss(logprobs[s], old[s], adv[s], mask[s], settings, totals, ref[s]).loss
            for s in (slice(0, 1), slice(1, 4))
        )
        assert parts.item() == pytest.approx(full.item(), abs=1e-6)


def test_beta_without_reference_is_an_error() -> None:
    lp = torch.zeros(1, 2)
    with pytest.raises(ValueError, match="ref_logprobs"):
        _loss(lp, lp, torch.tensor([1.0]), torch.ones(1, 2), TrainConfig(beta=0.1), 2)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"loss_normalization": "constant"}, "set max_tokens"),
        ({"max_tokens": 100}, "remove max_tokens"),
        ({"lora_target_modules": ()}, "lora_target_modules"),
        ({"epsilon": 1.5}, "epsilon"),
        ({"importance_level": "tokens"}, "importance_level"),
        ({"learnin_rate": 1e-5}, "learnin_rate"),  # typo: unknown fields are rejected
    ],
)
def test_config_cross_field_errors_say_what_to_change(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        TrainConfig(**fields)


def test_clip_high_defaults_to_epsilon() -> None:
    assert TrainConfig().clip_high == 0.2 and TrainConfig(epsilon_high=0.28).clip_high == 0.28


def test_config_json_round_trip() -> None:
    config = TrainConfig(beta=0.05, epsilon_high=0.3, loss_normalization="constant", max_tokens=64)
    assert TrainConfig.model_validate_json(config.model_dump_json()) == config


def test_kept_logits_give_the_same_logprobs_on_loss_tokens() -> None:
    g = torch.Generator().manual_seed(5)
    logits = torch.randn(3, 6, 11, generator=g, requires_grad=True)
    ids = torch.randint(0, 11, (3, 6), generator=g)
    mask = torch.tensor([[0, 0, 1, 1, 0, 0], [0, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 1]], dtype=torch.float32)
    temps = torch.tensor([1.0, 0.7, 1.3])
    keep = logits_keep_mask(mask)
    assert keep.tolist()[0] == [False, True, True, False, False, False] and not keep[:, -1].any()
    full = token_logprobs(logits, ids, temps)
    kept = kept_token_logprobs(logits[keep], ids, keep, temps)  # what transformers returns for a bool mask
    assert torch.allclose(kept * mask, full * mask, atol=1e-6)
    assert (kept[mask == 0] == 0).all()
    (kept * mask).sum().backward()  # differentiable through the scatter
    assert (
        logits.grad is not None and logits.grad[0, 0].abs().sum() == 0 and logits.grad[0, 1].abs().sum() > 0
    )


def test_kl_outside_the_loss_mask_does_not_leak() -> None:
    # Trainers without logits selection (Unsloth, shared prefix) score every position, padding
    # included; a huge policy/reference gap there overflows k3's exp to inf, and inf * 0 is NaN.
    logprobs = torch.tensor([[0.0, -1.0, -100.0]], requires_grad=True)
    ref = torch.tensor([[0.0, -1.0, 0.0]])
    mask = torch.tensor([[0.0, 1.0, 0.0]])
    on_policy = logprobs.detach().clone()
    out = _loss(logprobs, on_policy, torch.tensor([1.0]), mask, TrainConfig(beta=0.1), 1, ref)
    assert out.loss.item() == pytest.approx(-1.0)
    assert out.kl_sum == 0.0
    out.loss.backward()
    assert logprobs.grad is not None and torch.isfinite(logprobs.grad).all()


def test_cispo_caps_the_detached_ratio_and_keeps_every_token_s_gradient() -> None:
    """CISPO: loss = -sg(min(w, cap)) A logp; a capped token still gets gradient (PPO's would be 0)."""
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    log_w = torch.tensor([[math.log(1.5), math.log(0.5)]], requires_grad=True)
    loss, ratio = cispo_surrogate(log_w, logp, torch.tensor([[2.0]]), cap=1.2)
    assert loss.tolist()[0] == pytest.approx([-1.2 * 2.0 * -1.0, -0.5 * 2.0 * -2.0])
    assert ratio.tolist()[0] == pytest.approx([1.5, 0.5])
    loss.sum().backward()
    assert logp.grad is not None and logp.grad.tolist()[0] == pytest.approx([-2.4, -1.0])
    assert log_w.grad is None or (log_w.grad == 0).all()  # the weight is detached


def test_sapo_gate_is_smooth_and_asymmetric() -> None:
    """SAPO: loss = -(4 / tau) sigmoid(tau (w - 1)) A; at w = 1 its gradient w.r.t. log w is -A."""
    log_w = torch.zeros(1, 2, requires_grad=True)
    adv = torch.tensor([[1.0, -1.0]])
    loss, _ = sapo_surrogate(log_w, adv, temperature_pos=1.0, temperature_neg=2.0)
    assert loss.tolist()[0] == pytest.approx([-2.0, 1.0])  # -(4 / tau) * 0.5 * A
    loss.sum().backward()
    assert log_w.grad is not None and log_w.grad.tolist()[0] == pytest.approx([-1.0, 1.0])
    # Off-policy the gradient w.r.t. log w (-w A unclipped, 0 once PPO clips) fades smoothly.
    far = torch.tensor([[math.log(3.0), math.log(10.0)]], requires_grad=True)
    gated, _ = sapo_surrogate(far, torch.tensor([[1.0]]), 1.0, 1.05)
    gated.sum().backward()
    assert far.grad is not None
    assert -3.0 < far.grad[0, 0].item() < -1.0 and -0.01 < far.grad[0, 1].item() < 0.0
    assert set(SURROGATES) == {"ppo", "cispo", "sapo"}


@pytest.mark.parametrize("loss_type", ["ppo", "cispo", "sapo"])
def test_per_token_advantages(loss_type: str) -> None:
    """(B, T) advantages: rows of one value give exactly the (B,) result; each token's gradient
    follows its own advantage; any other shape is refused."""
    g = torch.Generator().manual_seed(7)
    base = -torch.rand(2, 5, generator=g)
    old = base + 0.3 * torch.randn(2, 5, generator=g)
    mask = torch.tensor([[0.0, 1.0, 1.0, 1.0, 0.0], [0.0, 0.0, 1.0, 1.0, 1.0]])
    settings = LossSettings.from_config(TrainConfig(loss_type=loss_type))
    totals = BatchTotals(sequences=2, tokens=int(mask.sum()))

    def run(adv: torch.Tensor) -> tuple[float, torch.Tensor, int]:
        logprobs = base.clone().requires_grad_(True)
        out = grpo_loss(logprobs, old, adv, mask, settings, totals)
        out.loss.backward()
        assert logprobs.grad is not None
        return out.loss.item(), logprobs.grad, out.clipped_low + out.clipped_high

    per_sequence = torch.tensor([0.7, -1.3])
    loss, grad, clipped = run(per_sequence)
    loss_t, grad_t, clipped_t = run(per_sequence.reshape(2, 1).expand(2, 5).clone())
    assert loss_t == pytest.approx(loss, abs=1e-7) and torch.allclose(grad_t, grad) and clipped_t == clipped
    # On-policy, token-normalised: d loss / d logp_t = -A_t / N (ppo, sapo) or -A_t / N on logp (cispo).
    on_policy = base.clone().requires_grad_(True)
    per_token = torch.tensor([[0.0, 1.0, -1.0, 2.0, 0.0], [0.0, 0.0, 0.5, -0.5, 3.0]])
    out = grpo_loss(on_policy, base, per_token, mask, settings, totals)
    out.loss.backward()
    assert on_policy.grad is not None
    assert torch.allclose(on_policy.grad, -per_token * mask / 6, atol=1e-6)
    with pytest.raises(ValueError, match=r"\(B, T\)"):
        grpo_loss(base, old, torch.ones(2, 3), mask, settings, totals)


def test_loss_type_settings_are_validated() -> None:
    assert TrainConfig(loss_type="sapo").loss_normalization == "sequence"  # SAPO's own (TRL's) when unset
    assert TrainConfig(loss_type="sapo", loss_normalization="token").loss_normalization == "token"
    assert TrainConfig(loss_type="cispo").loss_normalization == "token"
    sapo = TrainConfig(loss_type="sapo", sapo_temperature_neg=2.0)
    assert TrainConfig.model_validate_json(sapo.model_dump_json()) == sapo
    with pytest.raises(ValidationError, match="cispo_epsilon_high"):
        TrainConfig(loss_type="cispo", epsilon_high=5.0)  # TRL's name for the cap: ours is its own field
    with pytest.raises(ValidationError, match="sapo_temperature"):
        TrainConfig(loss_type="sapo", epsilon_high=0.28)
    with pytest.raises(ValidationError):
        TrainConfig(loss_type="grpo")
    with pytest.raises(ValidationError):
        TrainConfig(cispo_epsilon_high=0.0)
    with pytest.raises(ValidationError):
        TrainConfig(num_iterations=0)
    with pytest.raises(ValidationError):
        TrainConfig(mini_batches=0)
