"""Observability: rollouts, RULER scores and training metrics to Langfuse and any OTLP backend; import; plots.

A training loop calls ``observe.configure(...)`` (env vars decide the destinations), then the
:class:`Observer`'s ``log_rollouts``, ``log_scores``, ``log_train_metrics`` and ``shutdown``: all cheap,
never raising for export problems. Traces import back with :func:`trajectories_from_otlp_json` /
:func:`trajectories_from_langfuse` (files) and :func:`trajectories_from_phoenix` /
:func:`trajectories_from_langfuse_api` (live servers); :class:`MetricsHistory`, :func:`group_metrics` and
:func:`plot_run` chart a run.
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from art_adapters._lazy import lazy_exports as _lazy_exports
from art_adapters.observe._config import ObserveConfig
from art_adapters.observe._default import (
    RolloutTracing,
    configure,
    configure_langfuse,
    get_observer,
    log_rollouts,
    log_scores,
    log_train_metrics,
)
from art_adapters.observe._live import RolloutSpan
from art_adapters.observe._metrics import METRICS_FILE, MetricsHistory, group_metrics
from art_adapters.observe._observer import Observer
from art_adapters.observe._plot import plot_run
from art_adapters.observe._times import parse_time
from art_adapters.observe._trackers import Tracker, trackers_from_env

if _TYPE_CHECKING:
    from art_adapters.observe._import_live import trajectories_from_langfuse_api, trajectories_from_phoenix
    from art_adapters.observe._importer import (
        trajectories_from_langfuse,
        trajectories_from_otlp_json,
        trajectories_from_spans,
    )
    from art_adapters.observe._otlp_json import OtlpJsonFileExporter, otlp_json_request

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
    "parse_time",
    "plot_run",
    "trackers_from_env",
    "trajectories_from_langfuse",
    "trajectories_from_langfuse_api",
    "trajectories_from_otlp_json",
    "trajectories_from_phoenix",
    "trajectories_from_spans",
]

# Names whose modules are imported on first access: they pull in the OpenTelemetry SDK, which the
# training loop (it imports this package for its metrics file) does not need until it exports.
__getattr__, __dir__ = _lazy_exports(
    __name__,
    {
        "._otlp_json": "OtlpJsonFileExporter otlp_json_request",
        "._importer": "trajectories_from_langfuse trajectories_from_otlp_json trajectories_from_spans",
        "._import_live": "trajectories_from_langfuse_api trajectories_from_phoenix",
    },
)
