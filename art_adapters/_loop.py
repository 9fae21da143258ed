"""The training loop: rollouts -> scores -> one GRPO step, repeated; held-out evaluation every k steps.

:func:`train_loop` is a short loop over named steps (:func:`next_batch`, :func:`scored_groups`,
:func:`train_step`, :func:`record_step`, :func:`evaluate`), each a function of its own that a test
can call without a backend; the scorers (:mod:`art_adapters._scorers`) are how rewards get in.
"""

from __future__ import annotations

import functools
import logging
import random
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ._batch_store import BatchStore
from ._calibration import calibrate
from ._dynamic_sampling import FilledBatch, fill_batch
from ._errors import ConfigError
from ._hacking import HackingMonitor, HackingWarning, warnings_row
from ._loop_config import EvalReport, LoopConfig, LoopResult, StepReport
from ._loop_telemetry import LoopTelemetry
from ._paired import scenario_means
from ._pipeline import Pipeline
from ._runner import RolloutFn, run_groups, scenario_id
from ._scorers import Scorer, unscored_reason
from ._sft_config import load_trajectories
from ._trajectory import TrajectoryGroup
from .observe import MetricsHistory, group_metrics

if TYPE_CHECKING:
    from ._model import TrainableModel
    from .observe import Observer

__all__ = [
    "EvalReport",
    "LoopConfig",
    "LoopResult",
    "StepReport",
    "eval_due",
    "evaluate",
    "hacking_stop",
    "next_batch",
    "record_step",
    "resume_batch",
    "score_groups",
    "scored_groups",
    "sft_warmup",
    "split_unscored",
    "stop_reason",
    "train_loop",
    "train_step",
]

logger = logging.getLogger(__name__)


def next_batch(scenarios: Sequence[Any], index: int, size: int, seed: int) -> list[Any]:
    """The ``index``-th batch of ``size`` scenarios; each epoch is a fresh seeded shuffle.

    Batches run through the shuffled dataset in order and wrap into the next epoch (reshuffled
    with ``seed`` and the epoch number), so every scenario is used once per epoch and batch ``i``
    is the same in every run with the same seed: a resumed loop picks up at the next one.
    """
    out: list[Any] = []
    per_epoch = len(scenarios)
    position = index * size
    while len(out) < size:
        epoch, offset = divmod(position, per_epoch)
        order = list(range(per_epoch))
        random.Random(seed * 1_000_003 + epoch).shuffle(order)
        out.append(scenarios[order[offset]])
        position += 1
    return out


def resume_batch(config: LoopConfig, start: int) -> int:
    """Where a (re)started loop continues in the dataset: after the last batch in the metrics
    history (iterations that trained nothing used batches too), else at the model's step."""
    if config.run_dir is None:
        return start
    rows = MetricsHistory(config.run_dir).rows("train")
    logged = [r["batch"] for r in rows if isinstance(r.get("batch"), int)]
    return max(start, max(logged) + 1) if logged else start


async def score_groups(
    score: Scorer, groups: list[TrajectoryGroup], scenarios: list[Any]
) -> list[TrajectoryGroup]:
    """``score`` the groups, checking that it returned every one of them.

    Raises:
        ConfigError: the scorer dropped or added groups.
    """
    scored = list(await score(groups, scenarios))
    if len(scored) != len(groups):
        raise ConfigError(
            f"the scorer returned {len(scored)} groups for {len(groups)}: it must return every group "
            "(leave a group's rewards unset to mark it unscored; it is then reported, not trained on)"
        )
    return scored


