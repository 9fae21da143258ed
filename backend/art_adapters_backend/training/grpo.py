"""The GRPO loss, written once and shared by every trainer (torch + PEFT, Unsloth).

Small pure functions over tensors (:func:`grpo_loss` gives the objective). Shapes use ``B`` sequences
(rows of a micro-batch), ``T`` token positions, ``V`` vocabulary, ``G`` trajectories in a group; position
``t`` of a per-token tensor holds the value for token ``t`` predicted from tokens ``< t`` (position 0 has
no prediction and is never in the loss mask).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from art_adapters import TrainConfig

__all__ = [
    "IMPORTANCE_LEVELS",
    "NORMALIZERS",
    "STD_EPSILON",
    "SURROGATES",
    "BatchTotals",
    "LossOutput",
    "LossSettings",
    "cispo_surrogate",
    "clipped_surrogate",
    "fill_unknown_logprobs",
    "group_advantages",
    "grpo_loss",
    "is_zero_variance",
    "k3_kl",
    "kept_token_logprobs",
    "logits_keep_mask",
    "masked_log_ratio",
    "sapo_surrogate",
    "sequence_importance",
    "token_importance",
    "token_logprobs",
]

#: Added to the group's standard deviation before dividing (TRL uses the same constant).
STD_EPSILON = 1e-4

#: Log-ratios are clamped to +-this before ``exp`` so one stale token cannot overflow to inf.
MAX_LOG_RATIO = 20.0


# --------------------------------------------------------------------------- advantages


def is_zero_variance(rewards: torch.Tensor) -> bool:
    """Whether a group's rewards are all (numerically) equal, so it carries no signal.

    ``rewards``: (G,). A group of one trajectory is zero-variance by definition.
    Uses ``torch.isclose(std, 0)`` (absolute tolerance 1e-8), TRL's test.
    """
    if rewards.numel() < 2:
        return True
    std = rewards.double().std()  # Bessel-corrected, as in group_advantages
    return bool(torch.isclose(std, torch.zeros_like(std)))


def group_advantages(rewards: torch.Tensor, *, scale: bool) -> torch.Tensor:
    """Group-relative advantages of one group's rewards.

    ``rewards``: (G,) -> (G,)::

        A_i = r_i - mean(r)                         scale=False (Dr. GRPO)
        A_i = (r_i - mean(r)) / (std(r) + 1e-4)     scale=True  (GRPO; std Bessel-corrected)

    Raises:
        ValueError: for fewer than two rewards or a non-finite reward.
    """
    if rewards.dim() != 1 or rewards.numel() < 2:
        raise ValueError(
            f"group_advantages needs a 1-D tensor of >= 2 rewards, got shape {tuple(rewards.shape)}"
        )
    if not torch.isfinite(rewards).all():
        raise ValueError(f"rewards must be finite, got {rewards.tolist()}")
    centred = rewards - rewards.mean()
    if not scale:
        return centred
    return centred / (rewards.std() + STD_EPSILON)


# --------------------------------------------------------------------------- log-probs


def token_logprobs(
    logits: torch.Tensor, input_ids: torch.Tensor, temperature: float | torch.Tensor = 1.0
) -> torch.Tensor:
    """Log-probability of each input token under the logits of the position before it.

    ``logits``: (B, T, V), ``input_ids``: (B, T), ``temperature``: a float or (B,) per row
    -> (B, T), position 0 set to 0::

        out[b, t] = log softmax(logits[b, t-1] / temperature[b])[input_ids[b, t]]

    Computed as ``gather - logsumexp`` so the (B, T, V) log-softmax is never materialised.
    """
    scaled = logits[:, :-1, :].float()  # (B, T-1, V)
    if isinstance(temperature, torch.Tensor):
        scaled = scaled / temperature.to(scaled).reshape(-1, 1, 1)  # (B, 1, 1) broadcast
    elif temperature != 1.0:
        scaled = scaled / temperature
    targets = input_ids[:, 1:].unsqueeze(-1)  # (B, T-1, 1)
    picked = torch.gather(scaled, -1, targets).squeeze(-1)  # (B, T-1)
    out = picked - torch.logsumexp(scaled, dim=-1)  # (B, T-1)
    return torch.nn.functional.pad(out, (1, 0), value=0.0)  # (B, T)


def logits_keep_mask(loss_mask: torch.Tensor) -> torch.Tensor:
    """Positions whose logits are needed: the ones just before a loss token, (B, T) -> (B, T) bool::

        keep[b, t] = loss_mask[b, t + 1] > 0      (keep[b, T-1] = False)

    Passed as ``logits_to_keep`` to a transformers causal LM, the LM head then projects only
    these positions (the prompt and tool outputs never reach the vocabulary projection).
    """
    keep = torch.zeros_like(loss_mask, dtype=torch.bool)
    keep[:, :-1] = loss_mask[:, 1:] > 0
    return keep


def kept_token_logprobs(
    kept_logits: torch.Tensor,
    input_ids: torch.Tensor,
    keep: torch.Tensor,
    temperature: float | torch.Tensor = 1.0,
) -> torch.Tensor:
    """:func:`token_logprobs` from logits computed only where ``keep`` is True.

    ``kept_logits``: (N, V) for the N True positions of ``keep`` in row-major order (what
    transformers returns for a boolean ``logits_to_keep``); ``input_ids``, ``keep``: (B, T);
    ``temperature``: float or (B,) -> (B, T), zero where no logits were kept::

        out[b, t + 1] = log softmax(logits[b, t] / temperature[b])[input_ids[b, t + 1]]   where keep[b, t]
    """
    scaled = kept_logits.float()  # (N, V)
    if isinstance(temperature, torch.Tensor):
        rows = temperature.to(scaled).reshape(-1, 1).expand(keep.shape)[keep]  # (N,)
        scaled = scaled / rows.unsqueeze(-1)
    elif temperature != 1.0:
        scaled = scaled / temperature
    targets = input_ids[:, 1:][keep[:, :-1]]  # (N,)
    picked = torch.gather(scaled, -1, targets.unsqueeze(-1)).squeeze(-1)  # (N,)
    values = picked - torch.logsumexp(scaled, dim=-1)  # (N,)
    out = torch.zeros(keep.shape[0], keep.shape[1] - 1, dtype=values.dtype, device=values.device)
    out = out.masked_scatter(keep[:, :-1], values)  # (B, T-1)
    return torch.nn.functional.pad(out, (1, 0), value=0.0)  # (B, T)


def fill_unknown_logprobs(old_logprobs: torch.Tensor, logprobs: torch.Tensor) -> torch.Tensor:
    """Replace unknown (NaN) sampling log-probs with the current policy's, detached.

    ``old_logprobs``, ``logprobs``: (B, T) -> (B, T). Turns re-tokenised without a backend
    record have no sampling log-probs; within one optimizer step the current weights *are*
    the old policy, so their ratio is exactly 1 (TRL does the same when it skips the old
    forward pass).
    """
    return torch.where(torch.isnan(old_logprobs), logprobs.detach(), old_logprobs)


def masked_log_ratio(logprobs: torch.Tensor, old_logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-token log importance ratio, zero outside the loss mask.

    ``logprobs``, ``old_logprobs``, ``mask``: (B, T) -> (B, T)::

        log_rho[b, t] = logprobs[b, t] - old_logprobs[b, t]   where mask[b, t] else 0
    """
    return torch.where(mask.bool(), logprobs - old_logprobs, torch.zeros_like(logprobs))


