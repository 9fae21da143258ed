"""The training loop: rollouts -> scores -> one GRPO step, repeated; held-out evaluation every k steps.

:func:`train_loop` is a short loop over named steps (:func:`next_batch`, :func:`scored_groups`,
:func:`train_step`, :func:`record_step`, :func:`evaluate`), each a function of its own that a test
can call without a backend; the scorers (:mod:`art_adapters._scorers`) are how rewards get in.
"""

from __future__ import annotations

import logging
import random
import statistics
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, PositiveInt, model_validator

from ._batch_store import BatchStore
from ._calibration import calibrate
from ._errors import ConfigError
from ._hacking import HackingMonitor, HackingMonitorConfig, HackingWarning, warnings_row
from ._loop_telemetry import LoopTelemetry
from ._runner import RolloutFn, RunConfig, run_groups, scenario_id
from ._scorers import Scorer, unscored_reason
from ._sft_config import SFTConfig, load_trajectories
from ._train_config import TrainConfig
from ._trajectory import TrajectoryGroup
from .observe._metrics import MetricsHistory, group_metrics

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


class LoopConfig(BaseModel):
    """Settings of :func:`train_loop`.

    Attributes:
        steps: train until the model is at this step (a target, not a count: a loop resumed
            at step 3 with ``steps=5`` trains two more). ``0`` only evaluates.
        groups_per_step: training scenarios per step (one group each). Default 4.
        rollouts_per_group: rollouts per scenario, the GRPO group size, >= 2. Default 4.
        eval_every: evaluate on the held-out split after every this many steps (and before
            the first step and after the last); ``0`` evaluates only before and after.
        eval_rollouts: rollouts per held-out scenario (1 for a greedy agent). Default 1.
        eval_at_start: evaluate before training when the loop starts. Default True.
        run: how each ``run_groups`` call (a step's rollouts, an evaluation) runs: concurrency,
            timeout, retries, failure budget (:class:`~art_adapters.RunConfig`). Default
            ``RunConfig(timeout_s=600, max_failure_rate=0.25)``: 8 at once, 10 minutes per
            rollout, a quarter of a call's rollouts may fail.
        max_untrained: consecutive iterations that may train nothing (e.g. every group had
            equal rewards) before the loop gives up and returns with ``stopped`` set; such an
            iteration moves on to the next scenarios. Default 3.
        seed: seeds the per-epoch shuffle of the training scenarios.
        run_dir: where ``metrics.jsonl`` and ``batches/`` (each step's groups, reused after a
            crash) are written; ``None``: neither.
        progress: show ``run_groups``' progress bar (a terminal or notebook only); the
            ``progress`` argument of :func:`train_loop` replaces it with a callback.
        train: the settings of each GRPO step (learning rate, LoRA, checkpoint retention
            via ``train.retention``).
        sft_warmup: a trajectories file (JSON Lines, see :func:`~art_adapters.load_trajectories`:
            imported production traces, a stronger model's rollouts) to train one SFT step on
            before the first GRPO step, when the model is at step 0; RL then continues from that
            checkpoint. The SFT step is a step: it counts towards ``steps``. ``None`` (default): none.
        sft: the settings of that SFT step (:class:`~art_adapters.SFTConfig`).
        hacking: the reward-hacking monitor (:class:`~art_adapters._hacking.HackingMonitorConfig`):
            each step's rollouts are checked for signs that the policy optimises the judge rather
            than the task (reward up while the verifiable reward falls, answer length drift,
            repetition, tool-call changes, judges disagreeing); a warning is logged, written to the
            step's row and traced, and with ``hacking.stop`` the loop stops. Default: on, not stopping.
    """

    model_config = ConfigDict(extra="forbid")

    steps: NonNegativeInt
    groups_per_step: PositiveInt = 4
    rollouts_per_group: int = Field(default=4, ge=2)
    eval_every: NonNegativeInt = 2
    eval_rollouts: PositiveInt = 1
    eval_at_start: bool = True
    run: RunConfig = Field(default_factory=lambda: RunConfig(timeout_s=600.0, max_failure_rate=0.25))
    max_untrained: PositiveInt = 3
    seed: int = 0
    run_dir: Path | None = None
    progress: bool = True
    train: TrainConfig = Field(default_factory=TrainConfig)
    sft_warmup: Path | None = None
    sft: SFTConfig = Field(default_factory=SFTConfig)
    hacking: HackingMonitorConfig = Field(default_factory=HackingMonitorConfig)

    @model_validator(mode="before")
    @classmethod
    def _moved_to_run(cls, data: Any) -> Any:
        moved = [name for name in _MOVED if isinstance(data, Mapping) and name in data]
        if moved:
            hints = (f"{name} moved into LoopConfig.run (a RunConfig): pass {_MOVED[name]}" for name in moved)
            raise ValueError("; ".join(hints))
        return data


#: LoopConfig settings that moved into ``LoopConfig.run``, and how to pass them now.
_MOVED = {
    "max_concurrency": "run=RunConfig(max_concurrency=...)",
    "rollout_timeout_s": "run=RunConfig(timeout_s=...)",
    "max_exceptions": (
        "run=RunConfig(max_failures=...) for a count or run=RunConfig(max_failure_rate=...) for a fraction"
    ),
}


