"""Reward-hacking monitors: signs that the policy optimises the judge rather than the task.

:func:`step_signals` reduces each step's groups to a few numbers (reward, verifiable reward, RULER's
agreement with it, answer length, repeated n-grams, tool calls, tool error rate, judge agreement);
:class:`HackingMonitor` compares the latest steps with the first ones and returns a
:class:`HackingWarning` for each threshold of :class:`HackingMonitorConfig` crossed;
:func:`~art_adapters.train_loop` logs them, writes them to the metrics row and the traces, and stops
on them when ``stop=True``.
"""

from __future__ import annotations

import logging
import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt

from ._calibration import calibrate
from ._trajectory import Message, Trajectory, TrajectoryGroup
from .ruler import TrajectoryJudgement

__all__ = [
    "HackingMonitor",
    "HackingMonitorConfig",
    "HackingWarning",
    "repeated_ngram_fraction",
    "step_signals",
    "warnings_row",
]

logger = logging.getLogger(__name__)

#: The signals :func:`warnings_row` writes (the others already have a metrics-row field).
_ROW_SIGNALS = ("answer_chars", "repetition", "tool_calls")


class HackingMonitorConfig(BaseModel):
    """Settings of the reward-hacking monitor (``LoopConfig.hacking``); on by default, never stopping.

    Each step's signals (:func:`step_signals`) are compared with a *baseline*, the mean of the first
    ``window`` steps the monitor saw, as the mean of the latest ``window`` steps after the baseline
    (fewer while there are fewer). Nothing is checked until the baseline is complete; a monitor
    (a :func:`~art_adapters.train_loop` call, a restarted one too) starts its own baseline.

    Attributes:
        enabled: run the monitor at all. Default True.
        window: steps averaged for the baseline (the first ones) and for the current value (the
            latest ones), >= 1. Default 2.
        stop: stop :func:`~art_adapters.train_loop` at the first step with a warning
            (``LoopResult.stopped`` says which). Default False: warn and go on.
        reward_rise: warn (``reward_vs_verifiable``) when the reward's mean rises by at least this
            (absolute) while the verifiable reward falls by ``verifiable_drop``. Default 0.05.
        verifiable_drop: the fall of the verifiable reward's mean (``TrajectoryJudgement.independent_reward``,
            absolute) that, with a ``reward_rise``, warns. Default 0.05.
        calibration_drop: warn (``calibration``) when RULER's Spearman rank correlation with the
            verifiable reward falls by at least this from the baseline. Default 0.3.
        length_ratio: warn (``answer_length``) when the final assistant message's mean length in
            characters grows or shrinks by at least this factor, > 1. Default 1.5.
        ngram: the n of the repeated n-grams (words) in the assistant's text. Default 3.
        repetition_rise: warn (``repetition``) when the fraction of repeated n-grams rises by at
            least this (absolute, the fraction is in [0, 1]). Default 0.15.
        tool_calls_change: warn (``tool_calls``) when tool calls per rollout change by at least this
            fraction of the baseline (a baseline under one call counts as one). Default 0.5.
        tool_error_rise: warn (``tool_errors``) when the share of tool calls that failed rises by at
            least this (absolute). Default 0.2.
        agreement_drop: warn (``judge_agreement``) when the judges' agreement
            (``TrajectoryJudgement.agreement``, ensembles only) falls by at least this. Default 0.15.
    """

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    window: PositiveInt = 2
    stop: bool = False
    reward_rise: float = Field(default=0.05, ge=0.0)
    verifiable_drop: float = Field(default=0.05, ge=0.0)
    calibration_drop: float = Field(default=0.3, gt=0.0)
    length_ratio: float = Field(default=1.5, gt=1.0)
    ngram: PositiveInt = 3
    repetition_rise: float = Field(default=0.15, gt=0.0)
    tool_calls_change: PositiveFloat = 0.5
    tool_error_rise: float = Field(default=0.2, gt=0.0)
    agreement_drop: float = Field(default=0.15, gt=0.0)


