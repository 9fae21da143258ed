"""The body of ``POST /v1/responses`` (OpenAI's Responses API) as far as a chat model serves it.

Fields map onto :class:`~.openai_types.ChatCompletionRequest` (see :mod:`.responses`); the ones this
server cannot honour are refused by name, never dropped: stored state (``previous_response_id``,
``conversation``), ``background``, hosted tools, ``truncation: "auto"``, prompt templates.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from .openai_types import FunctionDefinition

__all__ = ["ResponsesRequest", "ResponsesTextConfig", "ResponsesTextFormat"]

#: ``include`` values accepted: output logprobs, and encrypted reasoning (none is made here, so it
#: changes nothing; LangChain and the Agents SDK send it with ``store: false``).
INCLUDE_LOGPROBS = "message.output_text.logprobs"
_INCLUDABLE = frozenset({INCLUDE_LOGPROBS, "reasoning.encrypted_content"})

#: Fields refused with the reason: this server keeps no conversation state and runs no hosted tools.
_REFUSED = {
    "previous_response_id": "this server keeps no response state to continue from: send the whole "
    "conversation as 'input' (as with store: false)",
    "conversation": "this server keeps no conversations: send the whole conversation as 'input'",
    "prompt": "this server has no stored prompt templates: send 'instructions' and 'input'",
    "max_tool_calls": "this server runs no built-in tools; limit function calls in your agent loop",
}


class ResponsesTextFormat(BaseModel):
    """``text.format``: ``{"type": "text" | "json_object" | "json_schema", "name", "schema", "strict"}``."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    type: Literal["text", "json_object", "json_schema"]
    name: str = "response"
    description: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None

    @model_validator(mode="after")
    def _needs_schema(self) -> ResponsesTextFormat:
        if self.type == "json_schema" and self.schema_ is None:
            raise ValueError("text.format of type 'json_schema' needs a 'schema' object")
        return self


class ResponsesTextConfig(BaseModel):
    """``text``: the output ``format`` (a ``verbosity`` but ``medium`` means nothing to a chat template)."""

    model_config = ConfigDict(extra="forbid")

    format: ResponsesTextFormat | None = None
    verbosity: Literal["medium"] | None = None


class ResponsesFunctionTool(FunctionDefinition):
    """A function tool of the Responses API: ``{"type": "function", "name", "description", "parameters"}``."""

    type: Literal["function"]


class ResponsesReasoning(BaseModel):
    """``reasoning``: accepted only empty (the template decides; use ``chat_template_kwargs``)."""

    model_config = ConfigDict(extra="ignore")

    effort: str | None = None
    summary: str | None = None
    generate_summary: str | None = None

    @field_validator("effort", "summary", "generate_summary")
    @classmethod
    def _unset(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None:
            raise ValueError(
                f"reasoning.{info.field_name} is not supported: whether and how the model reasons is "
                "its chat template's choice (e.g. chat_template_kwargs {'enable_thinking': false} for Qwen3)"
            )
        return value


class ResponsesRequest(BaseModel):
    """The body of ``POST /v1/responses``: OpenAI's fields a chat model can serve, plus vLLM's extras.

    Any other field is a 400 naming it. ``store`` is accepted either way: no response state is kept
    (``previous_response_id`` is refused) and the exact-token record is kept regardless, keyed by
    the response id. Sampling fields mean what they mean on ``/v1/chat/completions``.
    """

    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1)
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None
    text: ResponsesTextConfig | None = None
    include: list[str] | None = None
    stream: bool | None = None
    stream_options: dict[str, Any] | None = None
    store: bool | None = None
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    max_output_tokens: int | None = Field(default=None, ge=1)
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    truncation: Literal["disabled"] | None = None
    reasoning: ResponsesReasoning | None = None
    background: Literal[False] | None = None
    #: refused when set (see ``_REFUSED``)
    previous_response_id: Any = None
    conversation: Any = None
    prompt: Any = None
    max_tool_calls: Any = None
    #: accepted and ignored: they change no token (as on chat completions)
    user: str | None = None
    metadata: dict[str, str] | None = None
    service_tier: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: str | None = None
    #: vLLM's extra sampling parameters, as on chat completions
    seed: int | None = Field(default=None, ge=-(2**63), le=2**63 - 1)
    stop: str | list[str] | None = None
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0, allow_inf_nan=False)
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0, allow_inf_nan=False)
    repetition_penalty: float | None = Field(default=None, gt=0.0, allow_inf_nan=False)
    top_k: int | None = Field(default=None, ge=-1)
    min_p: float | None = Field(default=None, ge=0.0, le=1.0)
    min_tokens: int | None = Field(default=None, ge=0)
    logit_bias: dict[str, float] | None = None
    chat_template_kwargs: dict[str, Any] | None = None

    @field_validator("include")
    @classmethod
    def _include(cls, value: list[str] | None) -> list[str] | None:
        for item in value or []:
            if item not in _INCLUDABLE:
                raise ValueError(
                    f"include {item!r} is not supported here; this server can include: "
                    + ", ".join(sorted(_INCLUDABLE))
                )
        return value

    @field_validator("input")
    @classmethod
    def _input(cls, value: str | list[dict[str, Any]]) -> str | list[dict[str, Any]]:
        if not value:
            raise ValueError("input must be a non-empty string or list of items")
        return value

    @field_validator(*_REFUSED)
    @classmethod
    def _refused(cls, value: Any, info: ValidationInfo) -> Any:
        if value is not None:
            raise ValueError(f"{info.field_name} is not supported: {_REFUSED[str(info.field_name)]}")
        return value

    @property
    def wants_logprobs(self) -> bool:
        """Whether ``include`` asks for the output text's logprobs."""
        return INCLUDE_LOGPROBS in (self.include or [])
