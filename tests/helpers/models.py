"""A fresh ``TrainableModel`` registered on a backend: the first step of every end-to-end test."""

from __future__ import annotations

import uuid
from typing import Any

from art_adapters import Backend, TrainableModel

__all__ = ["registered", "unique_name"]


def unique_name(prefix: str) -> str:
    """``<prefix>-<8 hex digits>``: a model name no other test on a shared backend uses."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def registered(backend: Backend, name: str, project: str, **fields: Any) -> TrainableModel:
    """``TrainableModel(name=name, project=project, **fields)``, registered on ``backend``."""
    model = TrainableModel(name=name, project=project, **fields)
    await model.register(backend)
    return model