async def scored_groups(
    rollout: RolloutFn,
    score: Scorer,
    scenarios: list[Any],
    *,
    batch: int,
    step: int,
    config: LoopConfig,
    telemetry: LoopTelemetry | None = None,
    progress: Callable[[Any], None] | None = None,
) -> list[TrajectoryGroup]:
    """The batch's groups, rolled out and scored: ``rollouts_per_group`` rollouts of each scenario.

    Each rollout is traced live (``telemetry``; default: the observer configured from the
    environment) and its trace gets its scores.

    With ``config.run_dir`` the groups are saved to its ``batches/`` folder
    (:class:`~art_adapters._batch_store.BatchStore`) before and after scoring, and a batch saved
    at this ``step`` for these scenarios is reused instead of rolled out (or scored) again, so a
    loop that crashed before its train step loses no rollouts when restarted.
    """
    telemetry = telemetry or LoopTelemetry.default()
    store = BatchStore(config.run_dir) if config.run_dir is not None else None
    stored = store.load(batch, step, [scenario_id(s) for s in scenarios]) if store is not None else None
    if stored is not None:
        kind = "scored" if stored.scored else "unscored"
        logger.info("step %d: reusing batch %d's %s groups from %s", step + 1, batch, kind, store.folder)
        if stored.scored:
            return stored.groups
    if stored is not None:
        groups = stored.groups
    else:
        groups = await run_groups(
            rollout, scenarios, n=config.rollouts_per_group, config=config.run,
            progress=progress or config.progress, tracing=telemetry.tracing(step, "train"),
        )  # fmt: skip
        if store is not None:
            store.save(batch, step, groups, scored=False)
    scored = groups
    try:
        scored = await score_groups(score, groups, scenarios)
    finally:
        telemetry.scored(scored, step=step, split="train")
    if store is not None:
        store.save(batch, step, scored, scored=True)
    return scored


def split_unscored(
    groups: Sequence[TrajectoryGroup], step: int
) -> tuple[list[TrajectoryGroup], list[dict[str, Any]]]:
    """The groups to train on, and ``{"group", "scenario_id", "reason"}`` for each left out (logged)."""
    usable: list[TrajectoryGroup] = []
    unscored: list[dict[str, Any]] = []
    for group in groups:
        reason = unscored_reason(group)
        if reason is None:
            usable.append(group)
            continue
        scenario = group.metadata.get("scenario_id")
        unscored.append({"group": group.id, "scenario_id": scenario, "reason": reason})
        logger.warning("step %d: group %s not trained on: %s", step + 1, group.id, reason)
    return usable, unscored


async def train_step(
    model: TrainableModel,
    groups: Sequence[TrajectoryGroup],
    scenarios: Sequence[Any],
    *,
    batch: int,
    step: int,
    config: LoopConfig,
) -> StepReport:
    """One GRPO step on the scored groups (``model.train``); groups that could not be scored are
    left out and listed in the report. Nothing is trained when no group is left."""
    usable, unscored = split_unscored(groups, step)
    ids = [scenario_id(s) for s in scenarios]
    report = StepReport(step=step, trained=False, batch=batch, scenario_ids=ids, unscored=unscored)
    if not usable:
        report.reason = "no group could be scored"
        return report
    trained = await model.train(usable, config=config.train)
    report.step, report.trained, report.reason = trained.step, trained.trained, trained.reason
    report.metrics = {k: v for k, v in trained.metrics.items() if isinstance(v, int | float | None)}
    return report


def record_step(
    config: LoopConfig,
    report: StepReport,
    groups: Sequence[TrajectoryGroup],
    telemetry: LoopTelemetry | None = None,
    monitor: HackingMonitor | None = None,
) -> StepReport:
    """Add the rollouts' statistics to ``report`` and write its ``train`` row to ``metrics.jsonl``
    (and to the trackers, and as a train-step trace).

    The report's ``reward_mean`` becomes the row's, so the two never disagree. With a ``monitor``
    the groups are checked for reward hacking: its warnings go to ``report.warnings``, the row
    (``hacking_warnings``, ``hacking_signals``, the monitored numbers) and a tagged trace.
    """
    # The rollouts' statistics (group_metrics) are the row's; the trainer's cover only the groups and
    # trajectories it used (none when every group scored alike) and are kept under trained_*.
    trainer = dict(report.metrics)
    for name in ("reward_mean", "reward_std", "groups", "trajectories"):
        if (value := trainer.pop(name, None)) is not None:
            trainer[f"trained_{name}"] = value
    extra = {**trainer, "batch": report.batch, "unscored_groups": len(report.unscored)}
    telemetry = telemetry or LoopTelemetry.default()
    if monitor is not None and monitor.config.enabled:
        report.warnings = monitor.observe(report.step, groups)
        extra.update(warnings_row(report.warnings, monitor.latest()))
    report.metrics = _log(config, report.step, groups, extra, split="train", telemetry=telemetry)
    report.reward_mean = report.metrics.get("reward_mean")
    if report.warnings:
        telemetry.hacking(report.step, report.warnings)
    return report


