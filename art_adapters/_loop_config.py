"""The training loop's settings and reports: :class:`LoopConfig`, :class:`StepReport`,
:class:`EvalReport` and :class:`LoopResult` (re-exported by :mod:`art_adapters._loop`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, PositiveInt, model_validator

from ._config import Count, reject_moved
from ._hacking import HackingMonitorConfig, HackingWarning
from ._paired import PairedComparison, compare_scenarios
from ._runner import RunConfig
from ._sft_config import SFTConfig
from ._train_config import TrainConfig

__all__ = ["EvalReport", "LoopConfig", "LoopResult", "StepReport"]


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
        max_staleness: ``0`` (default): the sequential loop (roll out a batch, score it, train,
            repeat). ``k >= 1``: the pipelined loop (:mod:`art_adapters._pipeline`): rollouts keep
            running (up to ``run.max_concurrency``) while groups are judged and steps train; each
            group is scored as soon as its rollouts end, and a step starts once ``groups_per_step``
            scored groups with a reward spread are ready. A group sampled from checkpoint ``s``
            trains at step ``t`` only if ``t - s <= k``, else it is dropped and counted
            (``dropped_stale`` in the step's row). See docs/training.md.
        dynamic_sampling: dynamic sampling as in DAPO, for the sequential loop: when fewer than
            ``groups_per_step`` of a step's groups have a reward spread (a group whose rollouts
            all score alike carries no GRPO signal), the next batches of scenarios are rolled out
            and scored, at most this many per step, until enough have one; the step trains on
            ``groups_per_step`` of those. ``0`` (default): off. The step's row counts
            ``dynamic_batches``, ``zero_variance_groups`` and ``signal_groups``; its reward
            statistics cover every group drawn. The pipelined loop always skips such groups.
        rollout_budget: the pipelined loop (``max_staleness >= 1``) starts at most this many
            training rollouts (groups x ``rollouts_per_group``) in one call, e.g. ``steps x
            groups_per_step x rollouts_per_group`` to sample what the sequential loop does. Once it
            is spent and no group is left running, a last step trains on the groups that are ready
            (fewer than ``groups_per_step``) and the loop stops, ``stopped`` saying so.
            ``None`` (default): no cap.
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
    max_staleness: Count = 0
    dynamic_sampling: NonNegativeInt = 0
    rollout_budget: PositiveInt | None = None

    @model_validator(mode="before")
    @classmethod
    def _moved_to_run(cls, data: Any) -> Any:
        return reject_moved(data, _MOVED, "LoopConfig.run (a RunConfig)")

    @model_validator(mode="after")
    def _budget_needs_pipeline(self) -> LoopConfig:
        if self.rollout_budget is not None and self.max_staleness == 0:
            raise ValueError(
                "rollout_budget caps the pipelined loop's sampling: set max_staleness >= 1 with it "
                "(the sequential loop samples exactly steps x groups_per_step x rollouts_per_group)"
            )
        if self.rollout_budget is not None and self.rollout_budget < self.rollouts_per_group:
            raise ValueError(
                f"rollout_budget={self.rollout_budget} is less than one group "
                f"(rollouts_per_group={self.rollouts_per_group}): no group could be sampled"
            )
        return self


#: LoopConfig settings that moved into ``LoopConfig.run``, and how to pass them now.
_MOVED = {
    "max_concurrency": "run=RunConfig(max_concurrency=...)",
    "rollout_timeout_s": "run=RunConfig(timeout_s=...)",
    "max_exceptions": (
        "run=RunConfig(max_failures=...) for a count or run=RunConfig(max_failure_rate=...) for a fraction"
    ),
}


class EvalReport(BaseModel):
    """One held-out evaluation: the mean reward of the model at ``step``.

    ``metrics`` holds the ``val`` row of ``metrics.jsonl``; ``scenarios`` the same numbers per
    held-out scenario id (``reward`` and each numeric trajectory metric,
    :func:`~art_adapters._paired.scenario_means`), so two evaluations can be compared scenario by
    scenario with :meth:`compare`.
    """

    step: int
    reward_mean: float | None
    scored: int
    trajectories: int
    exceptions: int
    metrics: dict[str, Any] = Field(default_factory=dict)
    scenarios: dict[str, dict[str, float]] = Field(default_factory=dict)

    def compare(self, later: EvalReport, metric: str = "reward") -> PairedComparison:
        """``metric`` compared scenario by scenario from this evaluation to ``later`` (an exact sign
        test: :class:`~art_adapters.PairedComparison`).

        Raises:
            ValueError: the two evaluations share no scenario with ``metric``.
        """
        return compare_scenarios(self.scenarios, later.scenarios, metric)


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
