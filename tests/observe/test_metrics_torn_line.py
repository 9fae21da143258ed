"""``MetricsHistory.append`` after a torn last line (a crash mid-write) cuts it off first."""

from __future__ import annotations

import json
from pathlib import Path

from art_adapters.observe import MetricsHistory


def test_a_row_appended_after_a_torn_line_is_kept(tmp_path: Path) -> None:
    history = MetricsHistory(tmp_path)
    history.append(0, {"reward_mean": 0.25})
    with history.path.open("a", encoding="utf-8") as handle:  # what a crash mid-append leaves
        handle.write('{"step": 1, "split": "train", "reward_me')

    history.append(2, {"reward_mean": 0.75})
    history.append(3, {"reward_mean": 1.0})

    assert [row["step"] for row in history.rows()] == [0, 2, 3]
    assert history.series("reward_mean") == ([0, 2, 3], [0.25, 0.75, 1.0])
    lines = history.path.read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["step"] for line in lines] == [0, 2, 3]  # the torn row, never acknowledged, cut


def test_no_blank_line_is_added_after_a_whole_row(tmp_path: Path) -> None:
    history = MetricsHistory(tmp_path / "metrics.jsonl")
    for step in range(3):
        history.append(step, {"loss": float(step)})
    text = history.path.read_text(encoding="utf-8")
    assert text.count("\n") == 3 and "\n\n" not in text
