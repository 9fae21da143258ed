"""Reading a training run's ``metrics.jsonl`` the way the demo and learning tests need it."""

from __future__ import annotations

import json
from pathlib import Path


def trained_rows(run_dir: Path) -> list[dict]:
    """The ``train`` rows of the iterations that trained (they carry the trainer's ``loss``), in order.

    An iteration whose groups all scored alike trains nothing and still writes a row, at the step it
    stayed at; those are left out.
    """
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines if line.strip()]
    return [row for row in rows if row.get("split") == "train" and "loss" in row]
