"""``art-adapters calibrate GROUPS.jsonl --judge-model M ...``: which judge (or rubric) agrees with the task?

Scores a saved set of groups whose trajectories carry a verifiable reward with each judge and each
rubric (one RULER pass per pair), and prints how each pass ranks the trajectories against that
reward: Spearman rank correlation and pairwise agreement within groups
(:func:`~art_adapters._calibration.calibrate`), per rubric dimension too, and the groups the judge
could not score. A team picks its judge from the table before it trains with it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import typer
from pydantic import BaseModel, ConfigDict, Field
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from art_adapters import Calibration, ConfigError, Trajectory, TrajectoryGroup, calibrate, load_groups
from art_adapters.files import write_atomic
from art_adapters.ruler import (
    GroupJudgement,
    RulerConfig,
    TrajectoryJudgement,
    judge_from_env,
    ruler_score_groups,
)

from ._options import Setting, build_config, config_command, exit_on, quiet_http_logs

__all__ = [
    "CALIBRATE_HELP",
    "CALIBRATE_OPTIONS",
    "CalibrateCommand",
    "CalibrationRow",
    "calibrate_command",
    "calibrate_groups",
    "calibration_table",
    "judges_from_flags",
    "reference_groups",
    "rubrics_from_files",
]

CALIBRATE_HELP = (
    "Score saved groups with one or more judges or rubrics and show how each agrees with the groups' "
    "verifiable reward, to choose a judge before training with it.\n\n"
    "GROUPS.jsonl holds trajectory groups (art_adapters.save_groups, or a run's batches/*.jsonl) whose "
    "trajectories carry a verifiable reward in `reward` (for groups RULER scored already: the "
    "independent_reward RULER kept). Every --judge-model is run with every --rubric (default: RULER's "
    "default rubric). The table shows, per judge and rubric: the mean within-group Spearman rank "
    "correlation with the reward, the pairwise agreement (share of a group's pairs with different "
    "rewards that the judge orders the same way; a judge tie counts half), the same per rubric "
    "dimension, and the groups the judge could not score. A judge endpoint is any OpenAI-compatible "
    "one: --judge-base-url (one for all judges, or one per --judge-model, in order), else "
    "$ART_ADAPTERS_JUDGE_BASE_URL, else the OpenAI API."
)


class CalibrationRow(BaseModel):
    """One judge and rubric on the groups.

    Attributes:
        judge: which judge, and where (no credentials).
        rubric: the rubric's name (``default`` or the file's name).
        groups: the groups scored.
        unscored: how many of them the judge could not score.
        reasons: why, one line per unscored group (the group id first).
        calibration: the agreement with the verifiable reward; ``None`` when no scored group had two
            trajectories with a reward to compare.
    """

    judge: str
    rubric: str
    groups: int
    unscored: int = 0
    reasons: list[str] = Field(default_factory=list)
    calibration: Calibration | None = None


def judges_from_flags(
    models: Sequence[str], base_urls: Sequence[str] = (), api_keys: Sequence[str] = ()
) -> list[tuple[Any, str]]:
    """``(chat model, line)`` per judge: each ``--judge-model`` with its endpoint and key.

    ``base_urls`` and ``api_keys`` hold none (the environment's, see
    :func:`~art_adapters.ruler.judge_from_env`), one (for every judge) or one per model, in order.
    No model at all: the judge of the environment.

    Raises:
        ConfigError: no judge anywhere, or a count of endpoints/keys that matches no model count.
    """

    def per_model(values: Sequence[str], flag: str) -> list[str | None]:
        if not values:
            return [None] * max(len(models), 1)
        if len(values) == 1:
            return [values[0]] * max(len(models), 1)
        if len(values) == len(models):
            return list(values)
        raise ConfigError(
            f"{len(values)} {flag} for {len(models)} --judge-model: give one {flag} for all judges "
            "or one per --judge-model, in the same order"
        )

    urls, keys = per_model(base_urls, "--judge-base-url"), per_model(api_keys, "--judge-api-key")
    out: list[tuple[Any, str]] = []
    for model, url, key in zip(list(models) or [None], urls, keys, strict=True):
        found = judge_from_env(model, base_url=url, api_key=key)
        if found is None:
            raise ConfigError(
                "no judge: pass --judge-model MODEL (with --judge-base-url URL for an OpenAI-compatible "
                "endpoint) or set $ART_ADAPTERS_JUDGE_MODEL (or $OPENAI_API_KEY)"
            )
        out.append(found)
    return out


def rubrics_from_files(paths: Sequence[Path]) -> list[tuple[str, dict[str, Any]]]:
    """``(name, RULER settings)`` per ``--rubric`` file; ``[("default", {})]`` without one.

    A ``.json`` file holds :class:`~art_adapters.RulerConfig` settings (``rubric``, rubric dimensions
    and their weights...), checked here; any other file is the rubric's text.

    Raises:
        ConfigError: a file that cannot be read, is empty, or holds settings RulerConfig refuses.
    """
    if not paths:
        return [("default", {})]
    out: list[tuple[str, dict[str, Any]]] = []
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"--rubric {path}: cannot read it ({exc})") from exc
        if not text.strip():
            raise ConfigError(f"--rubric {path} is empty: write the rubric's text in it")
        if path.suffix == ".json":
            try:
                settings = json.loads(text)
                if not isinstance(settings, dict):
                    raise ValueError("not a JSON object")
                RulerConfig(**settings)
            except ValueError as exc:  # JSONDecodeError and pydantic's ValidationError are ValueErrors
                raise ConfigError(
                    f"--rubric {path}: not a JSON object of RulerConfig settings "
                    f'(e.g. {{"rubric": "..."}}): {exc}'
                ) from exc
        else:
            settings = {"rubric": text}
        out.append((path.name, settings))
    return out


def _reference(trajectory: Trajectory) -> Trajectory:
    """A copy carrying only its verifiable reward as ``reward`` (RULER keeps it as ``independent_reward``)."""
    copy = trajectory.model_copy(deep=True)
    judged = TrajectoryJudgement.read(copy)
    if judged is not None:  # scored by RULER before: its reward is that score
        copy.reward = judged.independent_reward
    TrajectoryJudgement.forget(copy)
    return copy


def reference_groups(
    groups: Sequence[TrajectoryGroup], source: str = "the groups"
) -> list[TrajectoryGroup]:
    """The groups with each trajectory's verifiable reward as its ``reward`` and no earlier judge's scores.

    Raises:
        ConfigError: no trajectory has a verifiable reward (nothing to calibrate against).
    """
    out = [g.model_copy(update={"trajectories": [_reference(t) for t in g.trajectories]}) for g in groups]
    if not any(t.reward is not None for g in out for t in g.trajectories):
        raise ConfigError(
            f"{source}: no trajectory has a reward to calibrate against: calibrate compares the judge "
            "with the verifiable reward each trajectory carries in `reward` (score the groups with your "
            "check first, e.g. art_adapters.verifiable_scorer, and save them with save_groups)"
        )
    return out


async def calibrate_groups(
    groups: Sequence[TrajectoryGroup],
    judges: Sequence[tuple[Any, str]],
    rubrics: Sequence[tuple[str, dict[str, Any]]],
    config: RulerConfig | None = None,
) -> list[CalibrationRow]:
    """Score ``groups`` (verifiable rewards as ``reward``, :func:`reference_groups`) with every judge
    and rubric, one RULER pass each (groups the judge fails on are kept unscored), and calibrate each pass.
    """
    base = (config or RulerConfig()).model_copy(update={"swallow_exceptions": True})
    rows: list[CalibrationRow] = []
    for judge, line in judges:
        for name, settings in rubrics:
            given = {field: getattr(base, field) for field in base.model_fields_set}
            ruler = RulerConfig(**{**given, **settings, "swallow_exceptions": True})
            scored = await ruler_score_groups(list(groups), judge, config=ruler)
            judgements = [(g, GroupJudgement.read(g)) for g in scored]
            failed = [(g, j) for g, j in judgements if j is None or not j.is_scored]
            rows.append(CalibrationRow(
                judge=line, rubric=name, groups=len(scored), unscored=len(failed),
                reasons=[f"{g.id}: {j.reason if j is not None else None}" for g, j in failed],
                calibration=calibrate(scored),
            ))  # fmt: skip
    return rows


def _number(value: float | None, percent: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:.0%}" if percent else f"{value:+.2f}"


def calibration_table(rows: Sequence[CalibrationRow]) -> Table:
    """The rich table: one row per judge and rubric, a column pair per rubric dimension."""
    dimensions = sorted({d for r in rows if r.calibration for d in r.calibration.dimensions})
    table = Table(title="RULER against the verifiable reward (within groups)")
    table.add_column("judge")
    table.add_column("rubric")
    table.add_column("Spearman", justify="right")
    table.add_column("pairwise agreement", justify="right")
    table.add_column("pairs", justify="right")
    for name in dimensions:
        table.add_column(f"{name} Spearman", justify="right")
        table.add_column(f"{name} agreement", justify="right")
    table.add_column("unscored groups", justify="right")
    for row in rows:
        c = row.calibration
        overall = c.overall if c else None
        cells = [
            escape(row.judge),
            escape(row.rubric),
            _number(overall.spearman if overall else None),
            _number(overall.pairwise if overall else None, percent=True),
            str(overall.pairs if overall else 0),
        ]
        for name in dimensions:
            d = c.dimensions.get(name) if c else None
            cells += [_number(d.spearman if d else None), _number(d.pairwise if d else None, percent=True)]
        cells.append(f"{row.unscored} of {row.groups}")
        table.add_row(*cells)
    return table


class CalibrateCommand(BaseModel):
    """The settings of ``art-adapters calibrate``, each a command-line option (its help is the description)."""

    model_config = ConfigDict(extra="forbid")

    groups_file: Path = Field(description="Trajectory groups with verifiable rewards.")
    judge_model: list[str] = Field(
        default_factory=list, description="A judge model (repeat to compare several)."
    )
    judge_base_url: list[str] = Field(
        default_factory=list, description="The judges' endpoint: one for all, or one per --judge-model."
    )
    judge_api_key: list[str] = Field(
        default_factory=list, repr=False, description="The endpoints' key: one for all, or one per judge."
    )
    rubric: list[Path] = Field(
        default_factory=list, description="A rubric (text, or .json RulerConfig settings); repeat to compare."
    )
    ruler: RulerConfig = Field(default_factory=RulerConfig, description="The RULER settings of every pass.")
    out: Path | None = Field(default=None, description="Also write the rows as JSON here.")


#: ``calibrate``'s options, in help order: the command's settings, and RulerConfig's with RulerConfig's
#: defaults and help.
CALIBRATE_OPTIONS = [
    Setting("groups_file", argument=True, extra={"metavar": "GROUPS.jsonl"}),
    Setting("judge_model", extra={"metavar": "MODEL"}),
    Setting("judge_base_url", extra={"metavar": "URL"}),
    Setting("judge_api_key", extra={"metavar": "KEY"}),
    Setting("rubric", extra={"metavar": "FILE"}),
    Setting("ruler.max_concurrency"),
    Setting("ruler.judge_timeout_s"),
    Setting("ruler.max_retries"),
    Setting(
        "ruler.cache",
        decls=("--cache/--no-cache",),
        annotation=bool,
        extra={"help": "Reuse cached judge answers (RulerConfig.cache)."},
    ),
    Setting("out", extra={"metavar": "PATH"}),
]


@config_command(CalibrateCommand, CALIBRATE_OPTIONS, ranges=True)
def calibrate_command(**options: Any) -> None:
    """Compare judges and rubrics on saved groups (see ``CALIBRATE_HELP``)."""
    quiet_http_logs()
    console = Console()
    with exit_on(console, ValueError):  # pydantic's ValidationError: a value the model refuses
        command = build_config(CalibrateCommand, options, CALIBRATE_OPTIONS)
    with exit_on(console, ConfigError):
        try:
            loaded = load_groups(command.groups_file)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot read {command.groups_file}: {exc}") from exc
        groups = reference_groups(loaded, str(command.groups_file))
        judges = judges_from_flags(command.judge_model, command.judge_base_url, command.judge_api_key)
        rubrics = rubrics_from_files(command.rubric)
        passes = len(judges) * len(rubrics)
        with console.status(f"scoring {len(groups)} groups with {passes} judge/rubric pairs..."):
            rows = asyncio.run(calibrate_groups(groups, judges, rubrics, command.ruler))
    console.print(calibration_table(rows))
    for row in rows:
        for reason in row.reasons:
            where = f"{escape(row.judge)} / {escape(row.rubric)}"
            console.print(f"[yellow]{where}: unscored {escape(reason)}[/yellow]")
    if command.out is not None:
        rows_json = json.dumps([r.model_dump(mode="json") for r in rows], indent=2)
        write_atomic(command.out, rows_json.encode("utf-8"))
        console.print(f"rows written to {escape(str(command.out))}")
    if not any(r.calibration for r in rows):
        console.print("[red]no judge could be calibrated: no scored group had two rewards to compare[/red]")
        raise typer.Exit(code=1)