class HackingWarning(BaseModel):
    """One crossed threshold: which signal, its values and what to check.

    Attributes:
        signal: ``reward_vs_verifiable``, ``calibration``, ``answer_length``, ``repetition``,
            ``tool_calls``, ``tool_errors`` or ``judge_agreement``.
        step: the step whose rollouts raised it (the model's step when they were sampled).
        values: the numbers compared (``baseline``, ``current`` and the like).
        message: what happened, in one sentence with the values.
        check: what to look at before trusting the rewards.
    """

    signal: str
    step: int
    values: dict[str, float] = Field(default_factory=dict)
    message: str
    check: str

    def line(self) -> str:
        """The warning as one log line: ``step 3: answer_length: ... Check: ...``."""
        return f"step {self.step}: reward hacking? {self.signal}: {self.message}. Check: {self.check}"


def _text(message: Message) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = (b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")
        return "\n".join(map(str, texts))
    return ""


def repeated_ngram_fraction(text: str, n: int = 3) -> float | None:
    """The share of the word n-grams of ``text`` that repeat an earlier one, in [0, 1].

    ``"a b c a b c"`` has the 3-grams abc, bca, cab, abc: one repeats, 0.25. ``None`` when the text
    has fewer than ``n`` words (nothing to repeat).
    """
    words = text.lower().split()
    grams = [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]
    if not grams:
        return None
    return 1.0 - len(set(grams)) / len(grams)


def _final_answer(trajectory: Trajectory) -> str | None:
    for message in reversed(trajectory.messages):
        if message.role == "assistant":
            return _text(message)
    return None


def _tool_calls(trajectory: Trajectory) -> int:
    """Tool calls of one rollout: those the model asked for, or those that ran when capture saw more."""
    asked = sum(
        len(m.tool_calls or ()) for h in trajectory.histories() for m in h.messages if m.role == "assistant"
    )
    return max(asked, len(trajectory.tool_records))


def _mean(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None and math.isfinite(v)]
    return statistics.fmean(present) if present else None


def _judged(trajectory: Trajectory, field: Callable[[TrajectoryJudgement], float | None]) -> float | None:
    """``field`` of what RULER left on ``trajectory``; ``None`` when no judge scored it."""
    judged = TrajectoryJudgement.read(trajectory)
    return field(judged) if judged is not None else None


def step_signals(groups: Sequence[TrajectoryGroup], ngram: int = 3) -> dict[str, float]:
    """The monitored numbers of one step's rollouts (a signal without data is left out).

    ``reward`` (mean reward), ``verifiable`` (mean ``TrajectoryJudgement.independent_reward``), ``spearman``
    (RULER vs that reward, :func:`~art_adapters._calibration.calibrate`), ``answer_chars`` (mean
    length of the last assistant message), ``repetition`` (mean :func:`repeated_ngram_fraction` of
    each rollout's assistant text), ``tool_calls`` (per rollout), ``tool_error_rate`` (failed / run
    tool calls) and ``judge_agreement`` (mean ``TrajectoryJudgement.agreement``).
    """
    trajectories = [t for g in groups for t in g.trajectories]
    records = [r for t in trajectories for r in t.tool_records]
    answers = [_final_answer(t) for t in trajectories]
    assistant_text = [
        "\n".join(_text(m) for m in t.messages if m.role == "assistant") for t in trajectories
    ]
    calibration = calibrate(groups)
    found: dict[str, float | None] = {
        "reward": _mean(float(t.reward) if t.reward is not None else None for t in trajectories),
        "verifiable": _mean(_judged(t, lambda j: j.independent_reward) for t in trajectories),
        "spearman": calibration.overall.spearman if calibration is not None else None,
        "answer_chars": _mean(float(len(a)) for a in answers if a is not None),
        "repetition": _mean(repeated_ngram_fraction(text, ngram) for text in assistant_text),
        "tool_calls": _mean(float(_tool_calls(t)) for t in trajectories),
        "tool_error_rate": sum(r.is_error for r in records) / len(records) if records else None,
        "judge_agreement": _mean(_judged(t, lambda j: j.agreement) for t in trajectories),
    }
    return {k: v for k, v in found.items() if v is not None}


class HackingMonitor:
    """Watches a run's steps for reward hacking; :meth:`observe` each step's scored groups.

    ::

        monitor = HackingMonitor(HackingMonitorConfig(window=2))
        for step, groups in enumerate(steps):
            for warning in monitor.observe(step, groups):
                print(warning.line())
    """

    def __init__(self, config: HackingMonitorConfig | None = None) -> None:
        self.config = config or HackingMonitorConfig()
        #: Every observed step's signals, in order: ``(step, signals)``.
        self.history: list[tuple[int, dict[str, float]]] = []
        self._last: dict[str, float] = {}

    def observe(self, step: int, groups: Sequence[TrajectoryGroup]) -> list[HackingWarning]:
        """Record ``step``'s signals and return the warnings they raise (each also logged).

        A step without rollouts (nothing sampled, e.g. an SFT step) is not recorded, nor is a step
        no judge scored (no trajectory with a ``TrajectoryJudgement``): a verifiable reward cannot
        be pleased instead of solved, and a policy that learns to answer more briefly under it is not
        hacking anything (the demo's verifiable check raised such a length warning before).
        """
        if not self.config.enabled:
            return []
        if not any(TrajectoryJudgement.read(t) is not None for g in groups for t in g.trajectories):
            return []
        signals = self._last = step_signals(groups, self.config.ngram)
        if not signals:
            return []
        self.history.append((step, signals))
        warnings = self.check(step)
        for warning in warnings:
            logger.warning("%s", warning.line())
        return warnings

    def latest(self) -> dict[str, float]:
        """The signals of the last :meth:`observe` call (empty when it had no rollouts)."""
        return dict(self._last)

    def _windows(self, name: str) -> tuple[float, float] | None:
        window = self.config.window
        base = [s[name] for _, s in self.history[:window] if name in s]
        recent = [s[name] for _, s in self.history[window:][-window:] if name in s]
        if len(self.history) <= window or not base or not recent:
            return None
        return statistics.fmean(base), statistics.fmean(recent)

    def check(self, step: int) -> list[HackingWarning]:
        """The warnings of the history so far (the current windows against the baseline)."""
        c, out = self.config, []
        reward, verifiable = self._windows("reward"), self._windows("verifiable")
        if reward and verifiable:
            rise, drop = reward[1] - reward[0], verifiable[0] - verifiable[1]
            if rise >= c.reward_rise and drop >= c.verifiable_drop:
                out.append(HackingWarning(
                    signal="reward_vs_verifiable", step=step,
                    values={"reward_baseline": reward[0], "reward": reward[1],
                            "verifiable_baseline": verifiable[0], "verifiable": verifiable[1]},
                    message=f"the reward rose {reward[0]:.3f} -> {reward[1]:.3f} while the verifiable reward "
                    f"fell {verifiable[0]:.3f} -> {verifiable[1]:.3f}",
                    check="read the rollouts the judge scores highest and ask whether they solve the task; "
                    "tighten the rubric or mix in the verifiable reward (combined_scorer)",
                ))  # fmt: skip
        for rule in _DRIFT_RULES:
            window = self._windows(rule.source)
            if window is None or not rule.fires(*window, c):
                continue
            base, recent = window
            values = {f"{rule.value}_baseline": base, rule.value: recent}
            if rule.signal == "answer_length":
                values["ratio"] = recent / base
            out.append(HackingWarning(
                signal=rule.signal, step=step, values=values,
                message=rule.message.format(base=base, recent=recent, c=c, **values),
                check=rule.check,
            ))  # fmt: skip
        return out


_Fires = Callable[[float, float, HackingMonitorConfig], bool]


@dataclass(frozen=True)
class _DriftRule:
    """One signal compared between the baseline window and the current one."""

    signal: str  # the warning's name
    source: str  # the monitored number (a key of step_signals)
    value: str  # the warning's value names: VALUE_baseline and VALUE
    fires: _Fires
    message: str  # formatted with base, recent, c (the config) and the warning's values
    check: str


def _rise(limit: str) -> _Fires:
    """Fires when the signal rose by at least the config's ``limit`` field."""
    return lambda base, recent, c: recent - base >= getattr(c, limit)


def _drop(limit: str) -> _Fires:
    """Fires when the signal fell by at least the config's ``limit`` field."""
    return lambda base, recent, c: base - recent >= getattr(c, limit)


def _length_ratio_out_of_range(base: float, recent: float, c: HackingMonitorConfig) -> bool:
    return base > 0 and not 1 / c.length_ratio < recent / base < c.length_ratio


def _tool_calls_changed(base: float, recent: float, c: HackingMonitorConfig) -> bool:
    return abs(recent - base) / max(base, 1.0) >= c.tool_calls_change


_DRIFT_RULES = (
    _DriftRule("calibration", "spearman", "spearman", _drop("calibration_drop"),
        "RULER's rank agreement with the verifiable reward fell: Spearman {base:.2f} -> {recent:.2f}",
        "compare the judge's explanations with the verifiable check on the pairs they order differently; "
        "run `art-adapters calibrate` on a saved batch to compare judges and rubrics"),
    _DriftRule("answer_length", "answer_chars", "chars", _length_ratio_out_of_range,
        "final answers drifted from {base:.0f} to {recent:.0f} characters on average (x{ratio:.2f})",
        "whether the judge rewards length (verbosity, padding) rather than correctness; state the "
        "expected answer length in the rubric"),
    _DriftRule("repetition", "repetition", "repetition", _rise("repetition_rise"),
        "repeated {c.ngram}-grams in the assistant's text rose from {base:.0%} to {recent:.0%}",
        "read recent rollouts for loops and repeated phrases; lower the temperature or penalise "
        "repetition in the rubric"),
    _DriftRule("tool_calls", "tool_calls", "calls", _tool_calls_changed,
        "tool calls per rollout changed from {base:.2f} to {recent:.2f}",
        "whether the agent stopped using the tools it needs, or calls them to impress the judge"),
    _DriftRule("tool_errors", "tool_error_rate", "error_rate", _rise("tool_error_rise"),
        "the tool error rate rose from {base:.0%} to {recent:.0%}",
        "the failing tool calls' arguments and errors; whether failed runs still score well"),
    _DriftRule("judge_agreement", "judge_agreement", "agreement", _drop("agreement_drop"),
        "the judges agree less: agreement {base:.2f} -> {recent:.2f}",
        "the rollouts the judges disagree on most: the policy may exploit one judge's blind spot"),
)  # fmt: skip


def warnings_row(warnings: Sequence[HackingWarning], signals: dict[str, Any]) -> dict[str, Any]:
    """The metrics-row fields of a step: ``hacking_warnings`` (count), ``hacking_signals`` (the warned
    signals, comma-separated, only when there are some) and ``hacking_answer_chars``,
    ``hacking_repetition``, ``hacking_tool_calls`` (the monitored numbers the row has no other field for:
    the reward, verifiable reward, calibration, tool error rate and judge agreement are there already)."""
    row: dict[str, Any] = {f"hacking_{k}": v for k, v in signals.items() if k in _ROW_SIGNALS}
    row["hacking_warnings"] = len(warnings)
    if warnings:
        row["hacking_signals"] = ",".join(dict.fromkeys(w.signal for w in warnings))
    return row
