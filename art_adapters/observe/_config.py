"""Where observability data goes: :class:`ObserveConfig`, from arguments or the usual env variables.

Nothing is exported unless a destination is configured: Langfuse, any OTLP/HTTP backend, or both,
read from the same environment variables their own SDKs use.
"""

from __future__ import annotations

import base64
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from art_adapters._errors import ConfigError
from art_adapters._redact import redact_url

__all__ = ["ObserveConfig"]

logger = logging.getLogger(__name__)

DEFAULT_LANGFUSE_URL = "https://cloud.langfuse.com"
#: The header selecting Langfuse v4 ingestion, which its docs require of direct OTLP exporters.
LANGFUSE_INGESTION_VERSION_HEADER = "x-langfuse-ingestion-version"


def _traces_url(endpoint: str, *, base: bool) -> str:
    endpoint = endpoint.rstrip("/")
    return f"{endpoint}/v1/traces" if base and not endpoint.endswith("/v1/traces") else endpoint


def _parse_headers(text: str) -> dict[str, str]:
    headers: dict[str, str] = {}
    items = text.split(",")
    for number, item in enumerate(items, start=1):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            # never quote the item: it may be a credential missing its '=' ("Authorization Bearer ...")
            raise ConfigError(
                f"OTEL_EXPORTER_OTLP_HEADERS: expected key=value pairs; item {number} of {len(items)} "
                f"({len(item)} characters, not shown: it may hold a secret) has no key before an '='"
            )
        headers[key.strip()] = value.strip()
    return headers


