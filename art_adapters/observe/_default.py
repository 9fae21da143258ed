"""The default observer (built from the environment on first use) and how ``run_groups`` finds it."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from art_adapters._trajectory import TrajectoryGroup
from art_adapters.observe._config import ObserveConfig
from art_adapters.observe._observer import Observer

__all__ = [
    "RolloutTracing",
    "configure",
    "configure_langfuse",
    "get_observer",
    "log_rollouts",
    "log_scores",
    "log_train_metrics",
]

_default: Observer | None = None
_default_lock = threading.Lock()


def configure(**settings: Any) -> Observer:
    """Build the default :class:`Observer` from the environment plus ``settings`` (``ObserveConfig`` fields).

    The environment variables are ``LANGFUSE_PUBLIC_KEY`` / ``LANGFUSE_SECRET_KEY`` /
    ``LANGFUSE_BASE_URL`` (or ``LANGFUSE_HOST``), ``OTEL_EXPORTER_OTLP_ENDPOINT`` /
    ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_HEADERS``, overridden by
    ``settings``. With nothing configured the observer is disabled (off by default). The
    module-level :func:`log_rollouts`, :func:`log_scores` and :func:`log_train_metrics` use the
    default observer (created from the environment on first use).

    Replaces (and shuts down) a previous default observer. Extra keyword arguments
    ``span_processors`` / ``span_exporter`` / ``trackers`` go to :class:`Observer`.

    Raises:
        ConfigError: a setting is invalid (the message names it).
    """
    global _default
    extra = {k: settings.pop(k) for k in ("span_processors", "span_exporter", "trackers") if k in settings}
    observer = Observer(ObserveConfig.from_env(**settings), **extra)
    with _default_lock:
        previous, _default = _default, observer
    if previous is not None:
        previous.shutdown()
    return observer


def configure_langfuse(
    public_key: str, secret_key: str, base_url: str = "https://cloud.langfuse.com", **settings: Any
) -> Observer:
    """Turn Langfuse on with these keys (default: Cloud EU; or the US region, or self-hosted)."""
    return configure(
        langfuse_public_key=public_key, langfuse_secret_key=secret_key, langfuse_base_url=base_url, **settings
    )


def get_observer() -> Observer:
    """The default observer (built from the environment on first use; disabled when nothing is set)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Observer(ObserveConfig.from_env())
        return _default


def log_rollouts(groups: Iterable[TrajectoryGroup], **kwargs: Any) -> list[str]:
    """:meth:`Observer.log_rollouts` on the default observer."""
    return get_observer().log_rollouts(groups, **kwargs)


def log_scores(group: TrajectoryGroup) -> int:
    """:meth:`Observer.log_scores` on the default observer."""
    return get_observer().log_scores(group)


def log_train_metrics(step: int, metrics: Mapping[str, Any], **kwargs: Any) -> None:
    """:meth:`Observer.log_train_metrics` on the default observer."""
    get_observer().log_train_metrics(step, metrics, **kwargs)


@dataclass(frozen=True)
class RolloutTracing:
    """How :func:`~art_adapters.run_groups` traces its rollouts live.

    Attributes:
        observer: where the spans go; ``None``: the default observer
            (:func:`art_adapters.observe.get_observer`, configured from the environment, disabled
            when no Langfuse or OTLP variable is set, in which case nothing is traced).
        step: the training step the rollouts sample from (``art_adapters.step``, tag ``step:N``).
        policy: the served policy version, ``name@step`` (``art_adapters.policy.version``).
        split: ``"train"``, ``"val"``... (``art_adapters.split``, tag ``split:...``).
        keep_open: keep each successful rollout's span open after ``run_groups`` returns, until
            :meth:`~art_adapters.observe.Observer.log_rollouts` sets its reward and ends it (what
            :func:`~art_adapters.train_loop` does after scoring); the span's end time stays the
            rollout's. ``False``: the span ends with the rollout; scores logged later are child
            spans of it and Langfuse scores on its trace.
        agent_name: the rollout span's ``gen_ai.agent.name``.
    """

    observer: Observer | None = None
    step: int | None = None
    policy: str | None = None
    split: str = "train"
    keep_open: bool = False
    agent_name: str = "agent"

    def resolve(self) -> Observer:
        """The observer to use (the default one when none was given)."""
        if self.observer is not None:
            return self.observer
        return get_observer()
