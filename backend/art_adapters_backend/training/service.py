"""The server's training service: one GRPO step per ``POST /art/models/{name}/train``.

:class:`TrainingService` saves the groups, trains the model's latest checkpoint with the inference engine
paused, writes and serves the new checkpoint, and answers a retried request from its earlier result.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from art_adapters import RetentionPolicy, SFTConfig, TrainConfig, Trajectory, TrajectoryGroup
from art_adapters.files import write_atomic

from ..errors import BadRequestError, ConflictError
from ..freed_memory import FREED_MEMORY
from ..gc_pauses import refreeze
from ..workers import run_training_work
from .cancel import TrainingCancelledError
from .checkpoints import CheckpointStore
from .targets import lora_module_names, unknown_targets

if TYPE_CHECKING:
    from ..state import ServerState
    from .sft import SFTStepResult
    from .grpo_step import GroupsStepResult
    from .trainer import LoraTrainer

__all__ = ["TRAINERS", "TrainingService", "write_groups_file"]

logger = logging.getLogger(__name__)

#: ``--trainer`` choices -> (module, class).
TRAINERS = {
    "peft": ("art_adapters_backend.training.peft_trainer", "PeftTrainer"),
    "unsloth": ("art_adapters_backend.training.unsloth_trainer", "UnslothTrainer"),
}


#: How many train results per server are remembered in memory for ``Idempotency-Key`` replays
#: (keys of trained steps are also found in their checkpoint's manifest, after a restart too).
_REMEMBERED_RESULTS = 256


def write_groups_file(path: Path, groups: Sequence[TrajectoryGroup]) -> Path:
    """Write ``groups`` as JSON Lines (``load_groups`` reads it), fsynced and renamed into place."""
    write_atomic(path, "".join(group.model_dump_json() + "\n" for group in groups).encode("utf-8"))
    return path


def request_hash(groups: Sequence[TrajectoryGroup], config: TrainConfig | SFTConfig) -> str:
    """The SHA-256 of a train request's groups and config as parsed, to compare retries of a Python
    caller's requests (the HTTP routes hash the body's bytes instead: parsing fills defaults such as
    a group's random ``id``, which would differ between two sends of the same body)."""
    digest = hashlib.sha256()
    for group in groups:
        digest.update(group.model_dump_json().encode("utf-8") + b"\n")
    digest.update(config.model_dump_json().encode("utf-8"))
    return digest.hexdigest()


def _scalars(data: dict[str, Any]) -> dict[str, float]:
    return {
        k: float(v)
        for k, v in data.items()
        if isinstance(v, int | float) and not isinstance(v, bool) and v is not None
    }


