"""The training API: ``POST /art/models/{name}/train``, checkpoints and retention.

See :mod:`..training.service` for what one step does; ``docs/backend-api.md`` for the bodies.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
import os
import re
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Header, Request
from pydantic import BaseModel, ConfigDict, Field, model_validator

from art_adapters import RetentionPolicy, SFTConfig, TrainConfig, Trajectory, TrajectoryGroup

from ..errors import BadRequestError
from ..limits import ServeLimits
from ..training.service import TrainingService
from .json_body import body_schema
from .train_body import read_train_body

__all__ = [
    "TRAINER_ENV", "DeleteCheckpointsRequest", "SFTRequest", "TrainRequest", "check_train_limits", "router",
    "training_service",
]  # fmt: skip

logger = logging.getLogger(__name__)

#: Overrides the trainer ``serve --trainer`` chose (``peft`` or ``unsloth``).
TRAINER_ENV = "ART_ADAPTERS_TRAINER"


@contextlib.asynccontextmanager
async def _startup(app: Any) -> AsyncIterator[None]:
    """Open the training service at startup: partial checkpoints are removed and checkpoints a
    crash left unregistered are served before the first request. At shutdown (after the graceful
    period, once in-flight requests are cancelled) a running step is cancelled at its next
    micro-batch: its worker thread would otherwise keep the process alive until the step ends."""
    try:
        _service(app.state)
    except Exception:  # the first training request retries it and reports the error
        logger.exception("could not open the training service at startup")
    yield
    service = getattr(app.state, "training", None)
    if service is not None:
        service.cancel()


router = APIRouter(prefix="/art/models", tags=["training"], lifespan=_startup)


class TrainRequest(BaseModel):
    """Body of ``POST /art/models/{name}/train``."""

    model_config = ConfigDict(extra="forbid")

    groups: list[TrajectoryGroup] = Field(description="Scored trajectory groups (JSON of TrajectoryGroup).")
    config: TrainConfig = Field(default_factory=TrainConfig, description="The step's TrainConfig.")

    @model_validator(mode="after")
    def _finite(self) -> TrainRequest:
        """JSON's NaN/Infinity extensions parse as floats; a reward or metric must be a real number."""
        for g, group in enumerate(self.groups):
            for t, trajectory in enumerate(group.trajectories):
                where = f"groups[{g}].trajectories[{t}]"
                if trajectory.reward is not None and not math.isfinite(trajectory.reward):
                    raise ValueError(
                        f"{where}.reward is {trajectory.reward}: a reward must be a finite number "
                        "(or null for an unscored trajectory)"
                    )
                for key, value in trajectory.metrics.items():
                    if isinstance(value, float) and not math.isfinite(value):
                        raise ValueError(
                            f"{where}.metrics[{key!r}] is {value}: a metric must be a finite number; "
                            "leave it out when there is no value"
                        )
        return self

    def limited_groups(self) -> list[TrajectoryGroup]:
        """The groups :func:`check_train_limits` counts: the request's own."""
        return self.groups


class SFTRequest(BaseModel):
    """Body of ``POST /art/models/{name}/train_sft``: demonstrations, no rewards needed."""

    model_config = ConfigDict(extra="forbid")

    trajectories: list[Trajectory] = Field(
        description="Trajectories whose assistant turns are imitated (JSON of Trajectory; rewards unused)."
    )
    config: SFTConfig = Field(default_factory=SFTConfig, description="The step's SFTConfig.")

    @model_validator(mode="after")
    def _demonstrations(self) -> SFTRequest:
        """At least one trajectory, and an assistant turn to imitate (checked before anything is written)."""
        if not self.trajectories:
            raise ValueError("trajectories is empty: send at least one trajectory with an assistant turn")
        turns = any(
            m.role == "assistant" and m.generated is not False
            for t in self.trajectories
            for history in t.histories()
            for m in history.messages
        )
        if not turns:
            raise ValueError(
                f"none of the {len(self.trajectories)} trajectories has an assistant turn to imitate (turns "
                "marked generated=False are prompt): SFT trains next-token loss on assistant messages"
            )
        return self

    def limited_groups(self) -> list[TrajectoryGroup]:
        """The groups :func:`check_train_limits` counts: the demonstrations, as one group."""
        return [TrajectoryGroup(trajectories=self.trajectories)]


