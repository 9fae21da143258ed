"""Test helper: two training steps from one starting state, to check that a step computed two ways is one step."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import torch
from art_adapters_backend.training.data import TrainingSequence
from art_adapters_backend.training.trainer import LoraTrainer

First = TypeVar("First")
Second = TypeVar("Second")


def off_policy(
    trainer: LoraTrainer, sequences: Sequence[TrainingSequence], config: Any, shift: float
) -> list[TrainingSequence]:
    """``sequences`` with old log-probs on their loss tokens set to the current policy's, moved by
    ``shift`` x -1, 0, +1 in turn, so the importance ratio leaves 1 and the clip acts."""
    scored = trainer.score(sequences, config)
    return [
        s.model_copy(update={"old_logprobs": [lp + shift * ((t % 3) - 1) if m else None
                                              for t, (lp, m) in enumerate(zip(row, s.loss_mask, strict=True))]})
        for s, row in zip(sequences, scored, strict=True)
    ]  # fmt: skip


def from_one_start(
    trainer: LoraTrainer, first: Callable[[], First], second: Callable[[], Second]
) -> tuple[First, torch.Tensor, Second, torch.Tensor]:
    """Run ``first()``, put the LoRA weights, the optimizer state and the step count back, run ``second()``.

    Returns each step's metrics with its update: the trainable parameters' change, flattened.
    """
    assert trainer.model is not None and trainer.optimizer is not None
    params = {n: p for n, p in trainer.model.named_parameters() if p.requires_grad}
    start = {n: p.detach().clone() for n, p in params.items()}
    optimizer_state = copy.deepcopy(trainer.optimizer.state_dict())

    def update() -> torch.Tensor:
        return torch.cat([(p.detach() - start[n]).flatten() for n, p in params.items()])

    first_metrics = first()
    first_update = update()
    with torch.no_grad():
        for n, p in params.items():
            p.copy_(start[n])
    trainer.optimizer.load_state_dict(optimizer_state)
    trainer.steps_done -= 1
    second_metrics = second()
    return first_metrics, first_update, second_metrics, update()
