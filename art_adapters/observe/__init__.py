"""Observability: rollouts, RULER scores and training metrics to Langfuse and any OTLP backend; import; plots.

The API a training loop calls (all cheap, never raising for export problems)::

    from art_adapters import observe

    obs = observe.configure(metrics_path=run_dir / "metrics.jsonl")   # env vars decide the destinations
    obs.log_rollouts(groups, step=step, model=f"{model.name}@{step}")  # traces + scores + metrics row
    obs.log_scores(group)                       # scores of a group logged before RULER ran
    obs.log_train_metrics(step, result.metrics) # train-step trace, metrics file, trackers
    obs.shutdown()

Traces import back with :func:`trajectories_from_otlp_json` / :func:`trajectories_from_langfuse`
(files) and :func:`trajectories_from_phoenix` / :func:`trajectories_from_langfuse_api` (live servers);
:class:`MetricsHistory`, :func:`group_metrics` and :func:`plot_run` chart a run.
"""

import importlib as _importlib
import threading as _threading
from collections.abc import Iterable as _Iterable
from collections.abc import Mapping as _Mapping
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

from art_adapters._trajectory import TrajectoryGroup as _TrajectoryGroup
from art_adapters.observe._config import ObserveConfig
from art_adapters.observe._live import RolloutSpan, RolloutTracing
from art_adapters.observe._metrics import METRICS_FILE, MetricsHistory, group_metrics
from art_adapters.observe._observer import Observer
from art_adapters.observe._plot import plot_run
from art_adapters.observe._trackers import Tracker, trackers_from_env

if _TYPE_CHECKING:
    from art_adapters.observe._import_live import trajectories_from_langfuse_api, trajectories_from_phoenix
    from art_adapters.observe._importer import (
        trajectories_from_langfuse,
        trajectories_from_otlp_json,
        trajectories_from_spans,
    )
    from art_adapters.observe._otlp_json import OtlpJsonFileExporter, otlp_json_request

# Names whose modules are imported on first access: they pull in the OpenTelemetry SDK, which the
# training loop (it imports this package for its metrics file) does not need until it exports.
_LAZY: dict[str, str] = {
    "OtlpJsonFileExporter": "._otlp_json",
    "otlp_json_request": "._otlp_json",
    "trajectories_from_langfuse": "._importer",
    "trajectories_from_langfuse_api": "._import_live",
    "trajectories_from_otlp_json": "._importer",
    "trajectories_from_phoenix": "._import_live",
    "trajectories_from_spans": "._importer",
}

__all__ = [
    "METRICS_FILE",
    "MetricsHistory",
    "ObserveConfig",
    "Observer",
    "OtlpJsonFileExporter",
    "RolloutSpan",
    "RolloutTracing",
    "Tracker",
    "configure",
    "configure_langfuse",
    "get_observer",
    "group_metrics",
    "log_rollouts",
    "log_scores",
    "log_train_metrics",
    "otlp_json_request",
    "plot_run",
    "trackers_from_env",
    "trajectories_from_langfuse",
    "trajectories_from_langfuse_api",
    "trajectories_from_otlp_json",
    "trajectories_from_phoenix",
    "trajectories_from_spans",
]

_default: Observer | None = None
_default_lock = _threading.Lock()


def configure(**settings: _Any) -> Observer:
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
    public_key: str, secret_key: str, base_url: str = "https://cloud.langfuse.com", **settings: _Any
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


def log_rollouts(groups: _Iterable[_TrajectoryGroup], **kwargs: _Any) -> list[str]:
    """:meth:`Observer.log_rollouts` on the default observer."""
    return get_observer().log_rollouts(groups, **kwargs)


def log_scores(group: _TrajectoryGroup) -> int:
    """:meth:`Observer.log_scores` on the default observer."""
    return get_observer().log_scores(group)


def log_train_metrics(step: int, metrics: _Mapping[str, _Any], **kwargs: _Any) -> None:
    """:meth:`Observer.log_train_metrics` on the default observer."""
    get_observer().log_train_metrics(step, metrics, **kwargs)


def __getattr__(name: str) -> _Any:
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_importlib.import_module(module_name, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
