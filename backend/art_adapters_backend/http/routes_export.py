"""The export API: ``POST /art/models/{name}/export`` writes a checkpoint out for deployment.

The folder is written on the backend's machine (``out`` is an absolute path there, under
``run_dir/exports`` or a ``--export-root``); see :mod:`..serving.export` for what it holds and
``docs/export.md``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from ..config import ServeConfig
from ..errors import BadRequestError, PermissionDeniedError, shown
from ..serving.export import EXPORT_MANIFEST, ExportExistsError, export_checkpoint
from ..state import ServerState

__all__ = ["EXPORTS_DIR", "ExportRequest", "check_out", "export_roots", "router"]

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
    force: bool = Field(
        default=False, description="Replace `out` if it holds an earlier export (never another folder)."
    )


#: Where exports go when the server has no ``--export-root``: ``run_dir/exports``.
EXPORTS_DIR = "exports"


def export_roots(config: ServeConfig) -> list[Path]:
    """The folders an export may be written under: ``run_dir/exports`` and each ``--export-root``."""
    return [(config.run_dir / EXPORTS_DIR).resolve(), *(Path(root).resolve() for root in config.export_roots)]


def check_out(out: str, config: ServeConfig, force: bool) -> Path:
    """``out`` if the HTTP API may write it, else the error to answer.

    It must be absolute and, symbolic links resolved, strictly inside one of :func:`export_roots`
    (403 otherwise); ``force`` replaces only a folder an earlier export wrote (one holding its
    ``export.json``): any other non-empty folder is answered 409, never deleted.
    """
    path = Path(out)
    if not path.is_absolute():
        raise BadRequestError(f"out must be an absolute path on the backend's machine, got {shown(out)}",
                              param="out")  # fmt: skip
    resolved = path.resolve()
    roots = export_roots(config)
    if not any(root in resolved.parents for root in roots):
        allowed = ", ".join(str(root) for root in roots)
        raise PermissionDeniedError(
            f"out {shown(out)} is outside the folders this server exports to ({allowed}); export under one of "
            "them, or start the server with --export-root",
            param="out",
            code="export_path_not_allowed",
        )
    if force and resolved.is_dir() and any(resolved.iterdir()) and not (resolved / EXPORT_MANIFEST).is_file():
        raise ExportExistsError(
            f"{shown(out)} is not empty and holds no {EXPORT_MANIFEST}: force replaces only an earlier export, "
            "never another folder; choose another folder or empty it yourself"
        )
    return path


@router.post("/{name}/export", summary="Export a checkpoint as a PEFT adapter folder or a merged model")
async def export_model(name: str, body: ExportRequest, request: Request) -> dict[str, Any]:
    """The export's ``export.json``: ``path``, ``name``, ``step``, ``merged``, ``base_model_name_or_path``,
    ``vllm_command`` (argv), ... 404 for an unknown model or step, 409 if ``out`` exists and is not
    empty (send ``force`` to replace an earlier export), 403 for an ``out`` outside ``run_dir/exports``
    and the ``--export-root`` folders, 400 for a relative ``out`` or step 0 without ``merged``."""
    state: ServerState = request.app.state.server
    record = state.registry.require(name)
    await asyncio.to_thread(check_out, body.out, state.config, body.force)
    step = record.steps[-1] if body.step is None else body.step
    # the lease keeps retention from deleting the step while its files are read; an ExportError
    # carries its own status (400, 404 or 409)
    async with state.checkpoint_leases.reading(name, step):
        path = await asyncio.to_thread(
            export_checkpoint, state.config.run_dir, name, step, out=body.out, merged=body.merged,
            force=body.force, cache_dir=state.config.cache_dir,
        )  # fmt: skip
    return json.loads((path / EXPORT_MANIFEST).read_text(encoding="utf-8"))
