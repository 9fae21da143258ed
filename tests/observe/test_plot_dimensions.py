"""plot_run charts the judge's side of a run (issue 16): the RULER rubric dimensions' means, calibration
against the verifiable reward and the judges' agreement, from a hand-written ``metrics.jsonl``; a run
without them gets exactly the charts it always got."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from art_adapters.observe import plot_run

#: The charts every run with reward, loss, KL, exception and tool rates gets, in order.
CLASSIC = [
    "reward.png", "loss.png", "kl.png", "exception_rate.png", "tool_call_rate.png", "tool_error_rate.png"
]  # fmt: skip
JUDGE_SIDE = ["ruler_dimensions.png", "calibration.png", "judge_agreement.png"]


def write_rows(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def classic_rows(step: int) -> list[dict[str, Any]]:
    """What a run before issue 16 wrote for one step (a single judge: ``ruler_score_mean`` only)."""
    return [
        {
            "step": step, "split": "train", "reward_mean": 0.1 * step, "reward_std": 0.05,
            "reward_min": 0.0, "reward_max": 0.2 * step, "exception_rate": 0.0, "trajectories": 8,
            "ruler_score_mean": 0.1 * step, "independent_reward_mean": 0.5, "prompt_tokens_mean": 300.0,
            "tool_call_rate": 0.5, "tool_error_rate": 0.1,
        },
        {"step": step, "split": "train", "loss": 1.0 / (step + 1), "kl": 0.01 * step},
    ]  # fmt: skip


def judged_rows(step: int) -> list[dict[str, Any]]:
    """A step of a run judged on two dimensions by an ensemble, with calibration in train and val."""
    rows = classic_rows(step)
    rows[0].update(
        ruler_correctness_mean=0.2 + 0.1 * step,
        ruler_efficiency_mean=0.9 - 0.05 * step,
        judge_agreement_mean=0.7 + 0.02 * step,
        calibration_spearman=0.3 + 0.1 * step,
        calibration_pairwise=0.6 + 0.05 * step,
        calibration_spearman_correctness=0.5,
        calibration_pairs=12,
        calibration_groups=3,
    )
    rows.append(
        {"step": step, "split": "val", "reward_mean": 0.4, "ruler_correctness_mean": 0.5,
         "calibration_spearman": 0.2 + 0.1 * step, "calibration_pairwise": 0.55}
    )  # fmt: skip
    return rows


def assert_pngs(paths: list[Path]) -> None:
    for path in paths:
        data = path.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n", path
        assert len(data) > 10_000, f"{path.name} is {len(data)} bytes: an empty chart?"


def test_a_run_without_the_judge_side_gets_the_same_charts_as_before(tmp_path: Path) -> None:
    run = tmp_path / "old"
    write_rows(run / "metrics.jsonl", [row for step in range(4) for row in classic_rows(step)])
    paths = plot_run(run)
    assert [p.name for p in paths] == CLASSIC
    # ruler_score_mean alone is no dimension: nothing else is written
    assert sorted(p.name for p in (run / "plots").iterdir()) == sorted(CLASSIC)


def test_dimensions_calibration_and_agreement_each_get_a_chart(tmp_path: Path) -> None:
    run = tmp_path / "judged"
    write_rows(run / "metrics.jsonl", [row for step in range(4) for row in judged_rows(step)])
    paths = plot_run(run, tmp_path / "charts")
    assert [p.name for p in paths] == CLASSIC + JUDGE_SIDE
    assert sorted(p.name for p in (tmp_path / "charts").iterdir()) == sorted(CLASSIC + JUDGE_SIDE)
    assert_pngs(paths)


def test_each_judge_chart_only_when_its_metrics_are_there(tmp_path: Path) -> None:
    # A single judge with dimensions, calibrated: no agreement (that needs an ensemble).
    rows = [row for step in range(3) for row in judged_rows(step)]
    for row in rows:
        row.pop("judge_agreement_mean", None)
    write_rows(tmp_path / "a" / "metrics.jsonl", rows)
    paths = plot_run(tmp_path / "a")
    assert [p.name for p in paths] == [*CLASSIC, "ruler_dimensions.png", "calibration.png"]
    assert_pngs(paths)

    # Only the judge's side (a run that logged no reward, loss or tool rates): still plotted.
    only = [
        {"step": s, "split": "train", "ruler_clarity_mean": 0.1 * s, "judge_agreement_mean": 0.9}
        for s in range(3)
    ]
    write_rows(tmp_path / "b" / "metrics.jsonl", only)
    assert [p.name for p in plot_run(tmp_path / "b")] == ["ruler_dimensions.png", "judge_agreement.png"]


def test_more_dimensions_draw_more_lines(tmp_path: Path) -> None:
    """The dimensions' chart has one line per dimension: a second dimension changes the picture."""
    one = [{"step": s, "split": "train", "ruler_correctness_mean": 0.2 * s} for s in range(4)]
    two = [{**row, "ruler_efficiency_mean": 0.9 - 0.2 * row["step"]} for row in one]
    write_rows(tmp_path / "one" / "metrics.jsonl", one)
    write_rows(tmp_path / "two" / "metrics.jsonl", two)
    (single,) = plot_run(tmp_path / "one")
    (double,) = plot_run(tmp_path / "two")
    assert single.name == double.name == "ruler_dimensions.png"
    assert single.read_bytes() != double.read_bytes()