class TrainingService:
    """Trains the server's registered models, one step per request (:meth:`train`).

    Args:
        state: the server's shared state (engine, registry, records, template).
        trainer: ``"peft"`` (default) or ``"unsloth"``.
    """

    def __init__(self, state: ServerState, trainer: str = "peft") -> None:
        if trainer not in TRAINERS:
            raise ValueError(f"unknown trainer {trainer!r}; choose one of {sorted(TRAINERS)}")
        self.state = state
        self.trainer_kind = trainer
        self.root = state.config.run_dir / "models"
        self._trainer: LoraTrainer | None = None
        self._trainer_on: tuple[str, int] | None = None  # (model, step) the trainer's adapter holds
        self._locks: dict[str, asyncio.Lock] = {}
        self._trainer_lock = asyncio.Lock()
        self._stores: dict[str, CheckpointStore] = {}
        self._results: OrderedDict[tuple[str, str], tuple[str, dict[str, Any]]] = OrderedDict()
        self._module_names: frozenset[str] | None = None
        self._module_names_known = False
        self._cancelled = False
        for record in state.registry.list():
            self._reconcile(record.name)

    # ------------------------------------------------------------------ disk layout

    def store(self, name: str) -> CheckpointStore:
        """The checkpoint store of ``name`` (opening it removes partial writes)."""
        store = self._stores.get(name)
        if store is None:
            store = self._stores[name] = CheckpointStore(self.root / name / "checkpoints")
        return store

    def groups_dir(self, name: str) -> Path:
        """Where the groups of ``name``'s train requests are saved."""
        return self.root / name / "groups"

    def _reconcile(self, name: str) -> None:
        """Serve complete checkpoints newer than the registry knows (a crash after rename, before registry save)."""
        record = self.state.registry.require(name)
        for checkpoint in self.store(name).checkpoints():
            if checkpoint.step > record.latest_step:
                logger.warning("model %r: registering checkpoint %d found on disk", name, checkpoint.step)
                record = self.state.registry.add_step(name, checkpoint.step, checkpoint.path)

    # ------------------------------------------------------------------ the trainer

    def _new_trainer(self) -> LoraTrainer:
        import importlib

        from ..bundled import resolve_model_path

        config = self.state.config
        path = resolve_model_path(config.base_model, config.cache_dir)
        factory = getattr(self.state, "trainer_factory", None)
        if factory is not None:  # the state's seam (a test's trainer)
            return factory(path, config.device)
        module, cls = TRAINERS[self.trainer_kind]
        trainer_cls = getattr(importlib.import_module(module), cls)
        return trainer_cls(path, device=config.device)

    def _prepare_trainer(
        self, name: str, step: int, adapter_path: str | None, config: TrainConfig
    ) -> LoraTrainer:
        """The trainer holding ``name``'s checkpoint ``step`` (worker thread)."""
        if self._trainer is None:
            self._trainer = self._new_trainer()
            if self._cancelled and hasattr(self._trainer, "cancel"):
                self._trainer.cancel()
        trainer = self._trainer
        if self._trainer_on != (name, step):
            self._trainer_on = None
            if adapter_path is None:
                trainer.reset_adapter()
            else:
                trainer.load_adapter(adapter_path, config)
            self._trainer_on = (name, step)
        trainer.steps_done = step  # the model's checkpoint count: where lr_schedule and the seeds continue
        return trainer

    def _step(
        self,
        name: str,
        step: int,
        adapter_path: str | None,
        groups: list[TrajectoryGroup],
        config: TrainConfig | SFTConfig,
        request: dict[str, Any],
    ) -> tuple[dict[str, Any], Path | None]:
        """Train and checkpoint (worker thread); returns the result fields and the new checkpoint.

        ``request`` (``request_key``, ``request_hash``, ``groups_file``) is kept in the checkpoint's
        manifest with the result, so a retry of the request is answered from it.
        """
        optimizer_config = TrainConfig() if isinstance(config, SFTConfig) else config  # SFT has its own
        trainer = self._prepare_trainer(name, step, adapter_path, optimizer_config)
        state = self.state
        try:
            result: GroupsStepResult | SFTStepResult
            if isinstance(config, SFTConfig):  # demonstrations: every assistant turn, or config.only_model's
                trajectories = [t for group in groups for t in group.trajectories]
                result = trainer.train_sft(trajectories, state.records.get, state.template.encode, config)
            else:  # Only ``name``'s own turns are trained; other models' turns in the graph are prompt.
                result = trainer.train_groups(
                    groups, state.records.get, state.template.encode, config, policy=name
                )
        except TrainingCancelledError:
            self._trainer_on = None
            logger.warning("model %r: training step cancelled (the server is stopping); nothing saved", name)
            raise
        except BaseException:
            self._trainer_on = None  # the adapter may be mid-update: reload from disk next time
            raise
        finally:
            FREED_MEMORY.now()  # the step's activations, freed, back to the OS (not kept by malloc)
        data = result.data.model_dump()
        dropped = data.pop("groups_dropped")
        metrics: dict[str, Any] = dict(data)
        if not result.trained:
            return {"trained": False, "reason": result.nothing_trainable_reason, "metrics": metrics,
                    "dropped": dropped}, None  # fmt: skip
        assert result.step is not None
        metrics.update(result.step.scalars())  # flat: passes as pass_<p>_<name>
        new_step = step + 1
        body = {"trained": True, "reason": None, "metrics": metrics, "dropped": dropped}
        saved = {"request_key": request["request_key"], "request_hash": request["request_hash"],
                 "result": {**body, "groups_file": request["groups_file"]}}  # fmt: skip
        try:
            checkpoint = self.store(name).write(
                new_step, trainer.write_adapter, _scalars(metrics), request=saved
            )
        except BaseException:
            self._trainer_on = None
            raise
        self._trainer_on = (name, new_step)
        return body, checkpoint.path

    # ------------------------------------------------------------------ the API

    async def check_config(self, config: TrainConfig | SFTConfig) -> None:
        """Raise :class:`BadRequestError` (400) for settings this base model cannot train with."""
        if not self._module_names_known:
            from ..bundled import resolve_model_path

            path = resolve_model_path(self.state.config.base_model, self.state.config.cache_dir)
            self._module_names = await asyncio.to_thread(lora_module_names, path)
            self._module_names_known = True
        if self._module_names is None:
            return
        unknown = unknown_targets(config.lora_target_modules, self._module_names)
        if unknown:
            short = sorted({n.rsplit(".", 1)[-1] for n in self._module_names})
            raise BadRequestError(
                f"lora_target_modules {unknown} name no module of {self.state.config.base_model!r} "
                f"that LoRA can wrap; its module names end in {short}",
                param="config.lora_target_modules",
                code="invalid_value",
            )

    def _earlier_result(self, name: str, key: str, digest: str) -> dict[str, Any] | None:
        """The result of the request ``key`` already made for ``name``, or ``None`` (model lock held)."""
        remembered = self._results.get((name, key))
        if remembered is not None:
            body_hash, body = remembered
        else:
            made = next((c for c in self.store(name).checkpoints() if c.request_key == key), None)
            if made is None or made.result is None:
                return None
            body_hash = made.request_hash or ""
            body = {**made.result, "step": made.step, "deleted_steps": []}
        if body_hash != digest:
            raise ConflictError(
                f"Idempotency-Key {key!r} was already used for another train request of {name!r} "
                "(other groups or config); send a new key for a new request",
                code="idempotency_key_reused",
            )
        logger.info("model %r: train request %r was already done (step %d); answering it again", name, key,
                    body["step"])  # fmt: skip
        return {**body, "replayed": True}

    def _remember(self, name: str, key: str, digest: str, body: dict[str, Any]) -> None:
        self._results[(name, key)] = (digest, body)
        while len(self._results) > _REMEMBERED_RESULTS:
            self._results.popitem(last=False)

    # shape: one request's stages in order, each failure rule beside its stage
    async def train(
        self,
        name: str,
        groups: list[TrajectoryGroup],
        config: TrainConfig | SFTConfig,
        idempotency_key: str | None = None,
        request_digest: str | None = None,
    ) -> dict[str, Any]:
        """One training request for ``name``; returns the ``TrainResult`` body (an SFT step with an
        :class:`~art_adapters.SFTConfig`: see :meth:`train_sft`). ``request_digest``: what a retry
        with the same ``idempotency_key`` must match (the route's SHA-256 of the body's bytes);
        default :func:`request_hash` of ``groups`` and ``config``.

        Per request, for model ``name`` (one step at a time per model, others queue):

        0. the config is checked against the base model (``lora_target_modules`` must name modules
           LoRA can wrap: 400 otherwise, before anything is written); a checkpoint a failed request
           wrote but did not register is registered; a request carrying an ``Idempotency-Key`` that
           already made a checkpoint gets that step's result again (``replayed: true``) instead of
           training once more (409 if the key came with another body);
        1. the groups are written to ``run_dir/models/<name>/groups/step-<N>-<time>.jsonl`` and
           fsynced, before anything else (a failed or killed step can be trained again from it);
        2. the trainer (one, lazily created, shared by the models; a copy of the base weights
           separate from the engine's) is put on the model's latest checkpoint (adapter and optimizer
           state), or a fresh LoRA at step 0;
        3. with the inference engine paused (requests queue and complete afterwards; ``/health``
           and the HTTP server stay responsive because the step runs in a worker thread), the
           sequences are built from the exact-token records (the chat template re-tokenises turns
           without one; only ``name``'s own turns carry loss, other models' turns are prompt), one
           optimizer update runs, and checkpoint ``N`` is written atomically
           under ``run_dir/models/<name>/checkpoints/<N:06d>`` (temporary folder, fsync, rename);
        4. the registry serves it as ``name@N`` and ``name`` and the engine loads it at once;
           older checkpoints stay servable until deleted; ``config.retention`` is applied.

        When nothing is trainable (every group had equal rewards, or no turn fits), no step is made
        and no checkpoint written: the result has ``trained=False`` and the reason.
        """
        registry = self.state.registry
        registry.require(name)
        await self.check_config(config)
        if not groups:
            step = registry.require(name).latest_step
            return {"trained": False, "reason": "no trajectory groups were given", "metrics": {"groups": 0},
                    "dropped": {}, "step": step, "groups_file": None, "deleted_steps": []}  # fmt: skip
        digest = ""
        if idempotency_key is not None:
            digest = request_digest or await asyncio.to_thread(request_hash, groups, config)
        lock = self._locks.setdefault(name, asyncio.Lock())
        async with lock:
            started = time.perf_counter()
            # A request that failed after writing its checkpoint (e.g. the registry could not be
            # saved) left it unregistered: serve it now, so this step does not collide with it.
            await asyncio.to_thread(self._reconcile, name)
            if idempotency_key is not None:
                earlier = await asyncio.to_thread(self._earlier_result, name, idempotency_key, digest)
                if earlier is not None:
                    return earlier
            record = registry.require(name)
            step = record.latest_step
            try:
                if isinstance(config, TrainConfig):  # an SFT step's learning rate is constant
                    config.learning_rate_at(step)
            except ValueError as exc:  # the schedule ended before this step
                raise BadRequestError(str(exc), param="config.total_steps", code="invalid_value") from exc
            stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
            groups_file = (
                self.groups_dir(name) / f"step-{step + 1:06d}-{stamp}-{time.time_ns() % 10**9:09d}.jsonl"
            )
            await asyncio.to_thread(write_groups_file, groups_file, groups)
            adapter_path = record.checkpoints.get(step)
            async with self._trainer_lock, self._paused():
                request = {"request_key": idempotency_key, "request_hash": digest or None,
                           "groups_file": str(groups_file)}  # fmt: skip
                run = self._training_runner()
                body, checkpoint = await run(self._step, name, step, adapter_path, groups, config, request)
                await run(refreeze, "a training step")  # inference is paused anyway
            if checkpoint is not None:
                step += 1
                registry.add_step(name, step, checkpoint)
                await self.state.adapters.preload(registry.resolve(f"{name}@{step}"))
            deleted: list[int] = []
            if checkpoint is not None and config.retention is not None:
                deleted = await self.apply_retention(name, config.retention)
            body["metrics"]["total_seconds"] = time.perf_counter() - started
            body.update(step=step, groups_file=str(groups_file), deleted_steps=deleted)
            if idempotency_key is not None:
                self._remember(name, idempotency_key, digest, body)
            logger.info(
                "model %r: train request -> step %d (trained=%s) in %.1f s",
                name, step, body["trained"], body["metrics"]["total_seconds"],
            )  # fmt: skip
            return body

    async def train_sft(
        self,
        name: str,
        trajectories: list[Trajectory],
        config: SFTConfig,
        idempotency_key: str | None = None,
        request_digest: str | None = None,
    ) -> dict[str, Any]:
        """One SFT request for ``name``; returns the ``TrainResult`` body, made as :meth:`train` makes it.

        The trajectories are saved as one group (``groups_file``) and trained with next-token loss
        on their assistant turns (:mod:`.sft`) instead of a GRPO update; everything else is
        :meth:`train`'s: one step at a time per model, the engine paused, the checkpoint written
        atomically and served as ``name@N``, ``config.retention``, ``Idempotency-Key`` replays.

        Raises:
            BadRequestError: no trajectories (400).
        """
        if not trajectories:
            raise BadRequestError(
                "trajectories is empty: send at least one trajectory with an assistant turn",
                param="trajectories",
            )
        group = TrajectoryGroup(id="sft", trajectories=trajectories)  # a fixed id: a retry hashes the same
        return await self.train(name, [group], config, idempotency_key, request_digest)

    def cancel(self) -> None:
        """Stop a running training step at its next micro-batch (the server is stopping; see
        :meth:`.trainer.LoraTrainer.cancel`); later steps are refused the same way."""
        self._cancelled = True
        logger.info("cancelling any running training step at its next micro-batch")
        cancel = getattr(self._trainer, "cancel", None)  # a test's trainer may have none
        if cancel is not None:
            cancel()

    def _training_runner(self) -> Callable[..., Awaitable[Any]]:
        """Where a step runs: on the engine's own thread where it offers one (``run_exclusive``: one
        OpenMP team for decoding and training, so decoding keeps its speed after a step), else in
        the training thread (:func:`.workers.run_training_work`)."""
        return getattr(self.state.engine, "run_exclusive", None) or run_training_work

    def _paused(self) -> Any:
        paused = getattr(self.state.engine, "paused", None)
        if paused is None:
            return contextlib.nullcontext()
        return paused()

    def checkpoints(self, name: str) -> list[dict[str, Any]]:
        """Servable steps of ``name`` (0 first) with the metrics of the step that made them."""
        record = self.state.registry.require(name)
        on_disk = {c.step: c for c in self.store(name).checkpoints()}
        out = []
        for step in record.steps:
            c = on_disk.get(step)
            out.append({"step": step, "metrics": c.metrics if c else {}, "created": c.created if c else None})
        return out

    async def delete_steps(self, name: str, steps: set[int]) -> list[int]:
        """Stop serving ``steps`` of ``name``, unload them from the engine and delete their folders."""
        self.state.registry.remove_steps(name, steps)
        for step in sorted(steps):
            await self.state.adapters.unload(f"{name}@{step}")
            await self.state.checkpoint_leases.wait_released(name, step)  # an export reading it
            path = self.store(name).path(step)
            if path.exists():
                await asyncio.to_thread(self.store(name).delete, step)
        return sorted(steps)

    async def apply_retention(self, name: str, policy: RetentionPolicy) -> list[int]:
        """Keep the ``keep_latest`` newest and the best by ``best_metric``; delete the other steps (never 0)."""
        record = self.state.registry.require(name)
        trained = [s for s in record.steps if s != 0]
        keep = set(trained[-policy.keep_latest :])
        if policy.best_metric is not None:
            scored = [
                c
                for c in self.store(name).checkpoints()
                if c.step in trained and policy.best_metric in c.metrics
            ]
            if scored:
                pick = max if policy.mode == "max" else min
                keep.add(pick(scored, key=lambda c: c.metrics[policy.best_metric]).step)
        doomed = {s for s in trained if s not in keep}
        return await self.delete_steps(name, doomed) if doomed else []