# --------------------------------------------------------------------------- importance


def token_importance(log_ratio: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Token-level log importance weights (PPO / GRPO): ``log_ratio`` itself, (B, T) -> (B, T)."""
    return log_ratio


def sequence_importance(log_ratio: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Sequence-level log importance weights (GSPO), (B, T) -> (B, 1)::

    log_w[b] = sum_t mask[b, t] log_rho[b, t] / max(1, sum_t mask[b, t])
    """
    return (log_ratio * mask).sum(-1, keepdim=True) / mask.sum(-1, keepdim=True).clamp(min=1.0)


#: importance_level -> function from (log_ratio (B, T), mask (B, T)) to log weights (B, T) or (B, 1).
IMPORTANCE_LEVELS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "token": token_importance,
    "sequence": sequence_importance,
}


# --------------------------------------------------------------------------- surrogate and KL


def clipped_surrogate(
    log_weights: torch.Tensor, advantages: torch.Tensor, epsilon_low: float, epsilon_high: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's clipped surrogate, negated to a loss; also returns the ratio.

    ``log_weights``: (B, T) or (B, 1); ``advantages``: (B, 1) or (B, T) -> (loss, ratio), the
    broadcast shape and the shape of ``log_weights``::

        w    = exp(clamp(log_weights, -20, 20))
        loss = -min(w A, clamp(w, 1 - eps_low, 1 + eps_high) A)
    """
    ratio = torch.exp(log_weights.clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO))
    clipped = ratio.clamp(1.0 - epsilon_low, 1.0 + epsilon_high)
    loss = -torch.minimum(ratio * advantages, clipped * advantages)
    return loss, ratio


def cispo_surrogate(
    log_weights: torch.Tensor, logprobs: torch.Tensor, advantages: torch.Tensor, cap: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """CISPO (MiniMax-M1; TRL ``loss_type="cispo"``): the ratio capped and detached weights a
    REINFORCE term, so a capped token still passes gradient through its log-prob.

    ``log_weights``: (B, T) or (B, 1); ``logprobs``: (B, T) with grad; ``advantages``: (B, 1)
    or (B, T) -> (loss (B, T), ratio (shape of ``log_weights``))::

        w    = exp(clamp(log_weights, -20, 20))
        loss = -sg(min(w, cap)) A logp
    """
    ratio = torch.exp(log_weights.clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO))
    return -ratio.clamp(max=cap).detach() * advantages * logprobs, ratio


def sapo_surrogate(
    log_weights: torch.Tensor, advantages: torch.Tensor, temperature_pos: float, temperature_neg: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """SAPO (arXiv 2511.20347; TRL ``loss_type="sapo"``): a sigmoid gate of the ratio instead of
    the hard clip; its gradient fades smoothly as the ratio leaves 1.

    ``log_weights``: (B, T) or (B, 1); ``advantages``: (B, 1) or (B, T) -> (loss, ratio)::

        w    = exp(clamp(log_weights, -20, 20))
        tau  = temperature_pos where A > 0 else temperature_neg
        loss = -(4 / tau) sigmoid(tau (w - 1)) A          (gradient w.r.t. w: A at w = 1)
    """
    ratio = torch.exp(log_weights.clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO))
    positive = advantages > 0
    tau = torch.where(positive, temperature_pos, temperature_neg).to(advantages)  # shape of A
    return -torch.sigmoid(tau * (ratio - 1.0)) * (4.0 / tau) * advantages, ratio


#: (ratio (B, T), advantages (B, 1) or (B, T), settings) -> (low, high) boolean (B, T) masks.
ClipCounter = Callable[[torch.Tensor, torch.Tensor, "LossSettings"], tuple[torch.Tensor, torch.Tensor]]
#: (log_weights, logprobs, advantages, settings) -> (per-token loss, ratio).
SurrogateLoss = Callable[
    [torch.Tensor, torch.Tensor, torch.Tensor, "LossSettings"], tuple[torch.Tensor, torch.Tensor]
]


@dataclass(frozen=True)
class _Surrogate:
    """One ``loss_type``: its per-token loss and which tokens it counts as clipped."""

    loss: SurrogateLoss
    clipped: ClipCounter


def _ppo_loss(
    lw: torch.Tensor, lp: torch.Tensor, a: torch.Tensor, s: LossSettings
) -> tuple[torch.Tensor, torch.Tensor]:
    return clipped_surrogate(lw, a, s.epsilon_low, s.epsilon_high)


def _cispo_loss(
    lw: torch.Tensor, lp: torch.Tensor, a: torch.Tensor, s: LossSettings
) -> tuple[torch.Tensor, torch.Tensor]:
    return cispo_surrogate(lw, lp, a, s.cispo_cap)


def _sapo_loss(
    lw: torch.Tensor, lp: torch.Tensor, a: torch.Tensor, s: LossSettings
) -> tuple[torch.Tensor, torch.Tensor]:
    return sapo_surrogate(lw, a, s.sapo_temperature_pos, s.sapo_temperature_neg)


def _ppo_clipped(
    ratio: torch.Tensor, a: torch.Tensor, s: LossSettings
) -> tuple[torch.Tensor, torch.Tensor]:
    """Where the clip zeroed the gradient: below ``1 - eps`` with A < 0, above ``1 + eps_high`` with A > 0."""
    return (ratio < 1.0 - s.epsilon_low) & (a < 0), (ratio > 1.0 + s.epsilon_high) & (a > 0)


def _cispo_clipped(
    ratio: torch.Tensor, a: torch.Tensor, s: LossSettings
) -> tuple[torch.Tensor, torch.Tensor]:
    """TRL's ``cispo_clip_ratio``: the ratio above the cap with A > 0 (reported as the high side)."""
    high = (ratio > s.cispo_cap) & (a > 0)
    return torch.zeros_like(high), high


def _never_clipped(
    ratio: torch.Tensor, a: torch.Tensor, s: LossSettings
) -> tuple[torch.Tensor, torch.Tensor]:
    """SAPO has no hard clip: nothing is counted."""
    none = torch.zeros_like((ratio * a) > 0)
    return none, none


#: loss_type -> its per-token loss and clip count (chosen once by :meth:`LossSettings.from_config`).
SURROGATES: dict[str, _Surrogate] = {
    "ppo": _Surrogate(loss=_ppo_loss, clipped=_ppo_clipped),
    "cispo": _Surrogate(loss=_cispo_loss, clipped=_cispo_clipped),
    "sapo": _Surrogate(loss=_sapo_loss, clipped=_never_clipped),
}


def k3_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(pi_theta || pi_ref), >= 0, (B, T) -> (B, T)::

    kl = exp(ref - logp) - (ref - logp) - 1
    """
    delta = ref_logprobs - logprobs
    return torch.exp(delta) - delta - 1.0


# --------------------------------------------------------------------------- normalisation


@dataclass(frozen=True)
class BatchTotals:
    """Sizes of the whole step, so a micro-batch's share of the loss is exact.

    Attributes:
        sequences: training sequences in the step (all micro-batches).
        tokens: loss tokens in the step (sum of every loss mask).
        max_tokens: the constant of ``loss_normalization="constant"`` (else ``None``).
    """

    sequences: int
    tokens: int
    max_tokens: int | None = None


def _per_token_weights(mask: torch.Tensor, totals: BatchTotals) -> torch.Tensor:
    """``"token"``: every loss token counts the same, (B, T) -> (B, T): ``c = mask / N_tokens``."""
    return mask / max(totals.tokens, 1)


def _per_sequence_weights(mask: torch.Tensor, totals: BatchTotals) -> torch.Tensor:
    """``"sequence"``: mean of per-sequence means, (B, T) -> (B, T): ``c = mask / (len_b * N_seq)``."""
    lengths = mask.sum(-1, keepdim=True).clamp(min=1.0)  # (B, 1)
    return mask / (lengths * max(totals.sequences, 1))


def _constant_weights(mask: torch.Tensor, totals: BatchTotals) -> torch.Tensor:
    """``"constant"`` (Dr. GRPO), (B, T) -> (B, T): ``c = mask / (N_seq * max_tokens)``."""
    if totals.max_tokens is None:
        raise ValueError("loss_normalization='constant' needs BatchTotals.max_tokens")
    return mask / (max(totals.sequences, 1) * totals.max_tokens)


#: loss_normalization -> function from (mask (B, T), step totals) to loss weights c (B, T).
NORMALIZERS: dict[str, Callable[[torch.Tensor, BatchTotals], torch.Tensor]] = {
    "token": _per_token_weights,
    "sequence": _per_sequence_weights,
    "constant": _constant_weights,
}


# --------------------------------------------------------------------------- the loss


@dataclass(frozen=True)
class LossSettings:
    """The loss variant, resolved once from a :class:`TrainConfig` (registries looked up here)."""

    epsilon_low: float
    epsilon_high: float
    beta: float
    kl_ratio_correction: bool
    importance: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    normalizer: Callable[[torch.Tensor, BatchTotals], torch.Tensor]
    surrogate: _Surrogate = SURROGATES["ppo"]
    cispo_cap: float = 5.0
    sapo_temperature_pos: float = 1.0
    sapo_temperature_neg: float = 1.05

    @classmethod
    def from_config(cls, config: TrainConfig) -> LossSettings:
        """Pick the surrogate, importance and normalisation functions named by ``config``."""
        return cls(
            epsilon_low=config.epsilon,
            epsilon_high=config.clip_high,
            beta=config.beta,
            kl_ratio_correction=config.kl_ratio_correction,
            importance=IMPORTANCE_LEVELS[config.importance_level],
            normalizer=NORMALIZERS[config.loss_normalization],
            surrogate=SURROGATES[config.loss_type],
            cispo_cap=config.cispo_epsilon_high,
            sapo_temperature_pos=config.sapo_temperature_pos,
            sapo_temperature_neg=config.sapo_temperature_neg,
        )


@dataclass
class LossOutput:
    """One micro-batch's loss and its summed statistics (sums, so micro-batches add up).

    Attributes:
        loss: the micro-batch's share of the step loss (differentiable scalar).
        policy_loss: the share without the KL term (detached).
        kl_sum: sum of per-token KL over loss tokens, ratio-corrected when configured
            (0 when beta is 0).
        clipped_low / clipped_high: loss tokens whose ratio was clipped where it mattered
            (``"ppo"``: below ``1 - eps`` with A < 0, above ``1 + eps_high`` with A > 0;
            ``"cispo"``: above the cap with A > 0, counted as high, as TRL counts it;
            ``"sapo"``: none, its gate is smooth).
        ratio_sum: sum over loss tokens of the importance ratio.
        shift_sum: sum over loss tokens of ``A_it * log_rho_it`` (detached): how far the updates
            made since sampling moved the policy toward the tokens with positive advantage and
            away from those with negative (0 on-policy).
        tokens: loss tokens in the micro-batch.
    """

    loss: torch.Tensor
    policy_loss: float
    kl_sum: float
    clipped_low: int
    clipped_high: int
    ratio_sum: float
    shift_sum: float
    tokens: int


def grpo_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    settings: LossSettings,
    totals: BatchTotals,
    ref_logprobs: torch.Tensor | None = None,
) -> LossOutput:
    """The GRPO loss of one micro-batch (its share of the step; shares sum to the step loss).

    ``logprobs``: (B, T) current policy, with grad; ``old_logprobs``: (B, T) sampling
    policy, NaN where unknown; ``advantages``: (B,) or (B, 1), one per sequence, or (B, T),
    one per token (per-turn credit); ``mask``: (B, T) 1 on loss tokens; ``ref_logprobs``:
    (B, T), required when ``settings.beta > 0``.

    The objective for one update, over sequences ``i`` and their loss tokens ``t``::

        A_it         = (r_i - mean(r_group)) [/ (std(r_group) + 1e-4)]       advantages (or per token)
        log_rho_it   = logp_theta(y_it) - logp_old(y_it)                     per-token log-ratio
        w_it         = exp(log_rho_it)           (importance_level="token")
                     = exp(mean_t log_rho_it)    (importance_level="sequence", GSPO)
        s_it         = -min(w_it A_it, clip(w_it, 1 - eps, 1 + eps_high) A_it)    loss_type="ppo"
                     = -sg(min(w_it, cispo_cap)) A_it logp_theta(y_it)            loss_type="cispo"
                     = -(4 / tau) sigmoid(tau (w_it - 1)) A_it                    loss_type="sapo"
                       (tau = sapo_temperature_pos if A_it > 0 else sapo_temperature_neg)
        l_it         = s_it + beta * kl_it [* w_it]
        kl_it        = exp(ref_it - logp_it) - (ref_it - logp_it) - 1         k3 estimator
                       (times w_it when kl_ratio_correction: unbiased off-policy KL gradient)
        loss         = sum_it c_it * l_it        c from the normalisation registry

    The variants were chosen once from :data:`SURROGATES`, :data:`IMPORTANCE_LEVELS` and
    :data:`NORMALIZERS` by :meth:`LossSettings.from_config`; this hot path only calls them.

    Raises:
        ValueError: ``advantages`` has neither B nor B x T values.
    """
    mask = mask.to(logprobs.dtype)
    if advantages.dim() == 2 and advantages.shape == mask.shape:
        advantages = advantages.to(logprobs.dtype)  # (B, T): one per token
    elif advantages.numel() == mask.shape[0]:
        advantages = advantages.reshape(-1, 1).to(logprobs.dtype)  # (B, 1): one per sequence
    else:
        raise ValueError(
            f"advantages must have shape (B,), (B, 1) or (B, T) = {tuple(mask.shape)}, "
            f"got {tuple(advantages.shape)}"
        )
    old = fill_unknown_logprobs(old_logprobs.to(logprobs.dtype), logprobs)  # (B, T)
    log_ratio = masked_log_ratio(logprobs, old, mask)  # (B, T)
    log_weights = settings.importance(log_ratio, mask)  # (B, T) or (B, 1)
    per_token, ratio = settings.surrogate.loss(log_weights, logprobs, advantages, settings)
    per_token = per_token.expand_as(mask)  # (B, T)
    weights = settings.normalizer(mask, totals)  # (B, T)
    policy_loss = (per_token * weights).sum()
    loss = policy_loss
    kl_sum = 0.0
    if settings.beta != 0.0:
        if ref_logprobs is None:
            raise ValueError("beta > 0 needs ref_logprobs (the base model's log-probs, adapter disabled)")
        # Outside the mask the reference is the policy itself (KL 0, gradient 0): a huge gap there
        # would overflow exp to inf, and inf times a zero weight is NaN, in the loss and its gradient.
        ref = torch.where(mask.bool(), ref_logprobs.to(logprobs.dtype), logprobs.detach())  # (B, T)
        kl = k3_kl(logprobs, ref)  # (B, T)
        if settings.kl_ratio_correction:
            kl = kl * ratio  # (B, T) * (B, T) or (B, 1)
        loss = loss + settings.beta * (kl * weights).sum()
        kl_sum = float((kl.detach() * mask).sum())
    ratio_tok = ratio.detach().expand_as(mask)
    on = mask.bool()
    low, high = settings.surrogate.clipped(ratio_tok, advantages, settings)
    low, high = low & on, high & on
    return LossOutput(
        loss=loss,
        policy_loss=float(policy_loss.detach()),
        kl_sum=kl_sum,
        clipped_low=int(low.sum()),
        clipped_high=int(high.sum()),
        ratio_sum=float((ratio_tok * mask).sum()),
        shift_sum=float((advantages.detach() * log_ratio.detach() * mask).sum()),
        tokens=int(mask.sum()),
    )
