"""``TrainConfig`` (GRPO) and ``SFTConfig`` hold one ``AdapterConfig``: the LoRA shape and optimizer
settings are declared and documented once, and each objective's default learning rate is one constant."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from art_adapters import SFTConfig, TrainConfig
from art_adapters._adapter_config import GRPO_LEARNING_RATE, SFT_LEARNING_RATE, AdapterConfig
from art_adapters.apps._options import field_help

SHARED = set(AdapterConfig.model_fields)


def test_both_configs_hold_the_shared_settings_and_restate_none() -> None:
    assert {"lora_rank", "lora_alpha", "lora_dropout", "lora_target_modules", "weight_decay"} <= SHARED
    for config in (TrainConfig, SFTConfig):
        assert issubclass(config, AdapterConfig)
        assert SHARED <= set(config.model_fields)
        own = set(vars(config).get("__annotations__", {}))
        assert not own & SHARED, f"{config.__name__} restates {sorted(own & SHARED)}"
    assert TrainConfig().adapter_settings() == SFTConfig().adapter_settings()


def test_each_objective_has_its_one_default_learning_rate() -> None:
    assert TrainConfig().learning_rate == GRPO_LEARNING_RATE
    assert SFTConfig().learning_rate == SFT_LEARNING_RATE


def test_the_shared_rules_and_help_apply_to_both() -> None:
    for config in (TrainConfig, SFTConfig):
        with pytest.raises(ValidationError, match="lora_target_modules must name at least one linear layer"):
            config(lora_target_modules=())
        assert field_help(config, "lora_rank").startswith("Rank r of the LoRA matrices")
    sft = SFTConfig(lora_rank=8, lora_alpha=16, seed=3)
    assert TrainConfig(**sft.adapter_settings()).lora_rank == 8
    assert SFTConfig.model_validate_json(sft.model_dump_json()) == sft