class EvalReport(BaseModel):
    """One held-out evaluation: the mean reward of the model at ``step``."""

    step: int
    reward_mean: float | None
    scored: int
    trajectories: int
    exceptions: int
    metrics: dict[str, Any] = Field(default_factory=dict)


class StepReport(BaseModel):
    """One training step: what was trained, on which scenarios, and what could not be scored.

    Attributes:
        step: the model's step after this iteration (unchanged when not ``trained``).
        trained: whether ``model.train`` made a new checkpoint.
        reason: why not, when not trained.
        batch: the index of the step's batch of training scenarios (0, 1, ...).
        scenario_ids: the scenarios of the step's groups.
        reward_mean: mean reward of the step's scored rollouts (the ``reward_mean`` of its
            ``metrics.jsonl`` row, unscored groups' rewards included where they have any).
        unscored: ``{"group": id, "scenario_id": ..., "reason": ...}`` for every group left out
            because the scorer could not score it.
        metrics: the trainer's metrics (``loss``, ``kl``, ...) and the rollouts' statistics.
        warnings: the reward-hacking warnings this step raised (``LoopConfig.hacking``).
    """

    step: int
    trained: bool
    reason: str | None = None
    batch: int = 0
    scenario_ids: list[str] = Field(default_factory=list)
    reward_mean: float | None = None
    unscored: list[dict[str, Any]] = Field(default_factory=list)
    metrics: dict[str, Any] = Field(default_factory=dict)
    warnings: list[HackingWarning] = Field(default_factory=list)


class LoopResult(BaseModel):
    """What :func:`train_loop` did: the start and end step, each step and each evaluation.

    ``stopped`` says why the loop ended before ``config.steps`` (``None`` when it got there);
    ``where`` has one line per place the run can be seen (trace backend, W&B, Trackio).
    """

    start_step: int
    final_step: int
    steps: list[StepReport] = Field(default_factory=list)
    evals: list[EvalReport] = Field(default_factory=list)
    metrics_file: Path | None = None
    stopped: str | None = None
    where: list[str] = Field(default_factory=list)

    @property
    def unscored(self) -> list[dict[str, Any]]:
        """Every group left unscored during the run, with its step."""
        return [{"step": s.step, **u} for s in self.steps for u in s.unscored]


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
    # The rollouts' reward statistics (group_metrics) are the row's; the trainer's cover only the
    # groups it used (none when every group scored alike) and are kept under trained_*.
    trainer = dict(report.metrics)
    for name in ("reward_mean", "reward_std"):
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


async def train_loop(
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
    name = str(getattr(model, "name", "model"))  # any object with TrainableModel's methods trains
    telemetry = LoopTelemetry.start(
        model_name=name,
        project=str(getattr(model, "project", "default")),
        run=config.run_dir.name if config.run_dir is not None else name,
        observer=observer,
        config=config.model_dump(mode="json"),
        directory=config.run_dir,
    )
    result = LoopResult(
        start_step=start, final_step=start, metrics_file=_metrics_file(config), where=telemetry.where()
    )

    async def run_eval() -> None:
        report = await evaluate(
            model, eval_rollout or rollout, val_scenarios, eval_score or score, config, telemetry, progress
        )
        result.evals.append(report)
        if on_eval is not None:
            on_eval(report)

    try:
        if val_scenarios and config.eval_at_start:
            await run_eval()
        step, batch, untrained = start, resume_batch(config, start), 0
        monitor = HackingMonitor(config.hacking)
        if (warm := await sft_warmup(model, config, step, telemetry)) is not None:  # LoopConfig.sft_warmup
            result.steps.append(warm)
            step = warm.step
            if on_step is not None:
                on_step(warm)
            if val_scenarios and eval_due(step, config) and step < config.steps:
                await run_eval()
        while step < config.steps and result.stopped is None:
            scenarios = next_batch(train_scenarios, batch, config.groups_per_step, config.seed)
            groups = await scored_groups(
                rollout, score, scenarios, batch=batch, step=step, config=config, telemetry=telemetry,
                progress=progress,
            )  # fmt: skip
            report = await train_step(model, groups, scenarios, batch=batch, step=step, config=config)
            result.steps.append(record_step(config, report, groups, telemetry, monitor))
            if on_step is not None:
                on_step(report)
            for warning in report.warnings if on_warning is not None else ():
                on_warning(warning)
            batch += 1
            result.stopped = hacking_stop(report, config)
            if not report.trained:
                untrained += 1
                result.stopped = result.stopped or stop_reason(untrained, report, config)
                continue
            untrained, step = 0, report.step
            if val_scenarios and eval_due(step, config):
                await run_eval()
        result.final_step = step
        if val_scenarios and (not result.evals or result.evals[-1].step != step):
            await run_eval()
    finally:
        telemetry.close()
    return result


def _metrics_file(config: LoopConfig) -> Path | None:
    return config.run_dir / "metrics.jsonl" if config.run_dir is not None else None
