"""LoRA checkpoints on disk: written atomically, listed when complete, pruned by a retention policy.

A reader sees a complete checkpoint or none, and a retried train request is answered from the
checkpoint it made instead of training again.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from art_adapters.files import TMP_PREFIX, atomic_directory, make_dirs

__all__ = ["MANIFEST", "Checkpoint", "CheckpointStore"]

logger = logging.getLogger(__name__)

#: The file that marks a checkpoint folder and records its step and metrics.
MANIFEST = "checkpoint.json"


class Checkpoint(BaseModel):
    """A complete checkpoint on disk.

    A folder ``<root>/<step:06d>/`` holding a PEFT adapter (``adapter_config.json``,
    ``adapter_model.safetensors``), optionally the optimizer state, and ``checkpoint.json``
    (step, metrics, time, and the train request that made it: its ``Idempotency-Key``, body
    hash and result, so a retried request is answered from disk instead of training again).

    Attributes:
        step: the training step that produced it.
        path: its folder (a PEFT adapter folder).
        metrics: the step's scalar metrics (used by the retention policy's "best").
        created: Unix time it was written.
        request_key: the ``Idempotency-Key`` of the train request that made it, if it sent one.
        request_hash: the SHA-256 of that request's body (groups and config).
        result: that request's result body (``trained``, ``metrics``, ``dropped``, ``groups_file``).
    """

    step: int
    path: Path
    metrics: dict[str, float] = Field(default_factory=dict)
    created: float = 0.0
    request_key: str | None = None
    request_hash: str | None = None
    result: dict[str, Any] | None = None


class CheckpointStore:
    """The checkpoints of one model under ``root``; opening it removes partial writes.

    Args:
        root: the folder holding ``<step:06d>/`` checkpoint folders (created if missing).
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = make_dirs(root)
        self.removed_partial = self.cleanup_partial()

    def cleanup_partial(self) -> list[str]:
        """Remove folders left by interrupted writes; returns their names."""
        removed = []
        for entry in self.root.iterdir():
            if entry.name.startswith(TMP_PREFIX):
                shutil.rmtree(entry, ignore_errors=True)
                removed.append(entry.name)
        if removed:
            logger.warning(
                "removed %d partial checkpoint folder(s) in %s: %s", len(removed), self.root, removed
            )
        return removed

    def path(self, step: int) -> Path:
        """The folder checkpoint ``step`` has (or will have)."""
        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        return self.root / f"{step:06d}"

    def write(
        self,
        step: int,
        writer: Callable[[Path], None],
        metrics: dict[str, float] | None = None,
        *,
        request: dict[str, Any] | None = None,
    ) -> Checkpoint:
        """Write checkpoint ``step`` atomically: ``writer(folder)`` fills a temporary folder.

        The folder is written under a hidden temporary name in the same folder, every file
        fsynced, then renamed into place (new parent folders fsynced into theirs): a reader sees
        a complete checkpoint or none, and a crash mid-write leaves only a ``.tmp-*`` folder,
        removed when the store is next opened (:meth:`cleanup_partial`).

        ``request`` (``request_key``, ``request_hash``, ``result``) goes into the manifest with it.

        Raises:
            FileExistsError: checkpoint ``step`` already exists.
        """
        final = self.path(step)
        checkpoint = Checkpoint(
            step=step, path=final, metrics=dict(metrics or {}), created=time.time(), **(request or {})
        )
        with atomic_directory(final) as tmp:
            writer(tmp)
            manifest = checkpoint.model_dump(mode="json", exclude={"path"})
            (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2), encoding="utf-8")
        logger.info("checkpoint %d written to %s", step, final)
        return checkpoint

    def checkpoints(self) -> list[Checkpoint]:
        """Complete checkpoints, oldest step first (folders without a manifest are ignored)."""
        found = []
        for entry in self.root.iterdir():
            if entry.name.startswith(TMP_PREFIX) or not entry.name.isdigit() or not entry.is_dir():
                continue
            manifest = entry / MANIFEST
            if not manifest.is_file():
                continue
            try:
                data = json.loads(manifest.read_text(encoding="utf-8"))
                found.append(Checkpoint(path=entry, **data))
            except (OSError, ValueError) as exc:
                logger.warning("ignoring checkpoint %s: unreadable manifest (%s)", entry, exc)
        return sorted(found, key=lambda c: c.step)

    def latest(self) -> Checkpoint | None:
        """The complete checkpoint with the highest step, or ``None``."""
        checkpoints = self.checkpoints()
        return checkpoints[-1] if checkpoints else None

    def delete(self, step: int) -> None:
        """Delete checkpoint ``step``: renamed out of sight first, so it disappears atomically."""
        final = self.path(step)
        if not final.exists():
            raise FileNotFoundError(f"no checkpoint for step {step} in {self.root}")
        doomed = self.root / f"{TMP_PREFIX}deleting-{final.name}-{uuid.uuid4().hex[:8]}"
        os.rename(final, doomed)
        shutil.rmtree(doomed, ignore_errors=True)

    def retain(
        self,
        *,
        keep_latest: int = 1,
        best_metric: str | None = None,
        mode: Literal["max", "min"] = "max",
        protect: set[int] | frozenset[int] = frozenset(),
    ) -> list[int]:
        """Apply the retention policy; returns the deleted steps.

        Keeps the ``keep_latest`` newest checkpoints, the best one by ``best_metric``
        (highest for ``mode="max"``, lowest for ``"min"``; checkpoints without the metric
        never count as best) and every step in ``protect`` (e.g. steps being served).
        """
        if keep_latest < 1:
            raise ValueError(
                f"keep_latest must be >= 1 (the latest checkpoint is always kept), got {keep_latest}"
            )
        checkpoints = self.checkpoints()
        keep = {c.step for c in checkpoints[-keep_latest:]} | set(protect)
        if best_metric is not None:
            scored = [c for c in checkpoints if best_metric in c.metrics]
            if scored:
                pick = max if mode == "max" else min
                keep.add(pick(scored, key=lambda c: c.metrics[best_metric]).step)
        deleted = [c.step for c in checkpoints if c.step not in keep]
        for step in deleted:
            self.delete(step)
        return deleted
