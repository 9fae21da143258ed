"""The one update loop's parts: what an objective (GRPO, SFT) tells :meth:`.trainer.LoraTrainer.run_step`.

A step is passes of optimizer updates; an update accumulates its micro-batches' losses, clips the
gradient and applies it once. The loop (micro-batches, accumulation, clipping, the non-finite rule,
the snapshot that undoes a failed step, cancellation) is the trainer's; an :class:`Objective` says
how the updates are laid out, what a micro-batch's loss is, and what the step reports (TRL's shape:
one ``training_step``, one ``compute_loss`` per trainer).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from .batches import Batch

if TYPE_CHECKING:
    from art_adapters import TrainConfig

    from .data import TrainingSequence
    from .trainer import LoraTrainer

__all__ = ["Objective", "Update", "UpdateResult"]


@dataclass
class Update:
    """One optimizer update: its micro-batches, its loss tokens and what its loss is normalised by."""

    batches: list[Batch]
    tokens: int
    totals: Any = None


@dataclass
class UpdateResult:
    """What one applied update gave: its pass, summed micro-batch losses, gradient norm, and each
    micro-batch's extra (what :meth:`Objective.micro_loss` returned beside the loss)."""

    pass_index: int
    update: Update
    loss: float
    grad_norm: float
    extras: list[Any] = field(default_factory=list)


class Objective(ABC):
    """A training objective over the trainer's one update loop.

    Attributes:
        name: what the step is called in messages (``"GRPO"``, ``"SFT"``).
        advice: what to change after a non-finite update.
        seed: seeds torch at ``seed + steps done`` (``None``: not seeded).
        max_grad_norm: clip each update's gradient norm to this (``None``: no clipping).
    """

    name: str = ""
    advice: str = "lower learning_rate or set max_grad_norm"
    seed: int | None = None
    max_grad_norm: float | None = None

    def prepare(self, trainer: LoraTrainer) -> None:  # noqa: B027 - optional hook
        """Checks that may refuse the step, before the adapter is created."""

    @abstractmethod
    def adapter_config(self) -> TrainConfig:
        """The settings that create the adapter when this step is the model's first."""

    @abstractmethod
    def optimizer(self, trainer: LoraTrainer) -> torch.optim.Optimizer:
        """The optimizer of this step (its learning rate and weight decay set)."""

    @abstractmethod
    def plan(self, trainer: LoraTrainer, sequences: Sequence[TrainingSequence]) -> list[list[Update]]:
        """The step's passes, each a list of updates (in order)."""

    def before_updates(self, trainer: LoraTrainer, passes: list[list[Update]]) -> None:  # noqa: B027
        """Called once before the first of several updates (weights not moved yet)."""

    @abstractmethod
    def micro_loss(self, trainer: LoraTrainer, batch: Batch, update: Update) -> tuple[torch.Tensor, Any]:
        """One micro-batch's share of its update's loss (to back-propagate), and anything to keep."""

    @abstractmethod
    def metrics(
        self, trainer: LoraTrainer, sequences: Sequence[TrainingSequence], done: list[UpdateResult], seconds: float
    ) -> Any:
        """What the step reports, from the updates it made (``trainer.steps_done`` already counts it)."""
