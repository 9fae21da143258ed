"""``TrainingCancelledError``: a training step stopped between micro-batches because the server is stopping.

Light on purpose (no torch): the service catches it without importing the trainers.
"""

from __future__ import annotations

__all__ = ["TrainingCancelledError"]


class TrainingCancelledError(Exception):
    """The step was stopped by ``LoraTrainer.cancel`` (the server is stopping); nothing was saved."""
