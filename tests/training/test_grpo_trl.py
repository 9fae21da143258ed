"""Our GRPO loss against TRL's own ``GRPOTrainer.compute_loss`` on identical inputs (to 1e-5).

TRL has no standalone loss function, so each case builds a real ``GRPOTrainer`` (TRL 1.x)
around a tiny random Llama (2 layers, 66-token vocabulary, built in code, no hub) and calls
its ``compute_loss`` with fixed prompt/completion ids, masks, advantages and old log-probs.
Our side scores the same model with :func:`token_logprobs` and :func:`grpo_loss`.

The mapping checked here (ours -> TRL ``GRPOConfig``), also in docs/training.md:
``epsilon -> epsilon``, ``epsilon_high -> epsilon_high``, ``beta -> beta``,
``importance_level -> importance_sampling_level``, ``loss_normalization``:
``"token" -> loss_type="bnpo"``, ``"sequence" -> "grpo"``, ``"constant" -> "dr_grpo"`` with
``max_tokens -> max_completion_length``; ``kl_ratio_correction -> use_bias_correction_kl``;
``scale_rewards`` True/False -> "group"/"none".
``loss_type="cispo"`` -> ``loss_type="cispo"`` with ``cispo_epsilon_high -> epsilon_high`` (its
normalisation is our ``"token"``); ``loss_type="sapo"`` -> ``loss_type="sapo"`` with the same
``sapo_temperature_pos`` / ``_neg`` (its normalisation is our ``"sequence"``, SAPO's default here).
TRL runs in eval mode so its gradient-accumulation divisor is 1.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch

trl = pytest.importorskip("trl", reason="TRL (test extra) not installed: pip install 'art-adapters[test]'")

from art_adapters_backend.training.grpo import (
    BatchTotals,
    LossSettings,
    group_advantages,
    grpo_loss,
    token_logprobs,
)

from art_adapters import TrainConfig
from tests.helpers.tiny_models import save_random_model, tiny_config

B, P, C = 3, 4, 6  # sequences, prompt tokens, completion tokens
MAX_COMPLETION = 8
TRL_LOSS_TYPE = {"token": "bnpo", "sequence": "grpo", "constant": "dr_grpo"}
#: Our loss_normalization that TRL's own normalisation of each non-PPO loss type equals.
TRL_OWN_NORMALIZATION = {"cispo": "token", "sapo": "sequence"}


def _trl_loss_type(config: TrainConfig) -> str:
    if config.loss_type == "ppo":
        return TRL_LOSS_TYPE[config.loss_normalization]
    assert config.loss_normalization == TRL_OWN_NORMALIZATION[config.loss_type]
    return config.loss_type


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, object]:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, PreTrainedTokenizerFast

    vocab = {f"t{i}": i for i in range(64)} | {"<pad>": 64, "<eos>": 65}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>")
    config = tiny_config(
        LlamaConfig, tokenizer, hidden_size=32, max_position_embeddings=64, eos_token_id=65, bos_token_id=0
    )
    # Saved so TRL can load its reference model (beta > 0) by path; both load the same weights.
    folder = tmp_path_factory.mktemp("tiny-llama")
    save_random_model(config, tokenizer, folder, seed=0)
    return str(folder), tokenizer


def _trainer(tiny: tuple[str, object], config: TrainConfig) -> object:
    """A real TRL ``GRPOTrainer`` configured by the documented mapping of ``config``."""
    from datasets import Dataset

    path, tokenizer = tiny
    args = trl.GRPOConfig(
        output_dir="unused",
        per_device_train_batch_size=B,
        num_generations=B,
        max_completion_length=config.max_tokens or MAX_COMPLETION,
        loss_type=_trl_loss_type(config),
        importance_sampling_level=config.importance_level,
        epsilon=config.epsilon,
        epsilon_high=config.cispo_epsilon_high if config.loss_type == "cispo" else config.clip_high,
        sapo_temperature_pos=config.sapo_temperature_pos,
        sapo_temperature_neg=config.sapo_temperature_neg,
        beta=config.beta,
        use_bias_correction_kl=config.kl_ratio_correction,
        scale_rewards="group" if config.scale_rewards else "none",
        report_to=[],
        use_cpu=True,
        bf16=False,  # TRL defaults to bf16 autocast where supported; compare in fp32
        save_strategy="no",
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = trl.GRPOTrainer(
            model=path,
            reward_funcs=[lambda completions, **_: [0.0] * len(completions)],
            args=args,
            train_dataset=Dataset.from_dict({"prompt": ["t1 t2"] * B}),
            processing_class=tokenizer,
        )
    trainer.model.eval()  # eval mode: TRL's gradient-accumulation divisor is 1
    return trainer


def _inputs(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    prompt_ids = torch.randint(0, 64, (B, P), generator=g)
    completion_ids = torch.randint(0, 64, (B, C), generator=g)
    completion_mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 0]])
    with torch.no_grad():
        ids = torch.cat([prompt_ids, completion_ids], 1)
        current = token_logprobs(model(input_ids=ids).logits, ids)[:, P:]
    # Old log-probs near the current ones, far enough that both clip sides trigger.
    old = current + 0.35 * torch.randn(B, C, generator=g)
    ref = current + 0.2 * torch.randn(B, C, generator=g)
    return {
        "prompt_ids": prompt_ids,
        "prompt_mask": torch.ones(B, P, dtype=torch.long),
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "advantages": torch.tensor([1.2, -0.7, 0.4]),
        "old_per_token_logps": old,
        "ref_per_token_logps": ref,
        "num_items_in_batch": completion_mask.sum().float(),
    }


def _trl_loss(trainer: object, config: TrainConfig, inputs: dict[str, torch.Tensor]) -> tuple[float, dict]:
    inputs = dict(inputs)
    if config.beta == 0.0:
        inputs.pop("ref_per_token_logps")
    with torch.no_grad():
        loss = trainer.compute_loss(trainer.model, inputs)
    metrics = {k: v[-1] for k, v in trainer._metrics["eval"].items() if v}
    return float(loss), metrics


def _matching_losses(
    tiny: tuple[str, object], config: TrainConfig, token_advantages: bool = False
) -> tuple[Any, dict]:
    """Our loss and TRL's metrics on the same inputs, once the two loss values agree (and are not ~0).

    ``token_advantages``: one advantage per completion token, shape (B, C), instead of per sequence.
    """
    trainer = _trainer(tiny, config)
    inputs = _inputs(trainer.model)
    if token_advantages:
        g = torch.Generator().manual_seed(2)
        inputs["advantages"] = torch.randn(B, C, generator=g)
    trl_loss, trl_metrics = _trl_loss(trainer, config, inputs)
    ours = _our_loss(trainer.model, config, inputs)
    assert abs(float(ours.loss) - trl_loss) < 1e-5, (float(ours.loss), trl_loss)
    assert abs(trl_loss) > 1e-3  # a non-trivial value, not 0 == 0
    return ours, trl_metrics


def _our_loss(model: torch.nn.Module, config: TrainConfig, inputs: dict[str, torch.Tensor]):
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
    pad = torch.zeros(B, P)
    mask = torch.cat([pad, inputs["completion_mask"].float()], 1)
    old = torch.cat([pad, inputs["old_per_token_logps"]], 1)
    ref = torch.cat([pad, inputs["ref_per_token_logps"]], 1)
    with torch.no_grad():
        logprobs = token_logprobs(model(input_ids=ids).logits, ids)
    totals = BatchTotals(sequences=B, tokens=int(mask.sum()), max_tokens=config.max_tokens)
    advantages = inputs["advantages"]
    if advantages.dim() == 2:  # per completion token: the prompt positions get 0 (outside the mask anyway)
        advantages = torch.cat([pad, advantages], 1)
    return grpo_loss(logprobs, old, advantages, mask, LossSettings.from_config(config), totals, ref)


CASES = [
    TrainConfig(),
    TrainConfig(loss_normalization="sequence"),
    TrainConfig(loss_normalization="constant", max_tokens=MAX_COMPLETION),
    TrainConfig(epsilon=0.1, epsilon_high=0.28),
    TrainConfig(importance_level="sequence", loss_normalization="sequence"),
    TrainConfig(importance_level="sequence", epsilon=0.05, epsilon_high=0.08),
    TrainConfig(beta=0.04),
    TrainConfig(beta=0.1, loss_normalization="sequence", epsilon_high=0.3),
    TrainConfig(beta=0.04, importance_level="sequence", loss_normalization="constant", max_tokens=10),
    TrainConfig(beta=0.2, kl_ratio_correction=False),
]


@pytest.mark.slow
@pytest.mark.parametrize("config", CASES, ids=lambda c: repr(c.model_dump(exclude_defaults=True)))
def test_loss_matches_trl_compute_loss(tiny: tuple[str, object], config: TrainConfig) -> None:
    ours, trl_metrics = _matching_losses(tiny, config)
    if config.importance_level == "token":
        # TRL's clip fractions are global masked means over completion tokens.
        assert ours.clipped_low / ours.tokens == pytest.approx(trl_metrics["clip_ratio/low_mean"], abs=1e-6)
        assert ours.clipped_high / ours.tokens == pytest.approx(trl_metrics["clip_ratio/high_mean"], abs=1e-6)
    if config.beta > 0:
        assert ours.kl_sum / ours.tokens == pytest.approx(trl_metrics["kl"], abs=1e-5)


#: CISPO and SAPO (TRL's ``loss_type`` of the same names), each with its own normalisation.
NEW_LOSS_CASES = [
    TrainConfig(loss_type="cispo"),
    TrainConfig(loss_type="cispo", cispo_epsilon_high=1.1),  # the cap binds on some tokens
    TrainConfig(loss_type="cispo", cispo_epsilon_high=1.2, beta=0.04),
    TrainConfig(loss_type="cispo", cispo_epsilon_high=1.05, importance_level="sequence"),
    TrainConfig(loss_type="sapo"),
    TrainConfig(loss_type="sapo", sapo_temperature_pos=2.0, sapo_temperature_neg=4.0),
    TrainConfig(loss_type="sapo", beta=0.1, kl_ratio_correction=False),
    TrainConfig(loss_type="sapo", importance_level="sequence", sapo_temperature_neg=0.5),
]


@pytest.mark.slow
@pytest.mark.parametrize("config", NEW_LOSS_CASES, ids=lambda c: repr(c.model_dump(exclude_defaults=True)))
def test_cispo_and_sapo_match_trl_compute_loss(tiny: tuple[str, object], config: TrainConfig) -> None:
    ours, trl_metrics = _matching_losses(tiny, config)
    if config.loss_type == "cispo":  # TRL's cispo_clip_ratio is our high side; nothing on the low side
        assert ours.clipped_low == 0
        if config.importance_level == "token":  # (per sequence TRL counts sequences, we count tokens)
            assert ours.clipped_high / ours.tokens == pytest.approx(trl_metrics["cispo_clip_ratio"], abs=1e-6)
        assert (ours.clipped_high > 0) == (trl_metrics["cispo_clip_ratio"] > 0)
        assert (ours.clipped_high > 0) == (config.cispo_epsilon_high < 5.0)  # the caps near 1 bind
    else:
        assert ours.clipped_low == ours.clipped_high == 0  # SAPO has no hard clip
    if config.beta > 0:
        assert ours.kl_sum / ours.tokens == pytest.approx(trl_metrics["kl"], abs=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize(
    "config",
    [TrainConfig(), TrainConfig(loss_type="cispo", cispo_epsilon_high=1.1), TrainConfig(loss_type="sapo"),
     TrainConfig(beta=0.04, epsilon_high=0.28, loss_normalization="sequence")],  # fmt: skip
    ids=lambda c: repr(c.model_dump(exclude_defaults=True)),
)
def test_per_token_advantages_match_trl(tiny: tuple[str, object], config: TrainConfig) -> None:
    """TRL's loss also takes (B, T) advantages; ours gives the same value with them."""
    _matching_losses(tiny, config, token_advantages=True)


def test_some_tokens_are_clipped_on_both_sides(tiny: tuple[str, object]) -> None:
    """The inputs above exercise clipping (otherwise the comparison would not cover it)."""
    model = _trainer(tiny, TrainConfig()).model
    out = _our_loss(model, TrainConfig(), _inputs(model))
    assert out.clipped_low > 0 and out.clipped_high > 0


def test_advantages_match_trl_group_formula() -> None:
    """TRL's group advantage is (r - mean) / (nanstd + 1e-4) with its own ``nanstd`` (Bessel)."""
    from trl.trainer.utils import nanstd

    rewards = torch.tensor([0.1, 0.9, 0.4, 0.4, 1.0])
    expected = (rewards - rewards.mean()) / (nanstd(rewards) + 1e-4)
    assert torch.allclose(group_advantages(rewards, scale=True), expected, atol=1e-6)
    assert torch.allclose(group_advantages(rewards, scale=False), rewards - rewards.mean(), atol=1e-7)