class DeleteCheckpointsRequest(BaseModel):
    """Body of ``POST /art/models/{name}/checkpoints/delete``: exactly one of ``steps`` or ``retention``."""

    model_config = ConfigDict(extra="forbid")

    steps: list[int] | None = Field(default=None, description="Delete exactly these steps.")
    retention: RetentionPolicy | None = Field(default=None, description="Or apply this policy.")

    @model_validator(mode="after")
    def _one_of(self) -> DeleteCheckpointsRequest:
        if (self.steps is None) == (self.retention is None):
            raise ValueError("give exactly one of 'steps' (a list of step numbers) or 'retention' (a policy)")
        return self


def training_service(request: Request) -> TrainingService:
    """The app's training service (opened at startup, else on first use)."""
    return _service(request.app.state)


def _service(app_state: Any) -> TrainingService:
    service = getattr(app_state, "training", None)
    if service is None:
        config = app_state.server.config
        trainer = os.environ.get(TRAINER_ENV) or getattr(config, "trainer", "peft")
        service = TrainingService(app_state.server, trainer=trainer)
        app_state.training = service
    return service


#: What an ``Idempotency-Key`` may be: 1-255 visible ASCII characters (a UUID is typical).
_IDEMPOTENCY_KEY = re.compile(r"[\x21-\x7e]{1,255}")


_M = TypeVar("_M", bound=BaseModel)
_Step = TypeVar("_Step", TrainRequest, SFTRequest)
_F = TypeVar("_F", bound=Callable[..., Any])


async def _parse_body(
    request: Request, model: type[_M], sft: bool, with_digest: bool
) -> tuple[_M, str | None]:
    """The request's body as ``model``, read by :func:`.train_body.read_train_body` in a worker thread
    (element by element, within the server's group and trajectory caps), and the SHA-256 of the bytes
    the client sent when ``with_digest`` (what an ``Idempotency-Key`` retry is compared on).

    A train body may be tens of MB (``--max-train-request-bytes``): parsed on the event loop it would
    hold ``/health`` and every stream for seconds, so the routes read it themselves, after the model's
    existence is checked.
    """
    raw = await request.body()
    limits = request.app.state.server.config.limits

    def read() -> tuple[_M, str | None]:
        body = read_train_body(raw, model, limits, sft)
        return body, hashlib.sha256(raw).hexdigest() if with_digest else None

    # the default pool, not the request-work one: a big body must not hold up prompt rendering
    return await asyncio.to_thread(read)


def _check_key(idempotency_key: str | None) -> None:
    if idempotency_key is not None and not _IDEMPOTENCY_KEY.fullmatch(idempotency_key):
        raise BadRequestError(
            "the Idempotency-Key header must be 1-255 visible ASCII characters (e.g. a UUID)",
            param="Idempotency-Key",
        )


async def _step_body(
    name: str, request: Request, idempotency_key: str | None, model: type[_Step]
) -> tuple[_Step, str | None]:
    """What both training routes do before their step: check the ``Idempotency-Key``, answer 404 for
    an unknown model before a byte of the body is parsed, read the body as ``model`` (with its digest
    when keyed) and refuse a request past the server's limits."""
    _check_key(idempotency_key)
    server = request.app.state.server
    server.registry.require(name)
    body, digest = await _parse_body(request, model, model is SFTRequest, idempotency_key is not None)
    check_train_limits(body.limited_groups(), body.config, server.config.limits, server.context_length)
    return body, digest


#: The ``Idempotency-Key`` header both training routes take.
_IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        description="Makes retries safe: a request with a key that already made a step gets that step's "
        "result again (`replayed: true`) instead of training another step. A retry must send the same "
        "body bytes (409 otherwise).",
    ),
]


def _step_route(path: str, summary: str, model: type[BaseModel]) -> Callable[[_F], _F]:
    """Declare a training route: ``POST path``, whose body (documented as ``model``) it reads itself."""
    return router.post(path, summary=summary, openapi_extra=body_schema(model))


@_step_route("/{name}/train", "Train one GRPO step on scored groups; serve the new checkpoint", TrainRequest)
async def train(name: str, request: Request, idempotency_key: _IdempotencyKey = None) -> dict[str, Any]:
    """The ``TrainResult``: ``step``, ``trained``, ``reason``, ``metrics``, ``dropped``, ``groups_file``,
    ``deleted_steps`` (and ``replayed: true`` for a repeated ``Idempotency-Key``). 404 for an unknown
    model (before the body is read), 400 for malformed groups or config or a setting past the server's
    limits, 409 for a key reused with another body. The body is a ``TrainRequest``."""
    body, digest = await _step_body(name, request, idempotency_key, TrainRequest)
    service = training_service(request)
    return await service.train(name, body.groups, body.config, idempotency_key, request_digest=digest)