def hacking_stop(report: StepReport, config: LoopConfig) -> str | None:
    """Why the loop stops on ``report``'s reward-hacking warnings (``config.hacking.stop``), or ``None``."""
    if not report.warnings or not config.hacking.stop:
        return None
    signals = ", ".join(dict.fromkeys(w.signal for w in report.warnings))
    reason = (
        f"reward hacking suspected at step {report.step} ({signals}): {report.warnings[0].message}; "
        f"check: {report.warnings[0].check} (LoopConfig.hacking.stop=False only warns)"
    )
    logger.warning("training loop stopped: %s", reason)
    return reason


def stop_reason(untrained: int, report: StepReport, config: LoopConfig) -> str | None:
    """Why the loop gives up after ``untrained`` iterations in a row trained nothing, or ``None``."""
    logger.warning("step %d trained nothing: %s", report.step + 1, report.reason)
    if untrained < config.max_untrained:
        return None
    reason = (
        f"{untrained} iterations in a row trained nothing (last: {report.reason}); check the scorer and "
        "the rewards' spread (a group whose rollouts all score the same carries no signal)"
    )
    if report.reason and "zero variance" in report.reason and report.reward_mean is not None:
        if report.reward_mean > 0:
            reason += (
                f"; the last batch's mean reward was {report.reward_mean:.2f}: if that is the best score, "
                "the policy has mastered these scenarios and needs harder or more varied ones"
            )
        else:  # all alike at nothing: no rollout earned anything, which no policy masters
            reason += (
                f"; every rollout scored {report.reward_mean:.2f}: no rollout earned a reward, so the scorer "
                "does not tell them apart (a small judge scores everything alike; a reward no rollout can "
                "earn): use a stronger judge, a reward that counts partial success, or easier scenarios"
            )
    logger.warning("training loop stopped at step %d: %s", report.step, reason)
    return reason


async def sft_warmup(
    model: TrainableModel, config: LoopConfig, step: int, telemetry: LoopTelemetry | None = None
) -> StepReport | None:
    """One SFT step on ``config.sft_warmup`` (``model.train_sft`` with ``config.sft``) when it is set,
    the model is at ``step`` 0 and ``config.steps`` > 0, else ``None``; its ``train`` row (``sft_warmup: 1``, ``batch``
    -1, no rollouts) goes to ``metrics.jsonl`` and the trackers like a GRPO step's.

    Raises:
        ConfigError: the file is missing, empty or malformed (the line is named), or the SFT
            step trained nothing (the reason is given).
    """
    if config.sft_warmup is None or step != 0 or config.steps == 0:
        return None
    trajectories = load_trajectories(config.sft_warmup)
    logger.info("SFT warm-up: one step on %d trajectories of %s", len(trajectories), config.sft_warmup)
    trained = await model.train_sft(trajectories, config=config.sft)
    if not trained.trained:
        raise ConfigError(f"the SFT warm-up on {config.sft_warmup} trained nothing: {trained.reason}")
    metrics = {k: v for k, v in trained.metrics.items() if isinstance(v, int | float | None)}
    report = StepReport(step=trained.step, trained=True, batch=-1, metrics={**metrics, "sft_warmup": 1})
    return record_step(config, report, [], telemetry)


def eval_due(step: int, config: LoopConfig) -> bool:
    """Whether to evaluate after reaching ``step`` mid-run: every ``eval_every`` steps (the last
    step is always evaluated, by :func:`train_loop` itself)."""
    return bool(config.eval_every) and step % config.eval_every == 0 and step < config.steps


def _rewards(groups: Sequence[TrajectoryGroup]) -> list[float]:
    return [float(t.reward) for g in groups for t in g.trajectories if t.reward is not None]


