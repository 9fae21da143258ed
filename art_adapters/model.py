"""``TrainableModel``: a named model on a backend whose LoRA checkpoints you train and use.

::

    model = TrainableModel(name="agent", project="demo", base_model="smollm2-135m-instruct")
    await model.register(backend)       # step 0 = the base weights, served as agent and agent@0
    llm = model.chat_model()             # a LangChain chat model on the latest step
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator

from .errors import ConfigError

if TYPE_CHECKING:
    from langchain_openai import ChatOpenAI
    from openai import AsyncOpenAI

    from .backends import Backend

__all__ = ["TrainableModel"]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class TrainableModel(BaseModel):
    """A model registered on a backend, trained step by step with GRPO.

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
        if not _NAME.match(value):
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
        """
        from langchain_openai import ChatOpenAI

        backend = self.backend
        kwargs.setdefault("max_retries", 2)
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
