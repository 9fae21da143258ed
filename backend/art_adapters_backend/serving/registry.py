"""The model registry: trainable models, their checkpoint steps, and what a served name means.

A registered model ``name`` has steps ``0, 1, ...``; step 0 is the base weights, every later step a
LoRA adapter folder. ``name`` serves the latest step, ``name@step`` a given one; the base model id
itself is always served.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from art_adapters.files import PRIVATE_FILE_MODE, private_dir, write_atomic

from ..errors import BadRequestError, ConflictError, NotFoundError, StorageUnavailableError, shown

__all__ = ["ModelRecord", "Registry", "ServedModel"]

logger = logging.getLogger(__name__)

#: A model or project name, matched whole (``fullmatch``: ``$`` would let a trailing newline in).
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
#: A step as ``name@step`` writes it: ASCII digits, no sign, no leading zero (so ``@-0``, ``@00``,
#: ``@٠`` or ``@1_0`` never alias a step).
#: A step number, below 10**18 (``int()`` of a 5,000-digit string raises).
_STEP = re.compile(r"0|[1-9][0-9]{0,17}")


class ModelRecord(BaseModel):
    """A registered model.

    Attributes:
        name: the served name (letters, digits, ``.``, ``_``, ``-``).
        project: the project it belongs to.
        base_model: the base model id it was registered with (the server's).
        latest_step: the newest step (0 until trained).
        steps: every servable step, ascending.
        checkpoints: step -> LoRA adapter folder (``None`` for step 0, the base weights).
        created: Unix time of registration.
    """

    name: str
    project: str
    base_model: str
    latest_step: int = 0
    steps: list[int] = Field(default_factory=lambda: [0])
    checkpoints: dict[int, str | None] = Field(default_factory=lambda: {0: None})
    created: int = Field(default_factory=lambda: int(time.time()))

    def public(self) -> dict[str, Any]:
        """The record as the HTTP API returns it (adapter paths stay private)."""
        return self.model_dump(exclude={"checkpoints"})


@dataclass(frozen=True)
class ServedModel:
    """What a ``model`` string of a request resolves to.

    Attributes:
        served_name: the string as requested (``base``, ``name`` or ``name@step``).
        trained_model: the registered model's name, ``None`` for the base model.
        step: the step (``None`` for the base model).
        adapter_path: the LoRA adapter folder, ``None`` when the base weights answer.
    """

    served_name: str
    trained_model: str | None
    step: int | None
    adapter_path: str | None

    @property
    def version(self) -> str:
        """The exact version that answers: ``name@step`` for a registered model (``name`` alone
        resolves to its latest step), else the name as requested. Responses carry it as ``model``,
        so a captured turn records the checkpoint that sampled it."""
        if self.trained_model is None or self.step is None:
            return self.served_name
        return f"{self.trained_model}@{self.step}"

    @property
    def adapter_key(self) -> str | None:
        """A stable engine adapter name (``name@step``), ``None`` for the base weights."""
        return None if self.adapter_path is None else f"{self.trained_model}@{self.step}"


class Registry:
    """Thread-safe registry persisted as ``run_dir/registry.json``.

    The file is rewritten atomically (temp file, fsync, rename) on every change, so it survives
    restarts and crashes. It is written before memory changes: a change the disk refused (503,
    :class:`~..errors.StorageUnavailableError`) is not made at all.

    Args:
        run_dir: the run directory (created if missing).
        base_model: the base model id this server serves; only it may be registered.
    """

    FILENAME = "registry.json"

    def __init__(self, run_dir: Path, base_model: str) -> None:
        self.run_dir = private_dir(run_dir)  # 0o700: it holds every prompt served and trained on
        self.path = self.run_dir / self.FILENAME
        self.base_model = base_model
        self._lock = threading.Lock()
        self._models: dict[str, ModelRecord] = self._load()

    def _load(self) -> dict[str, ModelRecord]:
        if not self.path.exists():
            return {}
        data = json.loads(self.path.read_text())
        models = {name: ModelRecord.model_validate(raw) for name, raw in data.get("models", {}).items()}
        logger.info("registry %s: %d models", self.path, len(models))
        return models

    def _commit(self, name: str, record: ModelRecord | None) -> None:
        """Save the registry with ``name`` set to ``record`` (``None``: removed), then change memory.

        Lock held. On a write error memory is untouched and :class:`StorageUnavailableError` (503)
        is raised, so the change is either made on disk and in memory or in neither.
        """
        models = dict(self._models)
        if record is None:
            models.pop(name, None)
        else:
            models[name] = record
        try:
            self._save(models)
        except OSError as exc:
            logger.error("could not save %s: %s", self.path, exc)
            raise StorageUnavailableError(
                f"could not save the model registry {self.path} ({exc.strerror or exc}); nothing was "
                "changed. Free space in the run directory and send the request again"
            ) from exc
        self._models = models

    def _save(self, models: dict[str, ModelRecord]) -> None:
        data = {"version": 1, "models": {n: m.model_dump(mode="json") for n, m in models.items()}}
        write_atomic(self.path, json.dumps(data, indent=1).encode("utf-8"), mode=PRIVATE_FILE_MODE)

    def register(self, name: str, project: str, base_model: str) -> tuple[ModelRecord, bool]:
        """Register ``name`` on ``base_model``; returns ``(record, created)``.

        Idempotent for the same base model. Raises :class:`ConflictError` (409) if the name
        is taken with another base model, :class:`BadRequestError` (400) for a bad name or a
        base model this server does not serve.
        """
        for field, value in (("name", name), ("project", project)):
            if not isinstance(value, str) or not _NAME.fullmatch(value):
                raise BadRequestError(
                    f"{value!r} is not a valid {field}: use 1-128 letters, digits, '.', '_' or '-', "
                    "starting with a letter or digit",
                    param=field,
                )
        if name == self.base_model:
            raise BadRequestError(f"{name!r} is the base model's own id; pick another name", param="name")
        with self._lock:
            existing = self._models.get(name)
            if existing is not None:
                if existing.base_model != base_model:
                    raise ConflictError(
                        f"model {name!r} is already registered with base model {existing.base_model!r}, "
                        f"not {base_model!r}; pick another name",
                        param="base_model",
                        code="model_exists",
                    )
                return existing, False
            if base_model != self.base_model:
                raise BadRequestError(
                    f"this server serves base model {self.base_model!r}, not {base_model!r}; register "
                    f"with base_model={self.base_model!r} or start a server for that model",
                    param="base_model",
                    code="unsupported_base_model",
                )
            record = ModelRecord(name=name, project=project, base_model=base_model)
            self._commit(name, record)
        logger.info("registered model %r (project %r) on %r", name, project, base_model)
        return record, True

    def get(self, name: str) -> ModelRecord | None:
        """The record of ``name``, or ``None``."""
        with self._lock:
            return self._models.get(name)

    def require(self, name: str) -> ModelRecord:
        """The record of ``name``; :class:`NotFoundError` (404) if it is not registered."""
        record = self.get(name)
        if record is None:
            raise NotFoundError(
                f"model {shown(name)} is not registered; register it with POST /art/models",
                code="model_not_found",
            )
        return record

    def list(self) -> list[ModelRecord]:
        """Every registered model, by name."""
        with self._lock:
            return [self._models[name] for name in sorted(self._models)]

    def add_step(self, name: str, step: int, adapter_path: str | os.PathLike[str]) -> ModelRecord:
        """Add checkpoint ``step`` of ``name`` (a complete LoRA adapter folder) and make it latest.

        Raises:
            NotFoundError: ``name`` is not registered.
            BadRequestError: ``step`` is not after the latest step, or the folder is missing.
        """
        path = Path(adapter_path)
        if not path.is_dir():
            raise BadRequestError(f"adapter folder {str(path)!r} for {name}@{step} does not exist")
        with self._lock:
            record = self._models.get(name)
            if record is None:
                raise NotFoundError(f"model {shown(name)} is not registered", code="model_not_found")
            if step <= record.latest_step:
                raise BadRequestError(
                    f"step {step} of {name!r} must come after its latest step {record.latest_step}"
                )
            updated = record.model_copy(
                update={
                    "latest_step": step,
                    "steps": [*record.steps, step],
                    "checkpoints": {**record.checkpoints, step: str(path.resolve())},
                }
            )
            self._commit(name, updated)
        logger.info("model %r: step %d at %s", name, step, path)
        return updated

    def remove_steps(self, name: str, steps: set[int] | frozenset[int]) -> ModelRecord:
        """Stop serving checkpoint ``steps`` of ``name`` (training deletes their folders).

        Raises:
            NotFoundError: ``name`` is not registered.
            BadRequestError: a step is 0 (the base weights), the latest step, or unknown.
        """
        with self._lock:
            record = self._models.get(name)
            if record is None:
                raise NotFoundError(f"model {shown(name)} is not registered", code="model_not_found")
            bad = sorted(s for s in steps if s == 0 or s == record.latest_step or s not in record.checkpoints)
            if bad:
                raise BadRequestError(
                    f"cannot delete step(s) {bad} of {name!r}: step 0 (the base weights) and the latest "
                    f"step {record.latest_step} are always kept; its steps are {record.steps}",
                    param="steps",
                )
            updated = record.model_copy(
                update={
                    "steps": [s for s in record.steps if s not in steps],
                    "checkpoints": {s: p for s, p in record.checkpoints.items() if s not in steps},
                }
            )
            self._commit(name, updated)
        logger.info("model %r: removed steps %s", name, sorted(steps))
        return updated

    def served_names(self) -> list[str]:
        """Every ``model`` string that resolves: the base model, each ``name`` and ``name@step``."""
        names = [self.base_model]
        for record in self.list():
            names.append(record.name)
            names.extend(f"{record.name}@{step}" for step in record.steps)
        return names

    def resolve(self, served_name: str) -> ServedModel:
        """What ``served_name`` means; :class:`NotFoundError` (404) if nothing by that name is served."""
        if served_name == self.base_model:
            return ServedModel(served_name, None, None, None)
        name, at, step_text = served_name.partition("@")
        record = self.get(name)
        if record is None:
            known = ", ".join(self.served_names()[:10])
            raise NotFoundError(
                f"the model {shown(served_name)} does not exist; served models: {known} "
                "(GET /v1/models lists them all)",
                param="model",
                code="model_not_found",
            )
        if not at:
            step = record.latest_step
        else:
            step = int(step_text) if _STEP.fullmatch(step_text) else -1
            if step not in record.checkpoints:
                raise NotFoundError(
                    f"model {name!r} has no step {shown(step_text)}; its steps are {record.steps}",
                    param="model",
                    code="model_not_found",
                )
        return ServedModel(served_name, name, step, record.checkpoints.get(step))
