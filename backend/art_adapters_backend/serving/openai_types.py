"""Pydantic models of the OpenAI chat-completions API: the request we accept, the bodies we send.

The request model normalises what OpenAI accepts in several shapes (content as a string
or a list of text parts, ``stop`` as a string or a list) and turns each malformed field
into one readable message. Cross-field rules that need the server's state (known model,
context length) are checked in :mod:`.chat`.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..limits import MAX_STOP_CHARS, MAX_TOOLS

#: Variables the chat template gets from the server, which ``chat_template_kwargs`` may not replace
#: (names ending in ``_token``, the special tokens such as ``bos_token``, are refused too).
RESERVED_TEMPLATE_VARIABLES = frozenset({
    "messages", "conversation", "tools", "documents", "add_generation_prompt", "continue_final_message",
    "tokenize", "chat_template", "return_dict", "raise_exception", "strftime_now", "date_string",
    "additional_special_tokens", "range", "namespace", "dict", "lipsum", "cycler", "joiner",
})  # fmt: skip

#: The most ``logit_bias`` entries one request may send (OpenAI's limit).
MAX_LOGIT_BIAS = 300

__all__ = [
    "AssistantMessage",
    "ChatCompletionRequest",
    "ChatMessage",
    "FunctionDefinition",
    "NamedToolChoice",
    "ResponseFormat",
    "StreamOptions",
    "SystemMessage",
    "Tool",
    "ToolCall",
    "ToolMessage",
    "UserMessage",
]

_FUNCTION_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,64}")  # fullmatch: "$" would accept a trailing newline


def _text_content(value: Any, *, allow_none: bool, allow_refusal: bool = False) -> Any:
    """OpenAI content: a string, a list of ``{"type": "text", "text": ...}`` parts (joined by newlines), or null.

    With ``allow_refusal`` (assistant messages) ``{"type": "refusal", "refusal": ...}`` parts
    count as text too: they are what the assistant said.
    """
    if value is None:
        if allow_none:
            return None
        raise ValueError("content must be a string or a list of text parts, not null")
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        texts: list[str] = []
        for i, part in enumerate(value):
            if not isinstance(part, dict):
                raise ValueError(  # noqa: TRY004 - pydantic turns ValueError into a validation error
                    f"content part {i} must be an object like {{'type': 'text', 'text': '...'}}"
                )
            kind = part.get("type")
            if kind == "refusal" and allow_refusal:
                if not isinstance(part.get("refusal"), str):
                    raise ValueError(f"content part {i} needs a string 'refusal'")
                texts.append(part["refusal"])
                continue
            if kind != "text":
                raise ValueError(f"content part {i} has type {kind!r}; only 'text' parts are supported")
            if not isinstance(part.get("text"), str):
                raise ValueError(f"content part {i} needs a string 'text'")  # noqa: TRY004
            texts.append(part["text"])
        return "\n".join(texts)  # as vLLM joins text parts before rendering
    raise ValueError(f"content must be a string or a list of text parts, not {type(value).__name__}")


class _Message(BaseModel):
    """What every message has: an optional ``name`` and OpenAI's content (see :func:`_text_content`).

    Each subclass declares ``content``; only the assistant's may be null or hold refusal parts.
    """

    model_config = ConfigDict(extra="ignore")

    _assistant_content: ClassVar[bool] = False

    name: str | None = None

    @field_validator("content", mode="before", check_fields=False)
    @classmethod
    def _content(cls, value: Any) -> Any:
        return _text_content(value, allow_none=cls._assistant_content, allow_refusal=cls._assistant_content)


class SystemMessage(_Message):
    """A system message."""

    role: Literal["system"]
    content: str


class DeveloperMessage(SystemMessage):
    """A developer message (OpenAI's newer name for system); rendered as a system turn."""

    role: Literal["developer"]  # type: ignore[assignment]


class UserMessage(_Message):
    """A user message."""

    role: Literal["user"]
    content: str


class FunctionCall(BaseModel):
    """The function of a tool call: its name and its arguments as a JSON string."""

    name: str
    arguments: str = "{}"

    @field_validator("arguments", mode="before")
    @classmethod
    def _arguments(cls, value: Any) -> Any:
        if isinstance(value, dict):  # lenient: some clients send the object itself
            import json

            return json.dumps(value)
        return value


class ToolCall(BaseModel):
    """A tool call made by the assistant."""

    model_config = ConfigDict(extra="ignore")

    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class AssistantMessage(_Message):
    """An assistant message: text, tool calls, or both, and the reasoning that came before them.

    ``reasoning_content`` (vLLM's response field) or ``reasoning`` (its newer name) is handed to
    the chat template like vLLM does; templates such as Qwen3's render it for turns after the
    last user message and drop it for earlier ones.
    """

    _assistant_content: ClassVar[bool] = True

    role: Literal["assistant"]
    content: str | None = None
    tool_calls: list[ToolCall] | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None


class ToolMessage(_Message):
    """The result of a tool call, linked to it by ``tool_call_id``."""

    role: Literal["tool"]
    content: str
    tool_call_id: str


ChatMessage = Annotated[
    SystemMessage | DeveloperMessage | UserMessage | AssistantMessage | ToolMessage,
    Field(discriminator="role"),
]


class FunctionDefinition(BaseModel):
    """A function the model may call: name, description and a JSON schema of its parameters.

    ``parameters`` stays ``None`` when the request leaves it out: the template sees what was sent
    (vLLM renders ``null``); a call to such a function takes an object with any members.
    """

    model_config = ConfigDict(extra="ignore")

    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _FUNCTION_NAME.fullmatch(value):
            raise ValueError(
                f"{value!r} is not a valid function name: use 1-64 letters, digits, '_', '-', '.', ':'"
            )
        return value


class Tool(BaseModel):
    """A tool offered to the model (only ``function`` tools exist)."""

    type: Literal["function"] = "function"
    function: FunctionDefinition


class ToolChoiceFunction(BaseModel):
    """The function named by a tool choice."""

    name: str


class NamedToolChoice(BaseModel):
    """``{"type": "function", "function": {"name": ...}}``: call exactly this tool."""

    type: Literal["function"] = "function"
    function: ToolChoiceFunction


class JsonSchemaFormat(BaseModel):
    """The ``json_schema`` member of ``response_format``."""

    model_config = ConfigDict(populate_by_name=True)

    name: str = "response"
    description: str | None = None
    schema_: dict[str, Any] = Field(default_factory=lambda: {"type": "object"}, alias="schema")
    strict: bool | None = None


class ResponseFormat(BaseModel):
    """``{"type": "text" | "json_object" | "json_schema", "json_schema": {...}}``."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    @model_validator(mode="after")
    def _needs_schema(self) -> ResponseFormat:
        if self.type == "json_schema" and self.json_schema is None:
            raise ValueError(
                "response_format of type 'json_schema' needs a 'json_schema' object with a 'schema'"
            )
        return self


class StreamOptions(BaseModel):
    """``stream_options``: ``include_usage`` adds a final chunk with the usage."""

    include_usage: bool = False


ToolChoice = Literal["auto", "none", "required"] | NamedToolChoice


_IGNORED_FIELDS = ("user", "metadata", "store", "service_tier", "safety_identifier", "prompt_cache_key")
"""Fields accepted and ignored because ignoring them changes no token: end-user ids and tags for
OpenAI's abuse monitoring and dashboards (``user``, ``safety_identifier``, ``metadata``), OpenAI's
own storage and routing (``store``: every completion is recorded here anyway; ``service_tier``;
``prompt_cache_key``)."""


class ChatCompletionRequest(BaseModel):
    """The body of ``POST /v1/chat/completions``: OpenAI's fields we implement plus vLLM's sampling extras.

    Any other field is a 400 naming it (``extra="forbid"``): a parameter that is silently dropped
    leaves the user without the lever they reached for. The fields in ``_IGNORED_FIELDS`` are
    accepted and have no effect. Sampling fields have vLLM's ranges and meaning (see
    :class:`~.engine.base.SamplingParams`); ``top_k`` -1 means 0 (off), ``logit_bias`` biases are
    clamped to [-100, 100] as vLLM does.
    """

    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1)
    messages: list[ChatMessage] = Field(min_length=1)
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    n: int | None = Field(default=None, ge=1, le=128)
    seed: int | None = Field(default=None, ge=-(2**63), le=2**63 - 1)
    stop: list[str] | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    response_format: ResponseFormat | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0, allow_inf_nan=False)
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0, allow_inf_nan=False)
    logit_bias: dict[str, float] | None = None
    #: vLLM's extra sampling parameters
    repetition_penalty: float | None = Field(default=None, gt=0.0, allow_inf_nan=False)
    top_k: int | None = Field(default=None, ge=-1)
    min_p: float | None = Field(default=None, ge=0.0, le=1.0)
    min_tokens: int | None = Field(default=None, ge=0)
    #: accepted and ignored (see ``_IGNORED_FIELDS``)
    user: str | None = None
    metadata: dict[str, str] | None = None
    store: bool | None = None
    service_tier: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    #: extra variables for the chat template, as vLLM's field (e.g. ``{"enable_thinking": false}``)
    chat_template_kwargs: dict[str, Any] | None = None

    @field_validator("chat_template_kwargs")
    @classmethod
    def _template_kwargs(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        """The template's own variables (messages, tools, special tokens such as ``bos_token``, its
        helper functions) are the server's: a request may add variables, never replace those."""
        for key in value or {}:
            if key in RESERVED_TEMPLATE_VARIABLES or key.endswith("_token") or key.startswith("_"):
                raise ValueError(
                    f"{key!r} is a variable the server gives the chat template (messages, tools, special tokens, "
                    "helpers); chat_template_kwargs may only add others, such as enable_thinking"
                )
        return value

    @field_validator("tool_choice", mode="before")
    @classmethod
    def _tool_choice(cls, value: Any) -> Any:
        if value is None or value in ("auto", "none", "required"):
            return value
        function = value.get("function") if isinstance(value, dict) else None
        if (
            isinstance(function, dict)
            and value.get("type", "function") == "function"
            and isinstance(function.get("name"), str)
        ):
            return value
        raise ValueError(
            f"{value!r} is not a valid tool_choice: use 'auto', 'none', 'required' or "
            "{'type': 'function', 'function': {'name': ...}}"
        )

    @field_validator("stop", mode="before")
    @classmethod
    def _stop(cls, value: Any) -> Any:
        if value is None:
            return None
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
            raise ValueError("stop must be a string or a list of up to 4 strings")
        if len(value) > 4:
            raise ValueError(f"stop has {len(value)} strings; at most 4 are allowed")
        if any(not s for s in value):
            raise ValueError("stop strings must not be empty")
        longest = max(len(s) for s in value)
        if longest > MAX_STOP_CHARS:
            # every stop string is looked for after every sampled token
            raise ValueError(f"a stop string is {longest} characters long; at most {MAX_STOP_CHARS} are allowed")
        return value

    @field_validator("logit_bias", mode="before")
    @classmethod
    def _logit_bias_keys(cls, value: Any) -> Any:
        # JSON keys are strings; a Python caller (LangChain's logit_bias={id: bias}) may pass ints.
        if isinstance(value, dict):
            if len(value) > MAX_LOGIT_BIAS:  # before any key is looked at: each is kept in the record
                raise ValueError(f"logit_bias has {len(value)} entries; at most {MAX_LOGIT_BIAS} are allowed")
            return {str(key) if isinstance(key, int) else key: bias for key, bias in value.items()}
        return value

    @field_validator("logit_bias")
    @classmethod
    def _logit_bias(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        if value is None:
            return None
        out: dict[str, float] = {}
        for key, bias in value.items():
            if not (key.strip().isascii() and key.strip().isdigit()):
                raise ValueError(f"logit_bias keys must be token ids written as decimal strings, got {key!r}")
            if not math.isfinite(bias):
                raise ValueError(f"logit_bias[{key!r}] must be a finite number, got {bias}")
            token = str(int(key))
            if token in out:
                raise ValueError(f"logit_bias names token {token} twice (as {key!r} too); give each id once")
            out[token] = min(100.0, max(-100.0, bias))
        return out

    @field_validator("tools", mode="before")
    @classmethod
    def _tools_count(cls, value: Any) -> Any:
        """Refuse a list past :data:`MAX_TOOLS` before any of its tools is validated."""
        if isinstance(value, list) and len(value) > MAX_TOOLS:
            raise ValueError(
                f"the request offers {len(value)} tools; no server accepts more than {MAX_TOOLS} "
                "(serve --max-tools sets a lower bound)"
            )
        return value

    @field_validator("tools")
    @classmethod
    def _tools(cls, value: list[Tool] | None) -> list[Tool] | None:
        if value is not None:  # one pass over the names (a count per name was quadratic)
            counts = Counter(tool.function.name for tool in value)
            duplicates = sorted(name for name, count in counts.items() if count > 1)
            if duplicates:
                more = f" and {len(duplicates) - 10} more" if len(duplicates) > 10 else ""
                shown = ", ".join(duplicates[:10]) + more
                raise ValueError(f"tool names must be unique; repeated: {shown}")
        return value

    @property
    def wants_stream(self) -> bool:
        """Whether the answer is streamed as server-sent events."""
        return bool(self.stream)

    @property
    def tool_names(self) -> list[str]:
        """The names of the offered tools, in order."""
        return [tool.function.name for tool in self.tools or []]
