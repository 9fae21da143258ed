"""A LoRA trainer without torch math, for tests of the training API, loop and checkpoints.

:class:`FakeTrainer` is a :class:`~art_adapters_backend.training.trainer.LoraTrainer` whose base model
is an empty module and whose steps make no forward/backward pass: the product's orchestration runs
(``train_groups``/``train_sft`` build the sequences with the real builders, the "nothing trainable"
reasons, cancellation, the result), then :meth:`run_step` reports deterministic metrics computed
from those sequences, and :meth:`write_adapter` writes a tiny real checkpoint folder
(``adapter_config.json`` naming a LoRA, the trainer state) that the server registers, serves (to
the fake engine) and resumes from.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from art_adapters_backend.training.batches import check_sequences
from art_adapters_backend.training.data import NothingTrainableError, TrainingSequence
from art_adapters_backend.training.grpo_step import GrpoObjective, StepMetrics
from art_adapters_backend.training.sft import SFTMetrics, SftObjective
from art_adapters_backend.training.step import Objective
from art_adapters_backend.training.trainer import STATE_FILE, LoraTrainer

from art_adapters import TrainConfig

__all__ = ["FakeTrainer"]


class FakeTrainer(LoraTrainer):
    """Trains nothing, deterministically (see the module docstring); a ``TrainerFactory``."""

    def _load_base(self) -> tuple[torch.nn.Module, int]:
        return torch.nn.Module(), 0

    def _attach_lora(self, config: TrainConfig) -> Any:
        raise AssertionError("the fake trainer attaches no LoRA")

    @property
    def has_adapter(self) -> bool:
        """Whether an adapter exists (made by a step or loaded)."""
        return self.lora is not None

    def run_step(self, objective: Objective, sequences: Sequence[TrainingSequence]) -> Any:
        """The step's checks, then metrics derived from the sequences instead of an update."""
        started = time.perf_counter()
        check_sequences(sequences)
        tokens = sum(s.loss_tokens for s in sequences)
        if not sequences or tokens == 0:
            raise NothingTrainableError("nothing trainable: no loss token")
        self.check_cancelled()
        config = objective.adapter_config()
        if self.lora is None:
            self.lora = {"r": config.lora_rank, "lora_alpha": config.lora_alpha}
        self.steps_done += 1
        seconds = time.perf_counter() - started
        sequence_tokens = sum(len(s.token_ids) for s in sequences)
        if isinstance(objective, SftObjective):
            sft = objective.config
            updates = sft.epochs * -(-len(sequences) // sft.batch_size)
            return SFTMetrics(
                loss=1.0 / (1 + sft.epochs), first_pass_loss=0.5, grad_norm=0.5, grad_norm_max=1.0,
                epochs=sft.epochs, updates=updates, sequences=len(sequences), micro_batches=updates,
                tokens=tokens, sequence_tokens=sequence_tokens, seconds=seconds, learning_rate=sft.learning_rate,
                step=self.steps_done,
            )  # fmt: skip
        assert isinstance(objective, GrpoObjective)
        loss = -sum(s.advantage * s.loss_tokens for s in sequences) / max(tokens, 1)
        return StepMetrics(
            loss=loss, policy_loss=loss, kl=None, grad_norm=0.1 + (self.steps_done * 7 + tokens) % 10 / 10,
            clip_fraction=0.0, clip_low_fraction=0.0,
            clip_high_fraction=0.0, ratio_mean=1.0, sequences=len(sequences),
            micro_batches=-(-len(sequences) // config.micro_batch_size), tokens=tokens,
            sequence_tokens=sequence_tokens,
            padded_tokens=len(sequences) * max(len(s.token_ids) for s in sequences),
            seconds=seconds, learning_rate=config.learning_rate, step=self.steps_done,
        )  # fmt: skip

    def load_adapter(self, directory: str | os.PathLike[str], config: TrainConfig | None = None) -> None:
        """Resume from a folder :meth:`write_adapter` wrote."""
        directory = Path(directory)
        if not (directory / "adapter_config.json").is_file():
            raise FileNotFoundError(f"{directory} is not a PEFT adapter folder (no adapter_config.json)")
        state = json.loads((directory / STATE_FILE).read_text("utf-8"))
        self.steps_done, self.lora = int(state["steps_done"]), state["lora"]

    def write_adapter(self, folder: Path, *, optimizer: bool = True) -> None:
        """Write a tiny LoRA checkpoint folder (config and trainer state, no weights)."""
        if self.lora is None:
            raise RuntimeError("no adapter to save yet: run a step first")
        adapter = {"peft_type": "LORA", "base_model_name_or_path": str(self.model_path),
                   "r": self.lora["r"], "lora_alpha": self.lora["lora_alpha"], "fake": True}  # fmt: skip
        (folder / "adapter_config.json").write_text(json.dumps(adapter, indent=2), "utf-8")
        state = {"steps_done": self.steps_done, "lora": self.lora}
        (folder / STATE_FILE).write_text(json.dumps(state), "utf-8")
