"""Judge adapters: a LangChain chat model or a litellm model string, behind one call.

Both take the request's plain ``{"role", "content"}`` messages and the answer's JSON schema and
return the judge's raw text (:class:`Judge`), so the scorer, the cache and the answer's validation
(:mod:`art_adapters.ruler._answer`) are the same for every judge.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, Protocol

from .._content import content_text
from .._errors import ConfigError
from .._redact import redact_url
from ..structured_output import NO_JSON_SCHEMA_MODE, answer_text, json_schema_output, rejects_json_schema

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

__all__ = ["Judge", "LangChainJudge", "LiteLLMJudge", "StructuredMode", "resolve_judge"]

logger = logging.getLogger(__name__)

#: How to ask for structured output: ``auto`` tries json_schema and falls back to plain,
#: ``json_schema`` insists on it, ``none`` never sends a schema (plain JSON parsing).
StructuredMode = Literal["auto", "json_schema", "none"]

_SCHEMA_NAME = "ruler_scores"


class Judge(Protocol):
    """What the scorer needs from a judge."""

    @property
    def model_id(self) -> str:
        """Identifies the judge in messages and metadata (model name and endpoint)."""
        ...

    @property
    def cache_id(self) -> str:
        """Identifies the judge in cache keys: ``model_id`` plus the settings that change its verdict."""
        ...

    @property
    def model_name(self) -> str:
        """The model's name on its endpoint (``"gpt-4.1-mini"``, ``"openai/gpt-4.1-mini"``)."""
        ...

    @property
    def endpoint(self) -> str | None:
        """The endpoint's URL as configured (may carry credentials: redact before writing it down)."""
        ...

    @property
    def sampling(self) -> dict[str, Any]:
        """The settings that change the verdict (temperature, budgets...), without credentials."""
        ...

    async def complete(self, messages: list[dict[str, str]], schema: dict[str, Any]) -> str:
        """Send ``messages``; return the answer's text."""
        ...


class LangChainJudge:
    """A LangChain chat model as the judge (``ChatOpenAI`` on any OpenAI-compatible endpoint, ours too).

    It is asked through ``with_structured_output(method="json_schema", include_raw=True)``, which
    sends ``response_format={"type": "json_schema", ...}`` so endpoints that support it constrain
    the output. Models without that method, and (with ``structured="auto"``) endpoints that answer
    such a request with HTTP 400/422, are asked plainly; the prompt states the format.

    Args:
        model: any ``BaseChatModel``.
        structured: see :data:`StructuredMode`.
    """

    def __init__(self, model: BaseChatModel, *, structured: StructuredMode = "auto") -> None:
        self.model = model
        self.structured = structured
        self._schema_rejected = False  # auto mode: the endpoint answered 400/422 to a json_schema request

    @property
    def model_name(self) -> str:
        """The chat model's ``model_name`` (or ``model``); ``"?"`` when it has neither."""
        return str(getattr(self.model, "model_name", None) or getattr(self.model, "model", None) or "?")

    @property
    def endpoint(self) -> str | None:
        """The chat model's base URL (``openai_api_base`` or ``base_url``), ``None`` when it has none."""
        base = getattr(self.model, "openai_api_base", None) or getattr(self.model, "base_url", None)
        return str(base) if base else None

    @property
    def model_id(self) -> str:
        """Class, model name and base URL (where the model has them; without credentials in it)."""
        base = self.endpoint
        return f"{type(self.model).__name__}:{self.model_name}" + (f"@{redact_url(base)}" if base else "")

    @property
    def sampling(self) -> dict[str, Any]:
        """The invocation settings that change the verdict (temperature, token and reasoning budgets...)."""
        try:
            params = dict(self.model._get_invocation_params())  # what LangChain's own LLM cache keys on
        except Exception:  # noqa: BLE001 - a chat model without it: its name and endpoint only
            params = {}
        return _verdict_settings(params)

    @property
    def cache_id(self) -> str:
        """``model_id`` plus the model's sampling settings (temperature, token and reasoning budgets...)."""
        return _with_settings(self.model_id, self.sampling)

    def _runnable(self, schema: dict[str, Any]) -> Any:
        if self.structured == "none" or self._schema_rejected:
            return None
        try:
            return json_schema_output(self.model, _SCHEMA_NAME, schema)
        except NO_JSON_SCHEMA_MODE as exc:
            if self.structured == "json_schema":
                raise ConfigError(
                    f"judge {self.model_id} does not support json_schema structured output ({exc}); "
                    "pass structured='auto' or 'none'"
                ) from exc
            logger.debug(
                "judge %s: no json_schema structured output (%s); asking plainly", self.model_id, exc
            )
            return None

    async def complete(self, messages: list[dict[str, str]], schema: dict[str, Any]) -> str:
        """Ask the model; return the text of its answer (or the parsed JSON, re-serialised)."""
        from langchain_core.messages import convert_to_messages

        lc_messages = convert_to_messages(messages)
        runnable = self._runnable(schema)
        if runnable is None:
            reply = await self.model.ainvoke(lc_messages)
            return content_text(reply.content)
        try:
            result = await runnable.ainvoke(lc_messages)
        except Exception as exc:
            # Many OpenAI-compatible servers reject response_format json_schema with a 400: in auto
            # mode that means "not supported", so ask plainly (the prompt states the format).
            if self.structured != "auto" or not rejects_json_schema(exc):
                raise
            logger.warning(
                "judge %s rejected the json_schema response format (%s); asking for plain JSON from now on",
                self.model_id,
                exc,
            )
            self._schema_rejected = True
            reply = await self.model.ainvoke(lc_messages)
            return content_text(reply.content)
        return answer_text(result)


