"""A LoRA trainer without torch math, for tests of the training API, loop and checkpoints.

:class:`FakeTrainer` builds the step's sequences with the backend's real ``build_sequences`` (the exact
token records, policy turns, dropped groups and the "nothing trainable" reasons are real), then, instead
of a forward/backward pass, reports deterministic metrics computed from those sequences and writes a
tiny real checkpoint folder (``adapter_config.json`` naming a LoRA, the trainer state) that the server
registers, serves (to the fake engine) and resumes from.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from art_adapters_backend.training.data import build_sequences
from art_adapters_backend.training.sft import (
    SFTMetrics,
    SFTStepResult,
    nothing_trainable_reason,
    sft_sequences,
)
from art_adapters_backend.training.trainer import STATE_FILE, GroupsStepResult, StepMetrics

from art_adapters import SFTConfig, TrainConfig, Trajectory, TrajectoryGroup

__all__ = ["FakeTrainer"]


class FakeTrainer:
    """Trains nothing, deterministically (see the module docstring); a ``TrainerFactory``."""

    def __init__(self, model_path: str | os.PathLike[str], device: str = "cpu") -> None:
        self.model_path = Path(model_path)
        self.device = device
        self.steps_done = 0
        self.lora: dict[str, Any] | None = None

    @property
    def has_adapter(self) -> bool:
        """Whether an adapter exists (made by a step or loaded)."""
        return self.lora is not None

    def reset_adapter(self) -> None:
        """Start from a fresh adapter at the next step."""
        self.lora, self.steps_done = None, 0

    def load_adapter(self, directory: str | os.PathLike[str], config: TrainConfig | None = None) -> None:
        """Resume from a folder :meth:`write_adapter` wrote."""
        directory = Path(directory)
        if not (directory / "adapter_config.json").is_file():
            raise FileNotFoundError(f"{directory} is not a PEFT adapter folder (no adapter_config.json)")
        state = json.loads((directory / STATE_FILE).read_text("utf-8"))
        self.steps_done, self.lora = int(state["steps_done"]), state["lora"]

    def train_groups(
        self,
        groups: Sequence[TrajectoryGroup],
        get_record: Any,
        render: Any,
        config: TrainConfig,
        *,
        policy: str | None = None,
    ) -> GroupsStepResult:
        """The real sequences of the step, and metrics derived from them instead of an update."""
        started = time.perf_counter()
        built = build_sequences(
            groups, get_record, render, policy=policy, scale_rewards=config.scale_rewards,
            max_sequence_length=config.max_sequence_length,
        )  # fmt: skip
        if built.nothing_trainable_reason is not None:
            return GroupsStepResult(trained=False, nothing_trainable_reason=built.nothing_trainable_reason,
                                    data=built.metrics)  # fmt: skip
        sequences = built.sequences
        if self.lora is None:
            self.lora = {"r": config.lora_rank, "lora_alpha": config.lora_alpha}
        self.steps_done += 1
        tokens = sum(s.loss_tokens for s in sequences)
        loss = -sum(s.advantage * s.loss_tokens for s in sequences) / max(tokens, 1)
        step = StepMetrics(
            loss=loss, policy_loss=loss, kl=None, grad_norm=0.1 + (self.steps_done * 7 + tokens) % 10 / 10,
            clip_fraction=0.0, clip_low_fraction=0.0,
            clip_high_fraction=0.0, ratio_mean=1.0, sequences=len(sequences),
            micro_batches=-(-len(sequences) // config.micro_batch_size), tokens=tokens,
            sequence_tokens=sum(len(s.token_ids) for s in sequences),
            padded_tokens=len(sequences) * max(len(s.token_ids) for s in sequences),
            seconds=time.perf_counter() - started, learning_rate=config.learning_rate, step=self.steps_done,
        )  # fmt: skip
        return GroupsStepResult(trained=True, data=built.metrics, step=step)

    def train_sft(
        self, trajectories: Sequence[Trajectory], get_record: Any, render: Any, config: SFTConfig
    ) -> SFTStepResult:
        """The real SFT sequences of the step (:func:`sft_sequences`), and metrics derived from them."""
        started = time.perf_counter()
        built = sft_sequences(
            trajectories, get_record, render,
            only_model=config.only_model, max_sequence_length=config.max_sequence_length,
        )  # fmt: skip
        if not built.sequences:
            reason = nothing_trainable_reason(built.metrics, len(trajectories))
            return SFTStepResult(trained=False, nothing_trainable_reason=reason, data=built.metrics)
        if self.lora is None:
            self.lora = {"r": config.lora_rank, "lora_alpha": config.lora_alpha}
        self.steps_done += 1
        sequences = built.sequences
        tokens = sum(s.loss_tokens for s in sequences)
        updates = config.epochs * -(-len(sequences) // config.batch_size)
        step = SFTMetrics(
            loss=1.0 / (1 + config.epochs), first_pass_loss=0.5, grad_norm=0.5, grad_norm_max=1.0,
            epochs=config.epochs, updates=updates, sequences=len(sequences),
            micro_batches=updates, tokens=tokens, sequence_tokens=sum(len(s.token_ids) for s in sequences),
            seconds=time.perf_counter() - started, learning_rate=config.learning_rate, step=self.steps_done,
        )  # fmt: skip
        return SFTStepResult(trained=True, data=built.metrics, step=step)

    def write_adapter(self, folder: Path, *, optimizer: bool = True) -> None:
        """Write a tiny LoRA checkpoint folder (config and trainer state, no weights)."""
        if self.lora is None:
            raise RuntimeError("no adapter to save yet: run a step first")
        adapter = {"peft_type": "LORA", "base_model_name_or_path": str(self.model_path),
                   "r": self.lora["r"], "lora_alpha": self.lora["lora_alpha"], "fake": True}  # fmt: skip
        (folder / "adapter_config.json").write_text(json.dumps(adapter, indent=2), "utf-8")
        state = {"steps_done": self.steps_done, "lora": self.lora}
        (folder / STATE_FILE).write_text(json.dumps(state), "utf-8")
