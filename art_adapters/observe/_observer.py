"""The :class:`Observer`: rollouts, RULER scores and training metrics out to Langfuse and any OTLP backend.

Exports never break or slow a rollout: spans go to a background batch processor, bounded, and a batch
that cannot be sent is dropped with a warning. The OTLP exporter and the Langfuse SDK are imported
only when used.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Self

from art_adapters._errors import ConfigError
from art_adapters._redact import redact_url
from art_adapters._trajectory import TrajectoryGroup
from art_adapters.observe._config import ObserveConfig
from art_adapters.observe._live import RolloutSpan
from art_adapters.observe._metrics import MetricsHistory, group_metrics
from art_adapters.observe._scores import group_judges, judge_metadata, score_records
from art_adapters.observe._spans import (
    RolloutContext,
    SpanSpec,
    failed_trajectory,
    group_context,
    score_spans,
    train_step_spans,
    trajectory_span_ids,
    trajectory_spans,
)
from art_adapters.observe._trackers import Tracker, guarded

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter

    from art_adapters.observe._guarded_export import GuardedExporter

__all__ = ["Observer"]

logger = logging.getLogger(__name__)

_SCOPE = "art_adapters.observe"


class Observer:
    """Exports rollouts, scores and training metrics.

    Call it from a training loop (or anywhere)::

        from art_adapters import observe

        obs = observe.configure()                       # from LANGFUSE_* / OTEL_EXPORTER_OTLP_* env vars
        # or observe.configure_langfuse(public_key=..., secret_key=..., base_url=...)
        # or observe.configure(otlp_endpoint="http://127.0.0.1:6006", metrics_path="runs/x/metrics.jsonl")
        groups = await aa.run_groups(rollout, scenarios, n=4)
        groups = await aa.ruler_score_groups(groups, judge=judge)
        obs.log_rollouts(groups, step=3, model="agent@3")  # one trace per rollout, scores included
        obs.log_train_metrics(3, result.metrics)           # a train-step trace + metrics file + W&B
        obs.shutdown()                                      # flush (bounded) at the end

    Every ``log_*`` call only builds spans and hands them to an OpenTelemetry
    ``BatchSpanProcessor``: the export happens on its thread, bounded by
    ``export_timeout_s`` (the OTLP exporter's retries included); a batch that cannot be
    sent is dropped with one warning (counted in :attr:`dropped_spans`). So an
    unreachable endpoint never breaks or slows a rollout. When nothing is configured the
    observer is disabled and every call returns at once (metrics files are still written
    if ``metrics_path`` is set).

    Args:
        config: destinations and limits (default: :meth:`ObserveConfig.from_env`).
        span_processors: extra OpenTelemetry span processors to add (e.g. a
            ``SimpleSpanProcessor`` with your own exporter, or an
            :class:`~art_adapters.TrajectorySpanProcessor`); they see every span.
        span_exporter: an exporter to use *instead of* the OTLP one for ``otlp_endpoint``
            (batched and guarded the same way), e.g. an OTLP JSON file exporter.
        trackers: experiment trackers (W&B, Trackio: :func:`trackers_from_env`) that
            :meth:`log_train_metrics` sends each row to.

    Raises:
        ConfigError: ``use_langfuse_sdk=True`` but the package is missing.
    """

    def __init__(
        self,
        config: ObserveConfig | None = None,
        *,
        span_processors: Iterable[SpanProcessor] = (),
        span_exporter: SpanExporter | None = None,
        trackers: Sequence[Tracker] = (),
    ) -> None:
        self.config = config if config is not None else ObserveConfig.from_env()
        self.trackers: list[Tracker] = [guarded(t) for t in trackers]
        self.exported_spans = 0
        self._dropped_count = 0
        self._exporters: list[Any] = []
        self._warned: set[str] = set()
        self._lock = threading.Lock()
        self._closed = False
        self._langfuse: Any = None
        self._score_sink: Any = None  # where scores go: the SDK client, or LangfuseScoreClient
        self._provider: TracerProvider | None = None
        self._ids: Any = None
        self._open: dict[str, RolloutSpan] = {}
        self.history = MetricsHistory(self.config.metrics_path) if self.config.metrics_path else None
        processors = list(span_processors)
        if self.config.enabled or processors or span_exporter is not None:
            self._build_provider(processors, span_exporter)

    # -- setup --

    @property
    def enabled(self) -> bool:
        """Whether spans are exported anywhere."""
        return self._provider is not None and not self._closed

    @property
    def dropped_spans(self) -> int:
        """Spans dropped because their export failed or timed out."""
        return self._dropped_count

    @property
    def langfuse_client(self) -> Any:
        """The Langfuse SDK client in use, or ``None`` (plain OTLP or Langfuse off)."""
        return self._langfuse

    def _build_provider(self, processors: list[SpanProcessor], span_exporter: SpanExporter | None) -> None:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        from art_adapters.observe._ids import ChosenIds

        cfg = self.config
        attributes: dict[str, str] = {"service.name": cfg.service_name}
        if cfg.project:
            attributes["openinference.project.name"] = cfg.project
        self._ids = ChosenIds()
        provider = TracerProvider(resource=Resource.create(attributes), id_generator=self._ids)

        def batch(exporter: SpanExporter, destination: str) -> BatchSpanProcessor:
            return BatchSpanProcessor(
                self._guarded(exporter, destination),
                max_queue_size=cfg.max_queue_size,
                schedule_delay_millis=cfg.schedule_delay_s * 1000,
                export_timeout_millis=cfg.export_timeout_s * 1000,
            )

        if span_exporter is not None:
            provider.add_span_processor(batch(span_exporter, type(span_exporter).__name__))
        elif cfg.otlp_endpoint is not None:
            provider.add_span_processor(
                batch(self._otlp_exporter(cfg.otlp_endpoint, cfg.otlp_headers), cfg.otlp_endpoint)
            )
        if cfg.langfuse:
            self._add_langfuse(provider, batch)
        for processor in processors:
            provider.add_span_processor(processor)
        self._provider = provider
        self._tracer = provider.get_tracer(_SCOPE)

    def _guarded(self, exporter: SpanExporter, destination: str) -> GuardedExporter:
        """``exporter`` guarded (:class:`GuardedExporter`), counting into this observer; kept to shut down."""
        from art_adapters.observe._guarded_export import GuardedExporter  # the OTel SDK, on first use

        def exported(count: int) -> None:
            self.exported_spans += count

        guarded = GuardedExporter(exporter, destination, self._dropped, exported)
        self._exporters.append(guarded)
        return guarded

    def _otlp_exporter(self, endpoint: str, headers: Mapping[str, str]) -> SpanExporter:
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError as exc:
            raise ConfigError(
                "exporting to an OTLP endpoint needs opentelemetry-exporter-otlp-proto-http: "
                "pip install 'art-adapters[observe]'"
            ) from exc
        return OTLPSpanExporter(
            endpoint=endpoint, headers=dict(headers), timeout=self.config.export_timeout_s
        )

    def _langfuse_sdk(self) -> Any:
        """The ``langfuse`` module, or ``None`` (not wanted, or not installed and not required)."""
        if self.config.use_langfuse_sdk is False:
            return None
        try:
            import langfuse
        except ImportError as exc:
            if self.config.use_langfuse_sdk:
                raise ConfigError(
                    "use_langfuse_sdk=True but the langfuse package is missing: "
                    "pip install 'art-adapters[langfuse]'"
                ) from exc
            return None
        return langfuse

    def _add_langfuse(self, provider: TracerProvider, batch: Any) -> None:
        """Traces to Langfuse: through its SDK on our provider when it can, else over plain OTLP."""
        cfg = self.config
        sdk = self._langfuse_sdk()
        if sdk is None:
            url = cfg.langfuse_otlp_url()
            provider.add_span_processor(batch(self._otlp_exporter(url, cfg.langfuse_headers()), url))
            logger.info("observe: Langfuse over plain OTLP at %s (scores as span attributes)", url)
            return
        secret_key = cfg.langfuse_secret_key.get_secret_value() if cfg.langfuse_secret_key else None
        try:
            self._langfuse = sdk.Langfuse(
                public_key=cfg.langfuse_public_key,
                secret_key=secret_key,
                base_url=cfg.langfuse_base_url,
                tracer_provider=provider,
                should_export_span=lambda span: True,  # our provider carries only our spans
                timeout=max(1, int(cfg.export_timeout_s)),
            )
        except Exception as exc:  # an SDK that will not start must not stop the run
            if cfg.use_langfuse_sdk:
                raise ConfigError(f"the Langfuse SDK did not start: {type(exc).__name__}: {exc}") from exc
            url = cfg.langfuse_otlp_url()
            provider.add_span_processor(batch(self._otlp_exporter(url, cfg.langfuse_headers()), url))
            logger.warning(
                "observe: the Langfuse SDK did not start (%s); spans over plain OTLP to %s", exc, url
            )
            return
        self._score_sink = self._langfuse
        resources = getattr(self._langfuse, "_resources", None)
        if getattr(resources, "tracer_provider", provider) is not provider:
            self._beside_an_earlier_client(resources, provider, batch, secret_key)
            return
        logger.info("observe: Langfuse SDK at %s", cfg.langfuse_base_url)

    def _beside_an_earlier_client(
        self, resources: Any, provider: TracerProvider, batch: Any, secret_key: str | None
    ) -> None:
        """The SDK keeps one client per public key for the whole process: an earlier one was returned,
        with its own provider and host, maybe shut down (then it drops every score: langfuse-python#1799).
        Spans go over plain OTLP; scores through the SDK's API client (LangfuseAPI) when that client
        cannot carry them to our host."""
        cfg = self.config
        url = cfg.langfuse_otlp_url()
        provider.add_span_processor(batch(self._otlp_exporter(url, cfg.langfuse_headers()), url))
        their_host = str(getattr(resources, "base_url", "")).rstrip("/")
        same_host = their_host == cfg.langfuse_base_url.rstrip("/")
        if getattr(resources, "_shutdown", False) or not same_host:
            from art_adapters.observe._langfuse_api import LangfuseScoreClient

            self._score_sink = LangfuseScoreClient(
                cfg.langfuse_public_key or "",
                secret_key or "",
                cfg.langfuse_base_url,
                timeout_s=cfg.export_timeout_s,
            )
        logger.info(
            "observe: a Langfuse client for this key already existed; spans over plain OTLP to %s%s",
            url,
            "" if self._score_sink is self._langfuse else ", scores through the SDK's API client",
        )

    def where(self) -> list[str]:
        """One line per trace destination saying where the traces can be seen (empty when disabled)."""
        if not self.enabled:
            return []
        cfg = self.config
        lines = []
        if cfg.langfuse:
            lines.append(
                f"traces: Langfuse at {cfg.langfuse_base_url} (one trace per rollout; filter by the tags "
                "step:N, group:ID, scenario:ID, or by session = group id)"
            )
        if cfg.otlp_endpoint is not None:
            lines.append(f"traces: OTLP endpoint {redact_url(cfg.otlp_endpoint)} (one trace per rollout)")
        return lines

    def _dropped(self, count: int, destination: str, reason: str) -> None:
        with self._lock:
            self._dropped_count += count
            first = destination not in self._warned
            self._warned.add(destination)
        if first:
            logger.warning(
                "observe: could not export %d span(s) to %s (%s); dropped. Is the endpoint up? "
                "(later failures to it are counted in Observer.dropped_spans, not logged)",
                count,
                destination,
                reason,
            )

    # -- emitting --

    def emit_spans(self, specs: Sequence[SpanSpec]) -> None:
        """Send the finished spans of one trace (rollouts, scores, steps, the loop's hacking warnings).

        ``specs`` are the spans of one trace, parents before children; the first is its root when
        its ``parent_id`` is ``None``, otherwise they join an existing trace under ``parent_id``.
        Nothing happens when the observer exports nowhere.
        """
        if not self.enabled or not specs:
            return
        from opentelemetry import context as otel_context
        from opentelemetry import trace
        from opentelemetry.trace import NonRecordingSpan, SpanContext, Status, StatusCode, TraceFlags

        with self._lock:
            root_spec = specs[0] if specs[0].parent_id is None else None
            root = None
            if root_spec is not None:
                self._ids.choose(root_spec.trace_id, root_spec.span_id)
                root = self._tracer.start_span(
                    root_spec.name,
                    context=otel_context.Context(),
                    attributes=root_spec.attributes,
                    start_time=root_spec.start_ns,
                )
            for spec in specs[1 if root is not None else 0 :]:
                if root is not None and spec.parent_id == root_spec.span_id:  # type: ignore[union-attr]
                    parent: Any = root
                else:
                    parent = NonRecordingSpan(
                        SpanContext(spec.trace_id, spec.parent_id or 0, False, TraceFlags(TraceFlags.SAMPLED))
                    )
                self._ids.choose(None, spec.span_id)  # a child: its trace id comes from its parent
                span = self._tracer.start_span(
                    spec.name,
                    context=trace.set_span_in_context(parent, otel_context.Context()),
                    attributes=spec.attributes,
                    start_time=spec.start_ns,
                )
                for name, attributes in spec.events:
                    span.add_event(name, attributes, timestamp=spec.end_ns)
                if spec.error is not None:
                    span.set_status(Status(StatusCode.ERROR, spec.error))
                span.end(end_time=spec.end_ns)
            if root is not None and root_spec is not None:
                if root_spec.error is not None:
                    root.set_status(Status(StatusCode.ERROR, root_spec.error))
                root.end(end_time=root_spec.end_ns)

    def start_rollout(self, context: RolloutContext, rollout_index: int) -> RolloutSpan | None:
        """Start the live span of one rollout (``None`` when disabled); see :class:`RolloutTracing`."""
        if not self.enabled:
            return None
        return RolloutSpan(self, self._tracer, context, rollout_index)

    def _hold(self, trajectory_id: str, span: RolloutSpan) -> None:
        with self._lock:
            self._open[trajectory_id] = span

    def _release(self, trajectory_id: str) -> RolloutSpan | None:
        with self._lock:
            return self._open.pop(trajectory_id, None)

    def end_open_rollouts(self) -> int:
        """End the rollout spans still kept open (without scores); returns how many."""
        with self._lock:
            spans, self._open = list(self._open.values()), {}
        for span in spans:
            span.end()
        return len(spans)

    # shape: a public method: its keywords label the logged rollouts (step, split, scores...)
    def log_rollouts(
        self,
        groups: Iterable[TrajectoryGroup],
        *,
        step: int | None = None,
        model: str | None = None,
        split: str = "train",
        scores: bool = True,
        agent_name: str = "agent",
        tags: Sequence[str] = (),
        failures: bool = True,
        span_attributes: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> list[str]:
        """Export every rollout of ``groups`` as one trace; returns the successful ones' trace ids (32 hex).

        A rollout traced live by :func:`~art_adapters.run_groups` already has its trace: only
        its scores are added (evaluator child spans, Langfuse scores), and a rollout span kept
        open (:class:`RolloutTracing` ``keep_open``) gets its reward and explanation and ends.
        Other rollouts (run with tracing off, or built by hand) are exported whole, after the fact.

        Args:
            groups: the groups (from :func:`~art_adapters.run_groups`, scored or not).
            step: the training step the rollouts were sampled at (tag ``step:N``, metadata).
            model: the served model, e.g. ``"agent@3"`` (generations' model name); default
                ``trajectory.metadata["model"]`` or ``"unknown"``.
            split: ``"train"``, ``"val"``... (tag ``split:...``).
            scores: also export the scores the trajectories already carry (RULER, reward),
                as evaluator spans and, with the Langfuse SDK, Langfuse scores.
            failures: also export each failed rollout (``group.exceptions``) as a trace with an
                error status and the tag ``failed``: what it captured before failing, or an
                empty agent span carrying the exception.
            agent_name: the agent observation's name.
            tags: extra trace tags.
            span_attributes: trajectory id -> more attributes for its rollout span kept open
                (the Langfuse experiment run of a held-out evaluation).

        Also appends one ``split`` row (reward mean/std, exception rate, tokens, timings) to
        the metrics history when ``metrics_path`` is set and ``step`` is given. Never raises
        for export problems.
        """
        groups = list(groups)
        trace_ids: list[str] = []
        for group in groups:
            context = group_context(
                group,
                step=step,
                model=model,
                split=split,
                agent_name=agent_name,
                extra_tags=tuple(tags),
                namespace=self.config.run,
            )
            for trajectory in group.trajectories:
                trace_id, _ = trajectory_span_ids(trajectory, self.config.run)
                trace_ids.append(f"{trace_id:032x}")
                live = "rollout_span_id" in trajectory.metadata
                held = self._release(trajectory.id)
                if held is not None:
                    held.end(trajectory if scores else None, (span_attributes or {}).get(trajectory.id))
                if not self.enabled:
                    continue
                if not live:  # not traced while it ran: the whole rollout as a trace now
                    self.emit_spans(trajectory_spans(trajectory, context, include_scores=scores))
                elif scores:  # traced live: only the scores join its trace
                    self.emit_spans(score_spans(trajectory, namespace=self.config.run, judges=context.judges))
                if scores:
                    self._langfuse_scores(trajectory, context.judges)
            if self.enabled and failures and group.metadata.get("traced") != "live":
                failed_context = replace(context, extra_tags=(*context.extra_tags, "failed"))
                for failure in group.exceptions:
                    self.emit_spans(trajectory_spans(failed_trajectory(group, failure), failed_context))
        if self.history is not None and step is not None:
            self.history.append(step, group_metrics(groups), split=split)
        return trace_ids

    def log_scores(self, group: TrajectoryGroup) -> int:
        """Export the scores of an already-logged group (after RULER); returns how many were sent.

        Each score is an evaluator span in the rollout's trace (value, explanation as
        ``gen_ai.evaluation.explanation`` and a ``gen_ai.evaluation.result`` event) and,
        with the Langfuse SDK, a Langfuse score with the explanation as its comment; a score a
        judge gave names the group's judges (``GroupJudgement.judges``: span
        attributes ``art_adapters.judge.*``, Langfuse score metadata ``judge_ids``, ``judges``).
        """
        sent = 0
        if not self.enabled:
            return sent
        now = time.time_ns()
        judges = group_judges(group)
        for trajectory in group.trajectories:
            specs = score_spans(trajectory, at_ns=now, namespace=self.config.run, judges=judges)
            self.emit_spans(specs)
            self._langfuse_scores(trajectory, judges)
            sent += len(specs)
        return sent

    def _langfuse_scores(self, trajectory: Any, judges: Sequence[Mapping[str, Any]] = ()) -> int:
        if self._score_sink is None:
            return 0
        trace_id, root_id = trajectory_span_ids(trajectory, self.config.run)
        sent = 0
        for score in score_records(trajectory, judges):
            try:
                self._score_sink.create_score(
                    name=score.name,
                    value=score.value,
                    trace_id=f"{trace_id:032x}",
                    observation_id=f"{root_id:016x}",
                    comment=score.comment,
                    data_type="NUMERIC",
                    metadata={"trajectory_id": trajectory.id, **judge_metadata(score.judges)},
                )
                sent += 1
            except Exception as exc:  # noqa: BLE001 - must not break the caller
                logger.warning(
                    "observe: Langfuse create_score failed (%s: %s); dropped", type(exc).__name__, exc
                )
        return sent

    def log_train_metrics(
        self,
        step: int,
        metrics: Mapping[str, Any],
        *,
        split: str = "train",
        duration_s: float | None = None,
        run: str | None = None,
    ) -> None:
        """Record a training step's metrics (loss, KL, grad norm, timings...).

        Goes to: a ``train_step N`` trace of the run ``run`` (default ``config.run``; attributes
        ``art_adapters.train.<name>``; with the Langfuse SDK also scores ``train/<name>`` on it),
        the metrics history (one row for ``step``/``split``) and the trackers (one row each).
        Non-numeric values are kept in the history only.
        """
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ConfigError(f"step must be an int >= 0, got {step!r}")
        if self.history is not None:
            self.history.append(step, dict(metrics), split=split)
        for tracker in self.trackers:
            tracker.log(step, metrics, split=split)
        if not self.enabled:
            return
        now = time.time_ns()
        duration = int(duration_s * 1e9) if duration_s else 1
        specs = train_step_spans(
            step, metrics, run=run or self.config.run, at_ns=now - duration, duration_ns=duration
        )
        self.emit_spans(specs)
        if self._score_sink is not None:
            trace_id = f"{specs[0].trace_id:032x}"
            for name, value in metrics.items():
                if _is_number(value):
                    try:
                        self._score_sink.create_score(
                            name=f"{split}/{name}", value=float(value), trace_id=trace_id, data_type="NUMERIC"
                        )
                    except Exception as exc:  # noqa: BLE001 - observability must never break the caller
                        logger.warning("observe: Langfuse create_score failed (%s)", exc)

    # -- lifecycle --

    def force_flush(self, timeout_s: float = 10.0) -> bool:
        """Send what is queued now; ``False`` if it did not finish within ``timeout_s``."""
        ok = True
        if self._provider is not None:
            ok = self._provider.force_flush(int(timeout_s * 1000))
        if self._score_sink is not None:
            try:
                self._score_sink.flush()
            except Exception as exc:  # noqa: BLE001 - observability must never break the caller
                logger.warning("observe: Langfuse flush failed (%s)", exc)
        return ok

    def shutdown(self, timeout_s: float = 10.0) -> None:
        """Flush (bounded by ``timeout_s``) and stop the exporters; idempotent."""
        if self._closed:
            return
        self.end_open_rollouts()
        for tracker in self.trackers:
            tracker.finish()
        for exporter in self._exporters:
            if exporter.down:  # a destination that is down is not waited for
                exporter.shutdown()
        self.force_flush(timeout_s)
        self._closed = True
        if self._provider is not None:
            self._provider.shutdown()
        # The SDK's client is shared by every Langfuse(...) with this key in the process, and a shut
        # down one drops every later score (langfuse-python#1799): it was flushed above and the SDK
        # shuts it down at exit. Our own REST score client is ours to close.
        if self._score_sink is not None and self._score_sink is not self._langfuse:
            try:
                self._score_sink.shutdown()
            except Exception as exc:  # noqa: BLE001 - observability must never break the caller
                logger.warning("observe: Langfuse shutdown failed (%s)", exc)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