class LiteLLMJudge:
    """A litellm model string as the judge (``litellm.acompletion`` with a json_schema format).

    Needs ``pip install 'art-adapters[litellm]'``.

    Args:
        model: the litellm model name, e.g. ``"openai/gpt-4.1-mini"``.
        structured: see :data:`StructuredMode` (``auto`` sends the schema).
        completion_kwargs: passed to ``litellm.acompletion`` (``api_base``, ``api_key``...).
    """

    def __init__(self, model: str, *, structured: StructuredMode = "auto", **completion_kwargs: Any) -> None:
        try:
            import litellm
        except ImportError as exc:
            raise ImportError(
                f"judge={model!r} is a litellm model string, but litellm is not installed: "
                "run `pip install 'art-adapters[litellm]'`, or pass a LangChain chat model "
                "(e.g. langchain_openai.ChatOpenAI(base_url=..., model=...)) as the judge"
            ) from exc
        self._litellm = litellm
        self.model = model
        self.structured = structured
        self.completion_kwargs = completion_kwargs

    @property
    def model_name(self) -> str:
        """The litellm model name."""
        return self.model

    @property
    def endpoint(self) -> str | None:
        """``api_base`` when one is set, else ``None`` (the provider's default endpoint)."""
        base = self.completion_kwargs.get("api_base")
        return str(base) if base else None

    @property
    def model_id(self) -> str:
        """``litellm:`` and the model name, plus ``api_base`` (without credentials) when one is set."""
        base = self.endpoint
        return f"litellm:{self.model}" + (f"@{redact_url(base)}" if base else "")

    @property
    def sampling(self) -> dict[str, Any]:
        """The completion settings that change the verdict (temperature, budgets...; no credentials)."""
        return _verdict_settings(self.completion_kwargs)

    @property
    def cache_id(self) -> str:
        """``model_id`` plus the completion settings (temperature, budgets...; no credentials)."""
        return _with_settings(self.model_id, self.sampling)

    async def complete(self, messages: list[dict[str, str]], schema: dict[str, Any]) -> str:
        """Ask the model through ``litellm.acompletion``; return the answer's text."""
        kwargs = dict(self.completion_kwargs)
        if self.structured != "none":
            kwargs["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": _SCHEMA_NAME, "schema": schema},
            }
        response = await self._litellm.acompletion(model=self.model, messages=messages, **kwargs)
        return content_text(response.choices[0].message.content)


#: Settings that never shape a cache key: transport, the raw endpoint (``model_id`` has it without
#: credentials), and anything that may carry a credential: headers, ``extra_body`` (a free-form
#: dict that can hold tokens; a setting sent there that changes the verdict needs ``cache=False``
#: or a new cache directory), cloud credentials.
_NOT_VERDICT = frozenset(
    {"headers", "default_headers", "extra_headers", "extra_body", "default_query", "timeout",
     "request_timeout", "stream", "_type", "client", "http_client", "http_async_client", "max_retries",
     "api_base", "base_url", "openai_api_base", "organization", "openai_organization", "openai_proxy"}
)  # fmt: skip
#: Names of credentials (``api_key``, ``aws_secret_access_key``, ``azure_ad_token``,
#: ``vertex_credentials``...); ``max_tokens`` and other budgets do not match.
_CREDENTIAL = re.compile(
    r"(?:^|_)(?:key|token|secret|password|credentials?)$|^aws_|^azure_ad_|header", re.IGNORECASE
)


def _verdict_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The settings that may change a verdict: no transport, endpoint, credential or unset (``None``) one."""
    return {
        k: v
        for k, v in settings.items()
        if k not in _NOT_VERDICT and not _CREDENTIAL.search(k) and v is not None
    }


def _with_settings(model_id: str, settings: Mapping[str, Any]) -> str:
    kept = _verdict_settings(settings)
    return model_id + " " + json.dumps(kept, sort_keys=True, default=str) if kept else model_id


def resolve_judge(judge: Any, *, structured: StructuredMode = "auto") -> Judge:
    """Turn the ``judge=`` argument into an adapter, or raise a :class:`ConfigError` saying what to pass.

    A string is a litellm model name (``"openai/gpt-4.1-mini"``, ``"hosted_vllm/..."``); an object with
    ``ainvoke`` and ``with_structured_output`` is a LangChain chat model; an adapter is used as is.
    """
    if judge is None:
        raise ConfigError(
            "ruler_score_group needs a judge: pass judge=ChatOpenAI(base_url=..., model=...) "
            "(any LangChain chat model; our backend's models too: model.chat_model()), or a litellm "
            "model string with the litellm extra installed"
        )
    if structured not in ("auto", "json_schema", "none"):
        raise ConfigError(f"structured must be 'auto', 'json_schema' or 'none', got {structured!r}")
    if isinstance(judge, LangChainJudge | LiteLLMJudge):
        return judge
    if isinstance(judge, str):
        return LiteLLMJudge(judge, structured=structured)
    if hasattr(judge, "ainvoke") and hasattr(judge, "with_structured_output"):
        return LangChainJudge(judge, structured=structured)
    raise ConfigError(
        f"judge must be a LangChain chat model or a litellm model string, got {type(judge).__name__}"
    )