@_step_route("/{name}/train_sft", "Train one SFT step on trajectories; serve the new checkpoint", SFTRequest)
async def train_sft(name: str, request: Request, idempotency_key: _IdempotencyKey = None) -> dict[str, Any]:
    """The ``TrainResult`` of one SFT step (next-token loss on the assistant turns, ``epochs`` passes), the
    same fields as ``/train``; its checkpoint is served as ``name@step`` and listed with its metrics. 404 for
    an unknown model, 400 for no trajectories, none with an assistant turn, a malformed config or a setting
    past the server's limits, 409 for a key reused with another body. The body is an ``SFTRequest``."""
    body, digest = await _step_body(name, request, idempotency_key, SFTRequest)
    service = training_service(request)
    return await service.train_sft(name, body.trajectories, body.config, idempotency_key, request_digest=digest)


@router.get("/{name}/checkpoints", summary="Servable steps with the metrics of the step that made them")
async def list_checkpoints(name: str, request: Request) -> dict[str, Any]:
    """``{"data": [{"step", "metrics", "created"}, ...]}``, step 0 (the base weights) first."""
    return {"data": training_service(request).checkpoints(name)}


@router.post("/{name}/checkpoints/delete", summary="Delete given steps, or apply a retention policy")
async def delete_checkpoints(name: str, body: DeleteCheckpointsRequest, request: Request) -> dict[str, Any]:
    """``{"deleted": [steps]}``; step 0 and the latest step are never deleted (400 if named)."""
    service = training_service(request)
    service.state.registry.require(name)
    if body.steps is not None:
        return {"deleted": await service.delete_steps(name, set(body.steps)) if body.steps else []}
    assert body.retention is not None
    return {"deleted": await service.apply_retention(name, body.retention)}


def check_train_limits(
    groups: list[TrajectoryGroup],
    config: TrainConfig | SFTConfig,
    limits: ServeLimits,
    context_length: int | None = None,
) -> None:
    """A 400 naming the setting and its ``serve`` flag when a train request asks for more than the
    server allows (checked before anything is written or trained).

    Inference is paused for a whole step, so every setting that lengthens it is bounded:
    groups, trajectories per group, passes (``num_iterations``, SFT ``epochs``), optimizer updates per
    pass (``mini_batches``) and the sequence length, which the model's context (``context_length``)
    bounds too.
    """
    sizes = [len(group.trajectories) for group in groups]
    longest = max(sizes, default=0)
    where = "trajectories" if isinstance(config, SFTConfig) or not sizes else f"groups[{sizes.index(longest)}].trajectories"
    asked = [
        ("groups", len(groups), limits.max_train_groups, "--max-train-groups"),
        (where, longest, limits.max_group_trajectories, "--max-group-trajectories"),
        ("config.lora_rank", config.lora_rank, limits.max_lora_rank, "--max-lora-rank"),
        ("config.micro_batch_size", config.micro_batch_size, limits.max_micro_batch_size,
         "--max-micro-batch-size"),
    ]  # fmt: skip
    if isinstance(config, TrainConfig):
        asked += [
            ("config.num_iterations", config.num_iterations, limits.max_train_iterations,
             "--max-train-iterations"),
            ("config.mini_batches", config.mini_batches, limits.max_train_mini_batches,
             "--max-train-mini-batches"),
        ]  # fmt: skip
    else:
        asked.append(("config.epochs", config.epochs, limits.max_sft_epochs, "--max-sft-epochs"))
    for param, value, limit, flag in asked:
        if value > limit:
            if param == "groups":
                what = f"the request sends {value} trajectory groups"
            elif param == where:
                what = f"{param} has {value} trajectories"
            else:
                what = f"{param} is {value}"
            raise BadRequestError(f"{what}; this server allows at most {limit} (serve {flag})", param=param)
    length, flag_limit = config.max_sequence_length, limits.max_train_sequence_length
    if length > flag_limit:
        raise BadRequestError(
            f"config.max_sequence_length is {length}; this server allows at most {flag_limit} "
            "(serve --max-train-sequence-length)",
            param="config.max_sequence_length",
        )
    if context_length is not None and length > context_length:
        raise BadRequestError(
            f"config.max_sequence_length is {length}, past the served model's context of {context_length} "
            "tokens: no longer sequence can be scored; send at most that",
            param="config.max_sequence_length",
        )