class ObserveConfig(BaseModel):
    """Destinations and limits of the exporter.

    Attributes:
        otlp_endpoint: full OTLP/HTTP traces URL (``http://host:4318/v1/traces``) of any backend;
            ``None`` for none.
        otlp_headers: HTTP headers sent with every OTLP export (auth tokens); left out of ``repr``.
        langfuse_public_key: Langfuse project public key (``pk-lf-...``); with the secret key it
            turns the Langfuse destination on.
        langfuse_secret_key: Langfuse project secret key (``sk-lf-...``), a ``SecretStr``
            (``repr`` and validation errors show ``**********``; ``.get_secret_value()`` reads it).

    Validation errors never echo the values given (``hide_input_in_errors``), so a typo in one
    setting does not print the keys passed beside it.
        langfuse_base_url: Langfuse server, e.g. ``https://cloud.langfuse.com``,
            ``https://us.cloud.langfuse.com`` or your self-hosted ``http://langfuse:3000``.
        use_langfuse_sdk: ``None`` (default): use the ``langfuse`` package when it is installed;
            ``False``: plain OTLP to Langfuse (scores only as span attributes); ``True``: require it.
        service_name: the OTel resource's ``service.name``.
        project: optional project name, sent as the resource attribute
            ``openinference.project.name`` (Phoenix files traces under it).
        run: name of the training run; labels train-step traces, and namespaces trace/span ids
            (ids derive from it and the trajectory id, so later scores find their trace).
        export_timeout_s: seconds one export (with the exporter's own retries) may take before
            its batch is dropped with a warning; exports run on a background thread.
        max_queue_size: spans waiting for export beyond this are dropped (never blocks the caller).
        schedule_delay_s: how often the background thread sends a batch.
        metrics_path: JSON Lines metrics history written by ``log_train_metrics``/``log_rollouts``;
            ``None`` for none.

    Experiment trackers (W&B, Trackio) are not configured here: see
    :func:`~art_adapters.observe.trackers_from_env`.
    """

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    otlp_endpoint: str | None = None
    otlp_headers: dict[str, str] = Field(default_factory=dict, repr=False)
    langfuse_public_key: str | None = None
    langfuse_secret_key: SecretStr | None = None
    langfuse_base_url: str = DEFAULT_LANGFUSE_URL
    use_langfuse_sdk: bool | None = None
    service_name: str = "art-adapters"
    project: str | None = None
    run: str = "run"
    export_timeout_s: Annotated[float, Field(gt=0, le=300)] = 5.0
    max_queue_size: Annotated[int, Field(ge=1)] = 4096
    schedule_delay_s: Annotated[float, Field(gt=0, le=60)] = 0.5
    metrics_path: Path | None = None

    @model_validator(mode="before")
    @classmethod
    def _retired(cls, data: object) -> object:
        if isinstance(data, Mapping) and "wandb" in data:
            raise ConfigError(
                "ObserveConfig(wandb=...) is gone: W&B (and Trackio) are trackers now, on when WANDB_API_KEY "
                "or WANDB_MODE is set; pass Observer(trackers=trackers_from_env(...)) to choose them in code"
            )
        return data

    @model_validator(mode="after")
    def _check(self) -> ObserveConfig:
        if bool(self.langfuse_public_key) != bool(self.langfuse_secret_key):
            raise ConfigError(
                "Langfuse needs both keys: set LANGFUSE_PUBLIC_KEY and LANGFUSE_SECRET_KEY "
                "(or pass langfuse_public_key= and langfuse_secret_key=)"
            )
        for name in ("otlp_endpoint", "langfuse_base_url"):
            value = getattr(self, name)
            if value is not None and not value.startswith(("http://", "https://")):
                raise ConfigError(f"{name} must be an http(s) URL, got {redact_url(value)!r}")
        return self

    @property
    def langfuse(self) -> bool:
        """Whether the Langfuse destination is on."""
        return bool(self.langfuse_public_key and self.langfuse_secret_key)

    @property
    def enabled(self) -> bool:
        """Whether any span destination is configured."""
        return self.langfuse or self.otlp_endpoint is not None

    def langfuse_otlp_url(self, environ: Mapping[str, str] | None = None) -> str:
        """The Langfuse OTLP traces URL (honours ``LANGFUSE_OTEL_TRACES_EXPORT_PATH`` like the SDK)."""
        environ = os.environ if environ is None else environ
        path = environ.get("LANGFUSE_OTEL_TRACES_EXPORT_PATH")
        base = self.langfuse_base_url.rstrip("/")
        return f"{base}/{path.lstrip('/')}" if path else f"{base}/api/public/otel/v1/traces"

    def langfuse_headers(self) -> dict[str, str]:
        """The headers Langfuse's OTLP endpoint expects of a direct exporter: basic auth and
        ``x-langfuse-ingestion-version: 4`` (Langfuse v4's real-time ingestion path; its SDK sends it too)."""
        secret = self.langfuse_secret_key.get_secret_value() if self.langfuse_secret_key else ""
        token = base64.b64encode(f"{self.langfuse_public_key}:{secret}".encode()).decode()
        return {"Authorization": f"Basic {token}", LANGFUSE_INGESTION_VERSION_HEADER: "4"}

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: object) -> ObserveConfig:
        """A config from the environment variables; ``overrides`` win.

        Destinations, any combination:

        * **Langfuse**: ``LANGFUSE_PUBLIC_KEY`` + ``LANGFUSE_SECRET_KEY`` (+ ``LANGFUSE_BASE_URL``, or
          the older ``LANGFUSE_HOST``; default ``https://cloud.langfuse.com``). Spans go to its OTLP
          endpoint ``{base_url}/api/public/otel/v1/traces`` (or
          ``{base_url}/{LANGFUSE_OTEL_TRACES_EXPORT_PATH}``) with HTTP basic auth; with the
          ``langfuse`` package installed the SDK's own span processor is used and scores are also
          sent as Langfuse scores (``create_score``).
        * **Any OTLP/HTTP backend**: ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (the full traces URL) or
          ``OTEL_EXPORTER_OTLP_ENDPOINT`` (a base URL; ``/v1/traces`` is appended), with
          ``OTEL_EXPORTER_OTLP_HEADERS`` (``key=value,key2=value2``).
        """
        environ = os.environ if environ is None else environ
        values: dict[str, object] = {}
        protocol = environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or environ.get(
            "OTEL_EXPORTER_OTLP_PROTOCOL"
        )
        if protocol and protocol != "http/protobuf":
            logger.warning(
                "OTEL_EXPORTER_OTLP_PROTOCOL=%s: only http/protobuf is supported; using it", protocol
            )
        traces = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        base = environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        if traces:
            values["otlp_endpoint"] = _traces_url(traces, base=False)
        elif base:
            values["otlp_endpoint"] = _traces_url(base, base=True)
        headers = environ.get("OTEL_EXPORTER_OTLP_TRACES_HEADERS") or environ.get(
            "OTEL_EXPORTER_OTLP_HEADERS"
        )
        if headers:
            values["otlp_headers"] = _parse_headers(headers)
        if environ.get("LANGFUSE_PUBLIC_KEY") or environ.get("LANGFUSE_SECRET_KEY"):
            values["langfuse_public_key"] = environ.get("LANGFUSE_PUBLIC_KEY") or None
            values["langfuse_secret_key"] = environ.get("LANGFUSE_SECRET_KEY") or None
        url = environ.get("LANGFUSE_BASE_URL") or environ.get("LANGFUSE_HOST")
        if url:
            values["langfuse_base_url"] = url
        values.update(overrides)
        if isinstance(values.get("otlp_endpoint"), str) and "otlp_endpoint" in overrides:
            values["otlp_endpoint"] = _traces_url(str(values["otlp_endpoint"]), base=True)
        try:
            return cls(**values)  # type: ignore[arg-type]
        except ConfigError:
            raise
        except ValueError as exc:
            raise ConfigError(f"observability settings: {exc}") from exc