async def evaluate(
    model: TrainableModel,
    rollout: RolloutFn,
    scenarios: Sequence[Any],
    score: Scorer,
    config: LoopConfig,
    telemetry: LoopTelemetry | None = None,
    progress: Callable[[Any], None] | None = None,
) -> EvalReport:
    """Mean reward of ``rollout`` (typically a greedy agent on the latest step) on ``scenarios``.

    Writes a ``val`` row to ``metrics.jsonl``; ``progress`` receives ``run_groups``'
    :class:`~art_adapters.RunProgress` after each rollout.
    """
    step = await model.get_step()
    telemetry = telemetry or LoopTelemetry.default()
    groups = await run_groups(
        rollout, list(scenarios), n=config.eval_rollouts, config=config.run,
        progress=progress or config.progress, tracing=telemetry.tracing(step, "val"),
    )  # fmt: skip
    scored = groups
    try:
        scored = await score(groups, list(scenarios))
    finally:
        telemetry.scored(scored, step=step, split="val")
    rewards = _rewards(scored)
    report = EvalReport(
        step=step,
        reward_mean=statistics.fmean(rewards) if rewards else None,
        scored=len(rewards),
        trajectories=sum(len(g.trajectories) for g in scored),
        exceptions=sum(len(g.exceptions) for g in scored),
        scenarios=scenario_means(scored),
    )
    report.metrics = _log(config, step, scored, {}, split="val", telemetry=telemetry)
    logger.info("step %d: held-out mean reward %s (%d scored)", step, report.reward_mean, report.scored)
    return report


def _log(
    config: LoopConfig,
    step: int,
    groups: Sequence[TrajectoryGroup],
    extra: Mapping[str, Any],
    *,
    split: str,
    telemetry: LoopTelemetry,
) -> dict[str, Any]:
    row: dict[str, Any] = {**group_metrics(groups), **extra}
    if (calibration := calibrate(groups)) is not None:  # RULER beside a verifiable reward
        row.update(calibration.row())
        logger.info("step %d (%s): RULER vs the verifiable reward: %s", step, split, calibration.summary())
    if config.run_dir is not None:
        MetricsHistory(config.run_dir).append(step, row, split=split)
    telemetry.row(step, row, split=split)
    return row


async def train_loop(  # shape: the public entry point (README.md); its keywords are a caller's hooks
    model: TrainableModel,
    rollout: RolloutFn,
    train_scenarios: Sequence[Any],
    *,
    score: Scorer,
    config: LoopConfig,
    val_scenarios: Sequence[Any] = (),
    eval_rollout: RolloutFn | None = None,
    eval_score: Scorer | None = None,
    on_step: Callable[[StepReport], None] | None = None,
    on_eval: Callable[[EvalReport], None] | None = None,
    progress: Callable[[Any], None] | None = None,
    observer: Observer | None = None,
    on_warning: Callable[[HackingWarning], None] | None = None,
) -> LoopResult:
    """Train ``model`` from its current step up to ``config.steps``, evaluating on the way.

    ::

        config = aa.LoopConfig(steps=8, groups_per_step=4, eval_every=2, run_dir="runs/a")
        result = await aa.train_loop(
            model, rollout, train_scenarios,
            score=aa.verifiable_scorer(lambda t, scenario: check(t, scenario)),  # or aa.ruler_scorer(judge)
            val_scenarios=held_out, eval_rollout=greedy_rollout, config=config,
        )

    Each iteration takes the next batch of ``groups_per_step`` training scenarios, rolls each out
    ``rollouts_per_group`` times and scores the groups, trains one step on the groups that could
    be scored (the others are reported in the step's :class:`StepReport`, never dropped silently),
    and records a ``train`` row in the run's ``metrics.jsonl``; every ``eval_every`` steps (and
    before the first and after the last) it evaluates on the held-out split (a ``val`` row).

    With ``config.max_staleness >= 1`` the loop is pipelined (:mod:`art_adapters._pipeline`):
    rollouts keep running while groups are scored and steps train, a step takes the oldest
    ``groups_per_step`` scored groups with a reward spread, and a group more than
    ``max_staleness`` steps behind the model is dropped and counted (docs/training.md).

    Steps count from the model's current step, so a restarted loop resumes where the backend is
    and never redoes a finished step; with ``run_dir`` it also continues after the last batch it
    logged and reuses the rollouts of a batch that crashed before its train step.

    Args:
        model: a registered :class:`~art_adapters.TrainableModel`.
        rollout: ``async def rollout(scenario) -> Trajectory`` for training (sampling agent).
        train_scenarios: the training split (any objects ``rollout`` accepts).
        score: a :class:`Scorer` (:func:`verifiable_scorer`, :func:`ruler_scorer`, ...).
        config: the loop's settings.
        val_scenarios: the held-out split; empty: no evaluation.
        eval_rollout: the rollout used for evaluation (e.g. a greedy agent); default ``rollout``.
        eval_score: the scorer of evaluations; default ``score``.
        on_step, on_eval: called with each report as it is made (progress display).
        progress: receives ``run_groups``' :class:`~art_adapters.RunProgress` after every
            rollout (training and evaluation) instead of its own progress bar.
        observer: where traces go; ``None``: the default observer, configured from the
            ``LANGFUSE_*`` / ``OTEL_EXPORTER_OTLP_*`` variables (nothing when none is set).
        on_warning: called with each reward-hacking warning (``config.hacking``) as it is raised
            (a console); the warnings are also logged and kept in each :class:`StepReport`.

    Observability needs no code: with Langfuse or an OTLP endpoint configured, every rollout is
    one live trace labelled with its scenario, group, rollout index, step and policy version
    (``name@step``), its scores attached; each step's metrics are a train-step trace; W&B and
    Trackio get one row per step and split when their variables are set. Where the run can be
    seen is logged at the start and kept in :attr:`LoopResult.where`.

    Raises:
        ConfigError: no training scenarios, or the scorer did not return every group.
        RolloutBudgetError: too many rollouts failed in one step.
    """
    if config.steps > 0 and not train_scenarios:
        raise ConfigError("train_scenarios is empty: the loop needs at least one training scenario")
    start = await model.get_step()
    telemetry = _start_telemetry(model, config, observer)
    run = _Run(
        model, rollout, train_scenarios, score, config, telemetry, step=start, val_scenarios=val_scenarios,
        eval_rollout=eval_rollout or rollout, eval_score=eval_score or score, on_step=on_step,
        on_eval=on_eval, on_warning=on_warning, progress=progress,
    )  # fmt: skip
    try:
        if val_scenarios and config.eval_at_start:
            await run.evaluate()
        run.batch = resume_batch(config, start)
        await run.warm_up()
        if config.max_staleness and run.step < config.steps:  # the pipelined loop (LoopConfig.max_staleness)
            await run.pipelined()
        while run.going():
            filled = await run.sample()
            report = await run.train(filled)
            await run.report(report, filled.seen)
        await run.finish()
    finally:
        telemetry.close()
    return run.result


