"""``TrainableModel``: a named model on a backend whose LoRA checkpoints you train and use."""

from __future__ import annotations

import asyncio
import logging
import re
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator

from ._adapter_config import RetentionPolicy
from ._backends import path_segment
from ._errors import BackendRequestError, BackendUnavailableError, ConfigError
from ._sft_config import SFTConfig
from ._train_config import TrainConfig
from ._trajectory import Trajectory, TrajectoryGroup

if TYPE_CHECKING:
    from langchain_openai import ChatOpenAI
    from openai import AsyncOpenAI

    from ._backends import Backend

__all__ = [
    "DEFAULT_EXPORT_TIMEOUT_S",
    "DEFAULT_TRAIN_TIMEOUT_S",
    "IDEMPOTENCY_HEADER",
    "CheckpointInfo",
    "TrainResult",
    "TrainableModel",
]

logger = logging.getLogger(__name__)

#: The header carrying a train request's key: a retry with the same key gets the earlier result.
IDEMPOTENCY_HEADER = "Idempotency-Key"
#: Statuses after which ``train`` retries (the request may not have run, or ran and can be replayed).
_RETRY_STATUSES = frozenset({502, 503, 504})

#: Default seconds ``TrainableModel.train`` waits for the backend's step (CPU steps take minutes).
DEFAULT_TRAIN_TIMEOUT_S = 3600.0
#: Default seconds ``TrainableModel.export`` waits (a merged export loads and writes the whole model).
DEFAULT_EXPORT_TIMEOUT_S = 1800.0


class TrainResult(BaseModel):
    """What one ``await model.train(groups)`` did on the backend.

    Attributes:
        step: the model's latest step after the call: the new step when ``trained``, else
            the unchanged previous step (no checkpoint is written for an untrained call).
        trained: whether an optimizer update happened and a new checkpoint is served.
        reason: why nothing was trained (e.g. every group had equal rewards); ``None`` when
            ``trained``. Never a silent no-op: check ``trained`` or ``reason``.
        metrics: flat scalars of the step: ``loss``, ``policy_loss``, ``kl`` (None when
            beta=0), ``grad_norm``, ``clip_fraction``, ``ratio_mean``, ``tokens`` (loss
            tokens), ``sequence_tokens``, ``sequences``, ``seconds`` (optimizer step),
            ``learning_rate``, plus the data's ``groups``, ``groups_used``,
            ``trajectories``, ``reward_mean``, ``reward_std``, ``record_turns``,
            ``fallback_turns``, ``prefix_breaks``, ``extended_turns``, ``other_model_turns``
            (other models' turns, kept as prompt), ``unlocated_turns`` (turns without a record
            the template could not re-tokenise, skipped), ... and ``total_seconds`` (the whole
            request: data, step, checkpoint, adapter load). Step-only keys are absent when
            not ``trained``.
        dropped: why groups were dropped: reason -> count (``zero_variance``,
            ``too_few_scored``, ``no_sequences``).
        groups_file: where the backend saved the groups (written and fsynced before training).
        deleted_steps: checkpoints removed by the retention policy after this step.
        replayed: the backend had already done this request (same ``Idempotency-Key``: a retry
            after a timeout or a lost answer) and answered with its earlier result; nothing
            was trained this time.
    """

    model_config = ConfigDict(extra="allow")

    step: int
    trained: bool
    reason: str | None = None
    metrics: dict[str, Any] = Field(default_factory=dict)
    dropped: dict[str, int] = Field(default_factory=dict)
    groups_file: str | None = None
    deleted_steps: list[int] = Field(default_factory=list)
    replayed: bool = False


class CheckpointInfo(BaseModel):
    """A servable checkpoint of a model (``step`` 0 is the base weights, no metrics)."""

    model_config = ConfigDict(extra="allow")

    step: int
    metrics: dict[str, Any] = Field(default_factory=dict)
    created: float | None = None


#: Matched whole (``fullmatch``: ``$`` would let a trailing newline in).
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


