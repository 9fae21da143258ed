"""The export API: ``POST /art/models/{name}/export`` writes a checkpoint out for deployment.

The folder is written on the backend's machine (``out`` is a path there, and must be absolute);
see :mod:`.export` for what it holds and ``docs/export.md`` for the whole story.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from .errors import BadRequestError
from .export import EXPORT_MANIFEST, export_checkpoint
from .state import ServerState

__all__ = ["ExportRequest", "router"]

logger = logging.getLogger(__name__)

router = APIRouter(prefix="/art/models", tags=["export"])


class ExportRequest(BaseModel):
    """Body of ``POST /art/models/{name}/export``."""

    model_config = ConfigDict(extra="forbid")

    out: str = Field(description="Absolute path of the folder to write, on the backend's machine.")
    step: int | None = Field(default=None, ge=0, description="The checkpoint step; default the latest.")
    merged: bool = Field(
        default=False, description="Write the base model with the adapter merged in (safetensors)."
    )
    force: bool = Field(default=False, description="Replace `out` if it exists and is not empty.")


@router.post("/{name}/export", summary="Export a checkpoint as a PEFT adapter folder or a merged model")
async def export_model(name: str, body: ExportRequest, request: Request) -> dict[str, Any]:
    """The export's ``export.json``: ``path``, ``name``, ``step``, ``merged``, ``base_model_name_or_path``,
    ``vllm_command`` (argv), ... 404 for an unknown model or step, 409 if ``out`` exists and is not
    empty (send ``force``), 400 for a relative ``out`` or step 0 without ``merged``."""
    state: ServerState = request.app.state.server
    record = state.registry.require(name)
    if not Path(body.out).is_absolute():
        raise BadRequestError(
            f"out must be an absolute path on the backend's machine, got {body.out!r}", param="out"
        )
    step = record.steps[-1] if body.step is None else body.step
    # the lease keeps retention from deleting the step while its files are read; an ExportError
    # carries its own status (400, 404 or 409)
    async with state.checkpoint_leases.reading(name, step):
        path = await asyncio.to_thread(
            export_checkpoint, state.config.run_dir, name, step, out=body.out, merged=body.merged,
            force=body.force, cache_dir=state.config.cache_dir,
        )  # fmt: skip
    return json.loads((path / EXPORT_MANIFEST).read_text(encoding="utf-8"))
