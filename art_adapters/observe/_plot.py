"""PNG charts of a run's metrics history: reward with its spread, loss, KL, and the judge's side
(RULER's rubric dimensions, calibration against the verifiable reward, judge agreement) when the
run has them (matplotlib, lazily)."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from art_adapters._errors import ConfigError
from art_adapters.observe._metrics import METRICS_FILE, MetricsHistory
from art_adapters.ruler import TrajectoryJudgement

__all__ = ["plot_run"]

logger = logging.getLogger(__name__)

#: (file stem, title, metric keys tried in order) of the single-series charts.
_CHARTS = (
    ("loss", "Training loss", ("loss", "policy_loss")),
    ("kl", "KL divergence to the reference", ("kl", "kl_div", "kl_mean")),
    ("exception_rate", "Failed rollouts (fraction)", ("exception_rate",)),
    ("tool_call_rate", "Rollouts that called a tool (fraction)", ("tool_call_rate",)),
    ("tool_error_rate", "Tool calls that reported an error (fraction)", ("tool_error_rate",)),
)

#: (file stem, title, y label, (metric key, legend label)...) of the charts of the judge's side, one line
#: per key and split.
_JUDGE_CHARTS = (
    (
        "calibration",
        "RULER vs the verifiable reward (within groups)",
        "agreement",
        (("calibration_spearman", "Spearman"), ("calibration_pairwise", "pairwise agreement")),
    ),
    (
        "judge_agreement",
        "Agreement of the judges (1 - spread of their scores)",
        "agreement",
        (("judge_agreement_mean", "judge agreement"),),
    ),
)

#: The file stem of the rubric dimensions' chart (``ruler_<dimension>_mean``, one line per dimension).
_DIMENSIONS_CHART = "ruler_dimensions"


#: A rubric dimension's column: the mean of its metric (``TrajectoryJudgement.dimension_metric``).
_DIMENSION_PREFIX = TrajectoryJudgement.dimension_metric("")


def _dimension_keys(history: MetricsHistory) -> list[str]:
    """The ``ruler_<dimension>_mean`` columns of the history (not the score's), sorted."""
    score = f"{TrajectoryJudgement.SCORE_METRIC}_mean"
    keys = {
        key
        for row in history.rows()
        for key in row
        if key.startswith(_DIMENSION_PREFIX) and key.endswith("_mean") and key != score
    }
    return sorted(keys)


def _lines_chart(
    plt: Any, history: MetricsHistory, path: Path, title: str, ylabel: str, keys: list[tuple[str, str]]
) -> bool:
    """Draw ``(key, label)`` series of every split on one chart at ``path``; ``False`` (nothing written)
    when none has a value. Splits other than ``train`` are dashed."""
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    drawn = False
    for split in history.splits():
        for key, label in keys:
            steps, values = history.series(key, split)
            if steps:
                style = "-" if split == "train" else "--"
                ax.plot(steps, values, marker="o", linestyle=style, label=f"{split} {label}")
                drawn = True
    if drawn:
        ax.set(title=title, xlabel="training step", ylabel=ylabel)
        ax.grid(alpha=0.3)
        ax.legend(loc="best", fontsize="small")
        fig.tight_layout()
        fig.savefig(path)
    plt.close(fig)
    return drawn


def _history(run: str | os.PathLike[str]) -> MetricsHistory:
    path = Path(run)
    if path.is_dir():
        path = path / METRICS_FILE
    if not path.is_file():
        raise ConfigError(
            f"no metrics history at {path}: pass a run directory holding {METRICS_FILE} or the file itself"
        )
    return MetricsHistory(path)


def plot_run(run: str | os.PathLike[str], out_dir: str | os.PathLike[str] | None = None) -> list[Path]:
    """Write PNG charts for a run and return their paths.

    Args:
        run: a run directory holding ``metrics.jsonl``, or the metrics file itself.
        out_dir: where to write; default ``<run dir>/plots``.

    Charts: ``reward.png`` (mean reward per split, with a band of one standard deviation
    and the min/max as dotted lines), then ``loss.png``, ``kl.png``, ``exception_rate.png``,
    ``tool_call_rate.png`` and ``tool_error_rate.png`` when the history has those metrics; and
    the judge's side when the run has it: ``ruler_dimensions.png`` (the mean score of each RULER
    rubric dimension, ``ruler_<dimension>_mean``), ``calibration.png`` (``calibration_spearman``
    and ``calibration_pairwise``: how RULER agrees with the verifiable reward) and
    ``judge_agreement.png`` (``judge_agreement_mean``, judge ensembles). Splits other than
    ``train`` are dashed on these.

    Raises:
        ConfigError: no metrics file, no rows in it, or matplotlib is not installed.
    """
    history = _history(run)
    if not history.rows():
        raise ConfigError(f"{history.path} has no metric rows yet")
    try:
        import matplotlib

        matplotlib.use("Agg", force=True)
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ConfigError("plots need matplotlib: pip install 'art-adapters[plot]'") from exc
    out = Path(out_dir) if out_dir is not None else history.path.parent / "plots"
    out.mkdir(parents=True, exist_ok=True)
    written = [path for path in (_reward_chart(plt, history, out / "reward.png"),) if path is not None]
    written += _metric_charts(plt, history, out)
    keys = _dimension_keys(history)
    dimensions = [(key, key.removeprefix(_DIMENSION_PREFIX).removesuffix("_mean")) for key in keys]
    judged = [(_DIMENSIONS_CHART, "RULER rubric dimensions (mean score)", "score", dimensions)]
    judged += [(stem, title, ylabel, list(keys)) for stem, title, ylabel, keys in _JUDGE_CHARTS]
    for stem, title, ylabel, series in judged:
        path = out / f"{stem}.png"
        if series and _lines_chart(plt, history, path, title, ylabel, series):
            written.append(path)
    if not written:
        raise ConfigError(f"{history.path} has no reward, loss or KL values to plot")
    logger.info("wrote %d chart(s) to %s", len(written), out)
    return written


def _reward_chart(plt: Any, history: MetricsHistory, path: Path) -> Path | None:
    """Mean reward per split, a band of one standard deviation, min and max dotted; ``None`` when
    the history has no reward."""
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    drawn = False
    for split in history.splits():
        steps, mean = history.series("reward_mean", split)
        if not steps:
            continue
        drawn = True
        (line,) = ax.plot(steps, mean, marker="o", label=f"{split} mean reward")
        std_steps, std = history.series("reward_std", split)
        spread = dict(zip(std_steps, std, strict=True))
        if spread:
            lows = [m - spread.get(s, 0.0) for s, m in zip(steps, mean, strict=True)]
            highs = [m + spread.get(s, 0.0) for s, m in zip(steps, mean, strict=True)]
            ax.fill_between(steps, lows, highs, color=line.get_color(), alpha=0.2, label=f"{split} ± 1 std")
        for key in ("reward_min", "reward_max"):
            k_steps, values = history.series(key, split)
            if k_steps:
                label = f"{split} min / max" if key == "reward_max" else None
                ax.plot(k_steps, values, linestyle=":", color=line.get_color(), linewidth=1, label=label)
    if drawn:
        ax.set(title="Reward", xlabel="training step", ylabel="reward")
        ax.grid(alpha=0.3)
        ax.legend(loc="best", fontsize="small")
        fig.tight_layout()
        fig.savefig(path)
    plt.close(fig)
    return path if drawn else None


def _metric_charts(plt: Any, history: MetricsHistory, out: Path) -> list[Path]:
    """One chart per metric of :data:`_CHARTS` the history has (loss, KL, error rates...)."""
    written = []
    for stem, title, keys in _CHARTS:
        fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
        drawn = False
        for split in history.splits():
            for key in keys:
                steps, values = history.series(key, split)
                if steps:
                    ax.plot(steps, values, marker="o", label=f"{split} {key}")
                    drawn = True
                    break
        if drawn:
            ax.set(title=title, xlabel="training step", ylabel=stem)
            ax.grid(alpha=0.3)
            ax.legend(loc="best", fontsize="small")
            fig.tight_layout()
            path = out / f"{stem}.png"
            fig.savefig(path)
            written.append(path)
        plt.close(fig)
    return written