class TrainableModel(BaseModel):
    """A model registered on a backend, trained step by step with GRPO.

    ::

        model = TrainableModel(name="agent", project="demo", base_model="smollm2-135m-instruct")
        await model.register(backend)       # step 0 = the base weights, served as agent and agent@0
        llm = model.chat_model()             # a LangChain chat model on the latest step
        result = await model.train(groups, config=TrainConfig(learning_rate=1e-4))
        result.step, result.trained, result.metrics["loss"]

    Attributes:
        name: served as ``name`` (latest step) and ``name@step``; letters, digits, ``.``,
            ``_``, ``-``.
        project: groups runs on disk and in traces.
        base_model: the base weights: ``smollm2-135m-instruct`` (bundled) or a Hugging Face
            model folder the backend can read.
        config: free-form settings kept with the model (e.g. the system prompt used).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    name: str
    project: str = "default"
    base_model: str = "smollm2-135m-instruct"
    config: dict[str, Any] = Field(default_factory=dict)

    _backend: Backend | None = PrivateAttr(default=None)

    @field_validator("name", "project")
    @classmethod
    def _check_name(cls, value: str) -> str:
        if not _NAME.fullmatch(value):
            raise ValueError(
                f"{value!r} is not a valid name: use 1-128 letters, digits, '.', '_' or '-', "
                "starting with a letter or digit (no '@', '/' or spaces)"
            )
        return value

    @property
    def backend(self) -> Backend:
        """The backend this model is registered on."""
        if self._backend is None:
            raise ConfigError(
                f"model {self.name!r} is not registered: call `await model.register(backend)` first"
            )
        return self._backend

    async def register(self, backend: Backend) -> None:
        """Register the model on ``backend`` (idempotent): step 0 serves the base weights."""
        await backend.register_model(name=self.name, project=self.project, base_model=self.base_model)
        self._backend = backend

    async def get_step(self) -> int:
        """The latest trained step on the backend (0 before any training)."""
        record = await self.backend.get_model(self.name)
        return int(record["latest_step"])

    def served_name(self, step: int | None = None) -> str:
        """The OpenAI ``model`` string for ``step``: ``name@step``, or ``name`` for the latest."""
        if step is None:
            return self.name
        if step < 0:
            raise ConfigError(f"step must be >= 0, got {step}")
        return f"{self.name}@{step}"

    def chat_model(self, step: int | None = None, **kwargs: Any) -> ChatOpenAI:
        """A LangChain chat model bound to ``name@step`` (``None``: whatever step is latest
        at each call). A drop-in for the graph's model: supports ``bind_tools``, streaming
        and async. Extra keyword arguments go to ``ChatOpenAI`` (e.g. ``temperature``).

        Each chat model gets its own async connection pool (``langchain-openai`` otherwise
        shares one per base URL for the whole process, which breaks in the second
        ``asyncio.run``); use a chat model within one event loop, and call this again in another.
        """
        import httpx
        from langchain_openai import ChatOpenAI

        backend = self.backend
        kwargs.setdefault("max_retries", 2)
        if "http_async_client" not in kwargs:
            kwargs["http_async_client"] = httpx.AsyncClient()  # openai sets the timeout per request
        # The backend sends the completion id as a response header too: with the headers kept, a
        # streamed turn (whose chunk ids LangChain drops) still links to its exact-token record.
        kwargs.setdefault("include_response_headers", True)
        return ChatOpenAI(
            model=self.served_name(step),
            base_url=backend.openai_base_url,
            api_key=backend.api_key or "not-needed",
            **kwargs,
        )

    def openai_client(self) -> AsyncOpenAI:
        """An ``openai.AsyncOpenAI`` client pointed at the backend."""
        from openai import AsyncOpenAI

        backend = self.backend
        return AsyncOpenAI(base_url=backend.openai_base_url, api_key=backend.api_key or "not-needed")

    async def train(
        self,
        groups: Iterable[TrajectoryGroup],
        config: TrainConfig | None = None,
        *,
        timeout: float | None = DEFAULT_TRAIN_TIMEOUT_S,
        idempotency_key: str | None = None,
        retries: int = 2,
    ) -> TrainResult:
        """Train one GRPO step on ``groups`` and serve the new checkpoint as ``name`` and ``name@step``.

        The backend first saves the groups in its run directory (so a failed or interrupted step
        can be trained again), builds exact-token sequences, trains one optimizer update, writes
        the checkpoint atomically, loads it for serving and applies ``config.retention``.
        Inference requests sent meanwhile wait and then complete.

        The request carries an ``Idempotency-Key`` header (a new UUID per call unless given), and
        a request that timed out, lost its connection or got a 502/503/504 is sent again with
        the same key: the backend answers a key that already made a step with that step's result
        (``replayed`` is then set) instead of training a second step on the same groups.

        Args:
            groups: scored trajectory groups (``reward`` set on the trajectories).
            config: the step's settings; default ``TrainConfig()``.
            timeout: seconds to wait for each attempt (``None``: forever). Default one hour.
            idempotency_key: the request's key; pass the same key to retry a call that raised
                yourself (1-255 visible ASCII characters). Default: a new UUID.
            retries: how many times to resend after a timeout, a lost connection or a
                502/503/504 (waiting 2, 4, ... s between). Default 2; 0 sends once.

        Returns:
            :class:`TrainResult`; ``trained=False`` with a ``reason`` when no group carried
            signal (no new step then).

        Raises:
            BackendRequestError: the backend refused (404 unknown model, 400 malformed groups
                or config) or the step failed (500).
        """
        config = config or TrainConfig()
        if not isinstance(config, TrainConfig):
            raise ConfigError(f"config must be a TrainConfig, got {type(config).__name__}")
        group_list = list(groups)
        for i, group in enumerate(group_list):
            if not isinstance(group, TrajectoryGroup):
                raise ConfigError(f"groups[{i}] is a {type(group).__name__}, not a TrajectoryGroup")
        body = {
            "groups": [g.model_dump(mode="json") for g in group_list],
            "config": config.model_dump(mode="json"),
        }
        return await self._post_train("train", body, timeout, idempotency_key, retries)

    async def train_sft(
        self,
        trajectories: Iterable[Trajectory],
        config: SFTConfig | None = None,
        *,
        timeout: float | None = DEFAULT_TRAIN_TIMEOUT_S,
        idempotency_key: str | None = None,
        retries: int = 2,
    ) -> TrainResult:
        """Train one SFT step on ``trajectories`` and serve the new checkpoint as ``name`` and ``name@step``.

        Supervised fine-tuning: next-token cross-entropy on the trajectories' assistant turns (the
        policy's own sampled tokens where the backend recorded them, the chat template's tokens for
        turns served elsewhere: imported production traces, a stronger model's rollouts), for
        ``config.epochs`` passes. Rewards are not used. The step is made like a :meth:`train` step:
        the trajectories are saved first (``groups_file``, as one group), the checkpoint is written
        atomically, served at once, listed by :meth:`checkpoints` with its metrics (``loss``,
        ``first_pass_loss``, ``tokens``, ``sequences``, ``learning_rate``, ...), and
        ``config.retention`` applied; retries carry the same ``Idempotency-Key``. GRPO steps
        continue from it (``train_loop`` does so with ``LoopConfig.sft_warmup``).

        Args:
            trajectories: the demonstrations (``load_trajectories`` reads a file of them).
            config: the step's settings; default ``SFTConfig()``.
            timeout, idempotency_key, retries: as for :meth:`train`.

        Returns:
            :class:`TrainResult`, as :meth:`train` returns it; ``trained=False`` with a
            ``reason`` when no assistant turn fits (e.g. every sequence is longer than
            ``config.max_sequence_length``).

        Raises:
            ConfigError: no trajectories, or not :class:`Trajectory` objects, or a config that
                is not an :class:`SFTConfig`.
            BackendRequestError: the backend refused (404 unknown model, 400 no assistant turn to
                imitate or a malformed config) or the step failed (500).
        """
        config = config or SFTConfig()
        if not isinstance(config, SFTConfig):
            raise ConfigError(f"config must be an SFTConfig, got {type(config).__name__}")
        items = list(trajectories)
        if not items:
            raise ConfigError("train_sft needs at least one trajectory with an assistant turn; got none")
        for i, trajectory in enumerate(items):
            if not isinstance(trajectory, Trajectory):
                raise ConfigError(f"trajectories[{i}] is a {type(trajectory).__name__}, not a Trajectory")
        body = {
            "trajectories": [t.model_dump(mode="json") for t in items],
            "config": config.model_dump(mode="json"),
        }
        return await self._post_train("train_sft", body, timeout, idempotency_key, retries)

    async def _post_train(
        self,
        route: str,
        body: dict[str, Any],
        timeout: float | None,
        idempotency_key: str | None,
        retries: int,
    ) -> TrainResult:
        """POST a train request to ``/art/models/{name}/{route}``, resent with the same key after a
        timeout, a lost connection or a 502/503/504 (see :meth:`train`)."""
        key = idempotency_key or uuid.uuid4().hex
        attempt = 0
        while True:
            try:
                data = await self.backend.request(
                    "POST", f"/art/models/{path_segment(self.name)}/{route}", json=body,
                    timeout=timeout or 10.0**9, headers={IDEMPOTENCY_HEADER: key},
                )  # fmt: skip
                return TrainResult.model_validate(data)
            except (BackendUnavailableError, BackendRequestError) as exc:
                retryable = not isinstance(exc, BackendRequestError) or exc.status_code in _RETRY_STATUSES
                if not retryable or attempt >= retries:
                    raise
                attempt += 1
                logger.warning(
                    "train request for %r failed (%s); sending it again in %d s with the same %s %s",
                    self.name, exc, 2**attempt, IDEMPOTENCY_HEADER, key,
                )  # fmt: skip
                await asyncio.sleep(2**attempt)

    async def checkpoints(self) -> list[CheckpointInfo]:
        """The servable steps of this model with their metrics, oldest first (step 0 included)."""
        data = await self.backend.request("GET", f"/art/models/{path_segment(self.name)}/checkpoints")
        return [CheckpointInfo.model_validate(c) for c in data["data"]]

    async def delete_checkpoints(
        self,
        steps: Iterable[int] | None = None,
        *,
        keep_latest: int = 1,
        best_metric: str | None = None,
        mode: Literal["max", "min"] = "max",
    ) -> list[int]:
        """Delete checkpoints; returns the deleted steps (they stop being served).

        With ``steps``: delete exactly those (never step 0 or the latest: 400). Without:
        apply the retention policy: keep the ``keep_latest`` newest and the best by
        ``best_metric`` (see :class:`~art_adapters._train_config.RetentionPolicy`).
        """
        if steps is not None:
            body: dict[str, Any] = {"steps": [int(s) for s in steps]}
        else:
            policy = RetentionPolicy(keep_latest=keep_latest, best_metric=best_metric, mode=mode)
            body = {"retention": policy.model_dump(mode="json")}
        path = f"/art/models/{path_segment(self.name)}/checkpoints/delete"
        data = await self.backend.request("POST", path, json=body)
        return [int(s) for s in data["deleted"]]

    async def export(
        self,
        out: str | Path,
        step: int | None = None,
        merged: bool = False,
        *,
        force: bool = False,
        timeout: float | None = DEFAULT_EXPORT_TIMEOUT_S,
    ) -> Path:
        """Export checkpoint ``step`` for deployment with vLLM; returns the folder written.

        The default writes a PEFT LoRA adapter folder (adapter config naming the base model,
        the tokenizer with the chat template used in training, ``chat_template.jinja``, and a
        ``README.md`` with the exact ``vllm serve ... --enable-lora --lora-modules ...`` line);
        ``merged=True`` writes the base model with the adapter merged in (safetensors). See
        ``docs/export.md``. The same as ``art-adapters export NAME[@STEP] OUT``.

        The backend writes the folder **on its own machine**: with a :class:`LocalBackend`
        a relative ``out`` is taken from this process's working directory; a remote backend
        needs an absolute path on its machine.

        Args:
            out: the folder to write (its parents are created).
            step: the checkpoint step; ``None`` for the latest. Step 0 (the base weights)
                needs ``merged=True``.
            merged: write a full merged model instead of the adapter.
            force: replace ``out`` if it exists and is not empty.
            timeout: seconds to wait (``None``: forever).

        Raises:
            ConfigError: a negative step, or a relative ``out`` for a remote backend.
            BackendRequestError: 404 unknown model or step, 409 ``out`` exists and is not
                empty (pass ``force``), 400 step 0 without ``merged``.
        """
        from ._backends import LocalBackend

        if step is not None and step < 0:
            raise ConfigError(f"step must be >= 0, got {step}")
        backend = self.backend
        path = Path(out).expanduser()
        if isinstance(backend, LocalBackend):
            path = path.absolute()
        elif not path.is_absolute():
            raise ConfigError(
                f"out must be an absolute path on the backend's machine ({backend.base_url}), "
                f"got {str(out)!r}"
            )
        data = await backend.export_model(
            self.name, out=str(path), step=step, merged=merged, force=force, timeout=timeout or 10.0**9
        )
        return Path(data["path"])
