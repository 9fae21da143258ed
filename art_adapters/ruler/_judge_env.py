"""The judge from the environment: the one place that reads the ``ART_ADAPTERS_JUDGE_*`` variables.

The demo, ``train-mcp`` and ``mcp_tools.generate_scenarios`` (its default writer) all ask
:func:`judge_from_env`; each decides for itself what to do when it finds no judge. The demo asks
:func:`judges_from_env`, which adds a second judge (``ART_ADAPTERS_JUDGE_*_2``) for an ensemble.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from .._errors import ConfigError
from .._redact import redact_url

if TYPE_CHECKING:
    from langchain_openai import ChatOpenAI

__all__ = [
    "JUDGE_API_KEY_2_ENV",
    "JUDGE_API_KEY_ENV",
    "JUDGE_BASE_URL_2_ENV",
    "JUDGE_BASE_URL_ENV",
    "JUDGE_MODEL_2_ENV",
    "JUDGE_MODEL_ENV",
    "OPENAI_API_KEY_ENV",
    "OPENAI_JUDGE_MODEL",
    "judge_from_env",
    "judges_from_env",
]

logger = logging.getLogger(__name__)

#: The judge's model name on its endpoint.
JUDGE_MODEL_ENV = "ART_ADAPTERS_JUDGE_MODEL"
#: The judge's OpenAI-compatible endpoint (``http(s)://host[:port]/v1``); unset: the OpenAI API.
JUDGE_BASE_URL_ENV = "ART_ADAPTERS_JUDGE_BASE_URL"
#: The judge endpoint's key.
JUDGE_API_KEY_ENV = "ART_ADAPTERS_JUDGE_API_KEY"
#: A second judge's model name (an ensemble of two, :func:`judges_from_env`).
JUDGE_MODEL_2_ENV = "ART_ADAPTERS_JUDGE_MODEL_2"
#: The second judge's endpoint; unset: the OpenAI API.
JUDGE_BASE_URL_2_ENV = "ART_ADAPTERS_JUDGE_BASE_URL_2"
#: The second judge's key (the first judge's key is never sent to the second's endpoint).
JUDGE_API_KEY_2_ENV = "ART_ADAPTERS_JUDGE_API_KEY_2"
#: The OpenAI API's key: the key of last resort, and alone it names :data:`OPENAI_JUDGE_MODEL`.
OPENAI_API_KEY_ENV = "OPENAI_API_KEY"
#: The judge used when only ``$OPENAI_API_KEY`` is set.
OPENAI_JUDGE_MODEL = "gpt-4o-mini"
#: The key sent to an endpoint when none is configured (local servers ignore it; the client needs one).
_NO_KEY = "not-needed"


def _env(name: str) -> str | None:
    """The variable's value, stripped; ``None`` when it is unset or blank (blank switches it off)."""
    return (os.environ.get(name) or "").strip() or None


def _check_url(url: str, source: str) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            f"{source} must be an http(s) URL of an OpenAI-compatible endpoint such as "
            f"http://127.0.0.1:8000/v1, got {redact_url(url)!r}"
        )


def judge_from_env(
    model: str | None = None,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    temperature: float = 0.0,
) -> tuple[ChatOpenAI, str] | None:
    """The configured judge as a ``ChatOpenAI`` chat model, and a line saying which it is and where.

    Each setting is the argument when given, else the environment, in this order:

    * model: *model*, else ``$ART_ADAPTERS_JUDGE_MODEL``, else ``gpt-4o-mini`` when
      ``$OPENAI_API_KEY`` is set; with none of them there is no judge and the result is ``None``
      (the caller decides: the demo scores with its verifiable check, ``train-mcp`` judges with
      the base model, ``generate_scenarios`` asks for ``model=``).
    * endpoint: *base_url*, else ``$ART_ADAPTERS_JUDGE_BASE_URL``, else the OpenAI API.
    * key: *api_key*, else ``$ART_ADAPTERS_JUDGE_API_KEY``, else ``$OPENAI_API_KEY``, else a
      placeholder (a local endpoint needs none).

    A blank variable counts as unset. The line (``"gpt-4o-mini at the OpenAI API
    ($OPENAI_API_KEY)"``) names where the model came from and carries no credentials. Nothing
    is sent here: an endpoint that cannot be reached fails on the first call, as that call's error.

    Args:
        model, base_url, api_key: explicit settings (command-line flags), each overriding its variable.
        temperature: the chat model's sampling temperature (0 for judging, more for writing scenarios).

    Raises:
        ConfigError: an endpoint is set without a model name to ask it for, or is not an http(s) URL.
    """
    name = (model or "").strip() or _env(JUDGE_MODEL_ENV)
    source = None if (model or "").strip() else f"${JUDGE_MODEL_ENV}"  # an argument needs no saying
    url = base_url or _env(JUDGE_BASE_URL_ENV)
    url_source = "base_url" if base_url else f"${JUDGE_BASE_URL_ENV}"
    openai_key = _env(OPENAI_API_KEY_ENV)
    if url is not None:
        _check_url(url, url_source)
        if name is None:
            raise ConfigError(
                f"{url_source} is set ({redact_url(url)}) but no judge model is: set ${JUDGE_MODEL_ENV} "
                "(or pass the model) to the model's name on that endpoint"
            )
    if name is None:
        if openai_key is None:
            return None
        name, source = OPENAI_JUDGE_MODEL, f"${OPENAI_API_KEY_ENV}"
    key = api_key or _env(JUDGE_API_KEY_ENV) or openai_key or _NO_KEY
    return _chat(name, url, key, temperature, source)