@dataclass
class _Run:
    """What :func:`train_loop` carries between steps (step, batch, result, monitor); its steps as methods."""

    model: TrainableModel
    rollout: RolloutFn
    train_scenarios: Sequence[Any]
    score: Scorer
    config: LoopConfig
    telemetry: LoopTelemetry
    step: int  # the model's step
    val_scenarios: Sequence[Any]
    eval_rollout: RolloutFn
    eval_score: Scorer
    batch: int = 0  # the next batch of training scenarios to sample
    untrained: int = 0  # iterations in a row that trained nothing
    on_step: Callable[[StepReport], None] | None = None
    on_eval: Callable[[EvalReport], None] | None = None
    on_warning: Callable[[HackingWarning], None] | None = None
    progress: Callable[[Any], None] | None = None
    result: LoopResult = field(init=False)
    monitor: HackingMonitor = field(init=False)

    def __post_init__(self) -> None:
        run_dir = self.config.run_dir
        self.result = LoopResult(
            start_step=self.step, final_step=self.step, where=self.telemetry.where(),
            metrics_file=run_dir / "metrics.jsonl" if run_dir is not None else None,
        )  # fmt: skip
        self.monitor = HackingMonitor(self.config.hacking)

    def going(self) -> bool:
        """Whether another step is due: ``config.steps`` not reached and no reason to stop."""
        return self.step < self.config.steps and self.result.stopped is None

    def scenarios(self, batch: int) -> list[Any]:
        """Batch ``batch`` of the training scenarios (:func:`next_batch`)."""
        return next_batch(self.train_scenarios, batch, self.config.groups_per_step, self.config.seed)

    async def evaluate(self) -> None:
        """Evaluate on the held-out scenarios (:func:`evaluate`); the report goes to ``on_eval``."""
        report = await evaluate(
            self.model, self.eval_rollout, self.val_scenarios, self.eval_score, self.config, self.telemetry,
            self.progress,
        )  # fmt: skip
        self.result.evals.append(report)
        if self.on_eval is not None:
            self.on_eval(report)

    async def warm_up(self) -> None:
        """The SFT warm-up step when ``config.sft_warmup`` asks for one (:func:`sft_warmup`)."""
        warm = await sft_warmup(self.model, self.config, self.step, self.telemetry)
        if warm is None:
            return
        self.result.steps.append(warm)
        self.step = warm.step
        if self.on_step is not None:
            self.on_step(warm)
        if self.val_scenarios and eval_due(self.step, self.config):
            await self.evaluate()

    async def sample(self) -> FilledBatch:
        """The next batch, rolled out and scored, topped up while too few groups have a reward spread
        (``config.dynamic_sampling``, :func:`fill_batch`)."""
        groups, scenarios = await self._draw(self.batch)
        filled = await fill_batch(
            groups, scenarios, draw=self._draw, batch=self.batch, groups_per_step=self.config.groups_per_step,
            max_extra=self.config.dynamic_sampling,
        )  # fmt: skip
        self.batch = filled.batch + 1
        return filled

    async def _draw(self, batch: int) -> tuple[list[TrajectoryGroup], list[Any]]:
        """Batch ``batch`` of the training scenarios, rolled out and scored (:func:`scored_groups`)."""
        scenarios = self.scenarios(batch)
        groups = await scored_groups(
            self.rollout, self.score, scenarios, batch=batch, step=self.step, config=self.config,
            telemetry=self.telemetry, progress=self.progress,
        )  # fmt: skip
        return groups, scenarios

    async def train(self, filled: FilledBatch) -> StepReport:
        """One GRPO step on a sampled batch (:func:`train_step`), with its dynamic-sampling counts."""
        report = await train_step(
            self.model, filled.groups, filled.scenarios, batch=filled.batch, step=self.step,
            config=self.config,
        )  # fmt: skip
        if self.config.dynamic_sampling:
            report.metrics.update(filled.metrics)
        return report

    async def report(self, report: StepReport, groups: Sequence[TrajectoryGroup]) -> None:
        """After a step: its row (:func:`record_step`), the callbacks, whether to stop, an evaluation."""
        self.result.steps.append(record_step(self.config, report, groups, self.telemetry, self.monitor))
        if self.on_step is not None:
            self.on_step(report)
        if self.on_warning is not None:
            for warning in report.warnings:
                self.on_warning(warning)
        self.result.stopped = hacking_stop(report, self.config)
        if not report.trained:
            self.untrained += 1
            self.result.stopped = self.result.stopped or stop_reason(self.untrained, report, self.config)
            return
        self.untrained, self.step = 0, report.step
        if self.val_scenarios and eval_due(self.step, self.config):
            await self.evaluate()

    async def pipelined(self) -> None:
        """The pipelined steps (``config.max_staleness >= 1``): each trains on the groups a
        :class:`Pipeline` hands over while it keeps rolling out, and is reported as a sequential one."""
        pipeline = Pipeline(
            self.rollout, functools.partial(score_groups, self.score), self.scenarios, config=self.config,
            step=self.step, batch=self.batch, telemetry=self.telemetry, progress=self.progress,
        )  # fmt: skip
        try:
            await pipeline.start()
            while self.going():
                ready = await pipeline.next_step(self.step)
                if isinstance(ready, str):
                    logger.warning("training loop stopped at step %d: %s", self.step, ready)
                    self.result.stopped = ready
                    break
                pipeline.training(ready)
                report = await train_step(
                    self.model, ready.groups, ready.scenarios, batch=ready.batch, step=self.step,
                    config=self.config,
                )  # fmt: skip
                report.unscored = [*ready.unscored, *report.unscored]
                report.metrics.update(ready.metrics)
                pipeline.trained(ready, report.step, report.trained)
                await self.report(report, [*ready.groups, *ready.left_out])
        finally:
            await pipeline.close()

    async def finish(self) -> None:
        """Note the step reached; evaluate it unless that was just done."""
        self.result.final_step = self.step
        if self.val_scenarios and (not self.result.evals or self.result.evals[-1].step != self.step):
            await self.evaluate()


def _start_telemetry(model: TrainableModel, config: LoopConfig, observer: Observer | None) -> LoopTelemetry:
    """The run's telemetry, named after the model (any object with its methods trains) and the run."""
    name = str(getattr(model, "name", "model"))
    return LoopTelemetry.start(
        model_name=name, project=str(getattr(model, "project", "default")),
        run=config.run_dir.name if config.run_dir is not None else name, observer=observer,
        config=config.model_dump(mode="json"), directory=config.run_dir,
    )  # fmt: skip

