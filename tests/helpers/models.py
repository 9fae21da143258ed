"""A fresh ``TrainableModel`` registered on a backend: the first step of every end-to-end test."""

from __future__ import annotations

from typing import Any

from art_adapters import Backend, TrainableModel

__all__ = ["registered"]


async def registered(backend: Backend, name: str, project: str, **fields: Any) -> TrainableModel:
    """``TrainableModel(name=name, project=project, **fields)``, registered on ``backend``."""
    model = TrainableModel(name=name, project=project, **fields)
    await model.register(backend)
    return model