def _chat(
    name: str, url: str | None, key: str, temperature: float, source: str | None
) -> tuple[ChatOpenAI, str]:
    """The chat model, and the line naming it, its endpoint (no credentials) and where the name came from."""
    from langchain_openai import ChatOpenAI

    judge = ChatOpenAI(model=name, base_url=url, api_key=key, temperature=temperature)
    where = redact_url(url) if url else "the OpenAI API"
    line = f"{name} at {where}" + (f" ({source})" if source else "")
    logger.debug("judge from the environment: %s", line)
    return judge, line


def judges_from_env(*, temperature: float = 0.0) -> list[tuple[ChatOpenAI, str]]:
    """The configured judges for an ensemble: :func:`judge_from_env`'s, and a second one when
    ``$ART_ADAPTERS_JUDGE_MODEL_2`` is set; each with its line (as :func:`judge_from_env` writes it).

    The second judge is read from its own variables, with the first judge's rules:

    * model: ``$ART_ADAPTERS_JUDGE_MODEL_2`` (blank: unset, no second judge);
    * endpoint: ``$ART_ADAPTERS_JUDGE_BASE_URL_2``, else the OpenAI API (not the first judge's endpoint);
    * key: ``$ART_ADAPTERS_JUDGE_API_KEY_2``, else ``$OPENAI_API_KEY``, else a placeholder; never
      ``$ART_ADAPTERS_JUDGE_API_KEY``, so the first endpoint's key does not travel to the second.

    Pass them to ``ruler_scorer(judges=[judge for judge, _ in found])``: the trajectories then carry
    the judges' agreement (``metrics["judge_agreement"]``). Nothing is sent here.

    Args:
        temperature: both chat models' sampling temperature (0 for judging).

    Returns:
        ``[]`` when no judge is configured, ``[first]`` or ``[first, second]``.

    Raises:
        ConfigError: a second judge without a first (set ``$ART_ADAPTERS_JUDGE_MODEL`` or
            ``$OPENAI_API_KEY``), ``$ART_ADAPTERS_JUDGE_BASE_URL_2`` without ``$ART_ADAPTERS_JUDGE_MODEL_2``,
            an endpoint that is not an http(s) URL, or the second judge the same model at the same
            endpoint as the first (one judge asked twice is ``RulerConfig.samples``, not an ensemble).
    """
    first = judge_from_env(temperature=temperature)
    name, url = _env(JUDGE_MODEL_2_ENV), _env(JUDGE_BASE_URL_2_ENV)
    if url is not None:
        _check_url(url, f"${JUDGE_BASE_URL_2_ENV}")
        if name is None:
            raise ConfigError(
                f"${JUDGE_BASE_URL_2_ENV} is set ({redact_url(url)}) but ${JUDGE_MODEL_2_ENV} is not: set it "
                "to the second judge's model name on that endpoint (or unset both for one judge)"
            )
    if name is None:
        return [] if first is None else [first]
    if first is None:
        raise ConfigError(
            f"${JUDGE_MODEL_2_ENV} is set ({name}) but there is no first judge: set ${JUDGE_MODEL_ENV} "
            f"(and ${JUDGE_BASE_URL_ENV}) or ${OPENAI_API_KEY_ENV}, or unset ${JUDGE_MODEL_2_ENV}"
        )
    judge, _ = first
    if name == judge.model_name and url == (judge.openai_api_base or None):
        where = redact_url(url) if url else "the OpenAI API"
        raise ConfigError(
            f"${JUDGE_MODEL_2_ENV} names the first judge again ({name} at {where}): an ensemble needs "
            "another model or endpoint (to ask one judge several times, use RulerConfig.samples)"
        )
    key = _env(JUDGE_API_KEY_2_ENV) or _env(OPENAI_API_KEY_ENV) or _NO_KEY
    return [first, _chat(name, url, key, temperature, f"${JUDGE_MODEL_2_ENV}")]
