"""What a training run sends out while it runs: live rollout traces, scores, step rows to trackers.

:class:`LoopTelemetry` is the one place :func:`~art_adapters.train_loop` talks to observability:
the observer (Langfuse / OTLP, from the environment by default) and the experiment trackers (W&B,
Trackio, from the environment). With nothing configured every call is a no-op.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._trajectory import TrajectoryGroup
from .observe import Observer, RolloutTracing, get_observer

if TYPE_CHECKING:
    from ._hacking import HackingWarning

__all__ = ["LoopTelemetry"]

logger = logging.getLogger(__name__)

#: Seconds the end of a run may wait for its last spans to leave (an endpoint that is down is not waited on).
FLUSH_TIMEOUT_S = 5.0


@dataclass
class LoopTelemetry:
    """The observer and trackers of one training run.

    Attributes:
        observer: where rollout traces, scores and train-step traces go.
        trackers: experiment trackers receiving one row per step and split.
        run: the run's name (labels train-step traces and tracker runs).
        model_name: the policy's name; its version at step N is ``f"{model_name}@{N}"``.
        project: the model's project; with Langfuse, held-out evaluations are experiment runs
            ``model_name@N`` on the dataset ``project/model_name`` of the validation scenarios.
    """

    observer: Observer
    trackers: Sequence[Any] = field(default_factory=list)
    run: str = "run"
    model_name: str = "model"
    project: str = "default"
    _datasets: Any = field(default=None, repr=False)

    @classmethod
    def default(cls) -> LoopTelemetry:
        """The default observer (from the environment) and no trackers: for a loop step called alone."""
        return cls(observer=get_observer())

    @classmethod
    def start(
        cls,
        *,
        model_name: str,
        project: str,
        run: str,
        observer: Observer | None,
        config: Mapping[str, Any],
        directory: Path | None = None,
    ) -> LoopTelemetry:
        """The telemetry of a run: ``observer`` (default: from the environment) and the trackers the
        environment configures (:func:`art_adapters.observe.trackers_from_env`; W&B writes under
        ``directory`` unless ``WANDB_DIR`` says otherwise)."""
        from .observe import trackers_from_env

        telemetry = cls(
            observer=observer if observer is not None else get_observer(),
            trackers=trackers_from_env(project=project, run=run, config=config, directory=directory),
            run=run,
            model_name=model_name,
            project=project,
        )
        for line in telemetry.where():
            logger.info("%s", line)
        return telemetry

    def where(self) -> list[str]:
        """One line per destination saying where the run can be seen (empty when none)."""
        return [*self.observer.where(), *(f"{t.name}: {t.where}" for t in self.trackers)]

    def tracing(self, step: int, split: str) -> RolloutTracing:
        """How the rollouts of ``step`` are traced: live, labelled, kept open until scored."""
        return RolloutTracing(
            observer=self.observer, step=step, policy=f"{self.model_name}@{step}", split=split, keep_open=True
        )

    def scored(self, groups: Sequence[TrajectoryGroup], *, step: int, split: str) -> None:
        """Scores onto the rollouts' traces; ends their rollout spans. With Langfuse, held-out
        (``val``) rollouts also become the items of experiment run ``model_name@step``."""
        policy = f"{self.model_name}@{step}"
        extra = self._experiment(groups, policy) if split == "val" else None
        self.observer.log_rollouts(groups, step=step, model=policy, split=split, span_attributes=extra)

    def _experiment(self, groups: Sequence[TrajectoryGroup], run_name: str) -> Mapping[str, Any] | None:
        cfg = self.observer.config
        if not (self.observer.enabled and cfg.langfuse):
            return None
        try:
            if self._datasets is None:
                from .observe._langfuse_datasets import LangfuseDatasets

                secret = cfg.langfuse_secret_key.get_secret_value() if cfg.langfuse_secret_key else ""
                self._datasets = LangfuseDatasets(
                    cfg.langfuse_public_key or "", secret, cfg.langfuse_base_url,
                    timeout_s=cfg.export_timeout_s,
                )  # fmt: skip
            return self._datasets.run_attributes(f"{self.project}/{self.model_name}", run_name, groups)
        except Exception as exc:  # noqa: BLE001 - an experiment run is never worth a failed evaluation
            logger.warning("observe: held-out run %s is not a Langfuse experiment run (%s: %s)", run_name,
                           type(exc).__name__, exc)  # fmt: skip
            return None

    def row(self, step: int, row: Mapping[str, Any], *, split: str) -> None:
        """One metrics row (a step's rollouts and training, or an evaluation) to every tracker;
        a ``train`` row is also a train-step trace."""
        for tracker in self.trackers:
            tracker.log(step, row, split=split)
        if split == "train":
            self.observer.log_train_metrics(step, row, run=self.run)

    def hacking(self, step: int, warnings: Sequence[HackingWarning]) -> None:
        """Reward-hacking warnings as a trace of their own, tagged ``hacking_warning``: a span
        ``hacking_warning N`` whose attribute ``art_adapters.hacking_warning`` lists the signals, with
        a child span per warning holding an ``art_adapters.hacking_warning`` event (signal, message,
        check, values). The step's train-step trace carries them too (its row's ``hacking_signals``)."""
        if not warnings or not self.observer.enabled:
            return
        from .observe._spans import SpanSpec, train_step_spans

        # ids of their own (the train-step span's scheme, under another name), never the train step's
        root = train_step_spans(step, {}, run=f"{self.run}/hacking", at_ns=time.time_ns())[0]
        signals = ",".join(dict.fromkeys(w.signal for w in warnings))
        common = {"art_adapters.step": step, "art_adapters.run": self.run}
        specs = [
            SpanSpec(
                f"hacking_warning {step}", root.trace_id, root.span_id, None, root.start_ns, root.end_ns,
                {
                    **common,
                    "art_adapters.hacking_warning": signals,
                    "langfuse.observation.type": "span",
                    "langfuse.observation.level": "WARNING",
                    "langfuse.trace.name": f"hacking warning step {step}",
                    "langfuse.trace.tags": ["hacking_warning", f"step:{step}", f"run:{self.run}"],
                    "langfuse.observation.output": json.dumps([w.model_dump(mode="json") for w in warnings]),
                },
            )
        ]  # fmt: skip
        for index, w in enumerate(warnings, start=1):
            digest = hashlib.sha256(f"{root.trace_id}:{root.span_id}:{index}".encode()).digest()
            event = {
                "art_adapters.hacking.signal": w.signal,
                "art_adapters.hacking.message": w.message,
                "art_adapters.hacking.check": w.check,
                **{f"art_adapters.hacking.{k}": float(v) for k, v in w.values.items()},
            }
            attributes = {
                **common, "art_adapters.hacking_warning": w.signal, "langfuse.observation.level": "WARNING"
            }  # fmt: skip
            span_id = int.from_bytes(digest[:8], "big") or 1
            specs.append(SpanSpec(
                f"hacking_warning {w.signal}", root.trace_id, span_id, root.span_id, root.start_ns,
                root.end_ns, attributes, [("art_adapters.hacking_warning", event)],
            ))  # fmt: skip
        self.observer.emit_spans(specs)

    def close(self) -> None:
        """End rollout spans still open, send what is queued (bounded), finish the trackers."""
        self.observer.end_open_rollouts()
        if self.observer.enabled:
            self.observer.force_flush(min(FLUSH_TIMEOUT_S, self.observer.config.export_timeout_s))
        for tracker in self.trackers:
            tracker.finish()
