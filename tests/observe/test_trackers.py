"""Trackers: real W&B offline runs and Trackio's real local store, rows read back with their own CLIs.

W&B and Trackio keep process-wide state (W&B's service process, console wrapping and atexit hooks;
Trackio's current run and its ``TRACKIO_DIR``, read once at import), so every test that starts a
run does it in a subprocess with its own environment; the selection rules that start nothing run
in-process. Rows are read back as a user would: ``wandb leet inspect --json`` (W&B's documented
reader of an offline run's ``.wandb`` log) and ``trackio get metric|snapshot --json``.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from art_adapters._errors import ConfigError
from art_adapters.observe._trackers import guarded, numeric_row, trackers_from_env
from tests.helpers.processes import run_python

BIN = Path(sys.executable).parent
ROWS = [
    {"loss": 0.5, "reward": 0.25, "entropy": 3, "note": "x", "nan": float("nan"), "ok": True, "step": 0},
    {"loss": 0.4, "reward": 0.5, "entropy": 2, "lr": None},
    {"loss": 0.3, "reward": 0.75, "entropy": 1, "inf": float("inf")},
]
# What each row should become: finite numbers only, "train/" prefixed, no "step", no bools.
EXPECTED = [
    {"train/loss": 0.5, "train/reward": 0.25, "train/entropy": 3},
    {"train/loss": 0.4, "train/reward": 0.5, "train/entropy": 2},
    {"train/loss": 0.3, "train/reward": 0.75, "train/entropy": 1},
]


def _clean_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The test process's environment without any tracker settings, caches kept under tmp_path."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("WANDB_", "TRACKIO_", "HF_", "ART_ADAPTERS_", "LANGFUSE_", "OTEL_"))
    }
    env.update(
        WANDB_SILENT="true",
        WANDB_CONFIG_DIR=str(tmp_path / "wandb-config"),
        WANDB_CACHE_DIR=str(tmp_path / "wandb-cache"),
        WANDB_DATA_DIR=str(tmp_path / "wandb-data"),
        HF_HOME=str(tmp_path / "hf"),
        HF_HUB_OFFLINE="1",
    )
    env.update(extra)
    return env


def _run_python(code: str, env: Mapping[str, str], cwd: Path) -> dict[str, Any]:
    root = str(Path(__file__).resolve().parents[2])
    result = run_python(["-c", textwrap.dedent(code)], env={**env, "PYTHONPATH": root}, cwd=cwd)
    # The script's JSON report is its last line starting with "{" (the SDKs print their own lines
    # around it: Trackio's atexit hook prints "Run finished" again for the run it still holds).
    return json.loads([line for line in result.stdout.splitlines() if line.startswith("{")][-1])


def _cli(args: list[str], env: Mapping[str, str], cwd: Path) -> str:
    result = subprocess.run(
        args, env=dict(env), cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, (args, result.stdout[-2000:], result.stderr[-2000:])
    return result.stdout


LOG_ROWS = f"""
    import json, logging
    from art_adapters.observe._trackers import trackers_from_env
    ROWS = json.loads({json.dumps(ROWS)!r})  # json keeps NaN and inf
    def log_rows(tracker):
        for step, row in enumerate(ROWS):
            tracker.log(step, row)
        tracker.log(2, {{"reward": 0.9, "accuracy": 1}}, split="val")
"""


def test_wandb_offline_run_holds_one_row_per_step(tmp_path: Path) -> None:
    env = _clean_env(tmp_path, WANDB_MODE="offline", WANDB_DIR=str(tmp_path / "wb"))
    report = _run_python(
        LOG_ROWS
        + """
    import wandb
    warnings = []
    class Collect(logging.Handler):
        def emit(self, record):
            warnings.append(record.getMessage())
    logging.getLogger("art_adapters").addHandler(Collect(level=logging.WARNING))

    # A run the user already has open: our tracker must neither reuse nor finish it.
    mine = wandb.init(project="users-own", name="mine")
    trackers = trackers_from_env(project="aa-test", run="run-w", config={"lr": 0.0002, "n": 4})
    assert [t.name for t in trackers] == ["wandb"], trackers
    (tracker,) = trackers
    assert tracker.run is not mine and wandb.run is mine
    log_rows(tracker)
    tracker.finish()
    tracker.log(3, {"loss": 9.0})   # after finish: ignored, no error
    mine.log({"still": 1.0})        # the user's run is still open
    assert wandb.run is mine
    mine.finish()

    # A run finished underneath the tracker: the next log raises inside W&B -> one warning, then skipped.
    broken = trackers_from_env(project="aa-test", run="run-broken")[0]
    broken.run.finish()
    broken.log(0, {"loss": 1.0})
    broken.log(1, {"loss": 1.0})
    broken.finish()
    print(json.dumps({"where": tracker.where, "sync_dir": tracker.run.sync_dir,
                      "broken": [broken.failures, broken.dropped], "warnings": warnings}))
    """,
        env,
        tmp_path,
    )
    sync_dir = report["sync_dir"]
    assert Path(sync_dir).parent == tmp_path / "wb" / "wandb"
    assert report["where"] == f"W&B (offline): {sync_dir}; upload it with: wandb sync {sync_dir}"

    wandb = str(BIN / "wandb")
    lines = _cli([wandb, "leet", "inspect", "--json", sync_dir], env, tmp_path).splitlines()
    records = [json.loads(line) for line in lines]
    history = [r["history"] for r in records if r.get("type") == "history"]
    assert [h["step"]["num"] for h in history] == [0, 1, 2]
    for step, (item, expected) in enumerate(zip((h["item"] for h in history), EXPECTED, strict=True)):
        logged = {k: v for k, v in item.items() if not k.startswith("_")}
        if step == 2:  # the val row logged at the same step shares W&B's row for that step
            expected = {**expected, "val/reward": 0.9, "val/accuracy": 1}
        assert logged == expected, (step, item)

    summary = json.loads(_cli([wandb, "leet", "inspect", "--summary", "--json", sync_dir], env, tmp_path))
    assert (summary["project"], summary["name"], summary["state"]) == ("aa-test", "run-w", "finished")
    assert summary["config"] == {"lr": 0.0002, "n": 4}
    assert summary["summary"]["train/loss"] == 0.3 and summary["summary"]["val/reward"] == 0.9

    assert report["broken"] == [1, 2]
    (warning,) = report["warnings"]
    assert "wandb log failed" in warning and "is finished" in warning


def test_trackio_local_store_holds_one_row_per_step(tmp_path: Path) -> None:
    store = tmp_path / "trackio"
    env = _clean_env(tmp_path, TRACKIO_DIR=str(store))
    report = _run_python(
        LOG_ROWS
        + """
    trackers = trackers_from_env(project="aa-test", run="run-t", config={"lr": 0.0002})
    assert [t.name for t in trackers] == ["trackio"], trackers
    (tracker,) = trackers
    log_rows(tracker)
    tracker.finish()
    print(json.dumps({"where": tracker.where}))
    """,
        env,
        tmp_path,
    )
    assert report["where"] == (
        f"Trackio (local, project 'aa-test', run 'run-t'): {store}; "
        f"view it with: TRACKIO_DIR={store} trackio show --project aa-test"
    )
    assert (store / "aa-test.db").is_file()

    # Every metric at steps 0..2 in one call (`--step 0` is refused by trackio 0.43's CLI: it tests
    # the step for truth, so the window around step 1 is read instead).
    snapshot = json.loads(
        _cli(
            [str(BIN / "trackio"), "get", "snapshot", "--project", "aa-test", "--run", "run-t", "--json",
             "--around", "1", "--window", "1"],
            env,
            tmp_path,
        )
    )
    rows: dict[int, dict[str, float]] = {}
    for name, points in snapshot["metrics"].items():
        for point in points:
            assert name not in rows.setdefault(point["step"], {}), (name, point)  # one value per step
            rows[point["step"]][name] = point["value"]
    expected_rows = dict(enumerate(EXPECTED))
    expected_rows[2] = {**expected_rows[2], "val/reward": 0.9, "val/accuracy": 1}
    assert rows == expected_rows, snapshot


def test_nothing_configured_starts_nothing_and_imports_no_sdk(tmp_path: Path) -> None:
    report = _run_python(
        """
    import json, sys
    from art_adapters.observe._trackers import trackers_from_env
    got = {
        "none": trackers_from_env(project="p", run="r"),
        "disabled": trackers_from_env(project="p", run="r", environ={"WANDB_MODE": "disabled"}),
        "explicit none": trackers_from_env(
            project="p", run="r",
            environ={"ART_ADAPTERS_TRACKERS": "none", "WANDB_MODE": "offline", "TRACKIO_DIR": "x"},
        ),
    }
    print(json.dumps({"got": {k: len(v) for k, v in got.items()},
                      "imported": sorted(m for m in ("wandb", "trackio") if m in sys.modules)}))
    """,
        _clean_env(tmp_path),
        tmp_path,
    )
    assert report == {"got": {"none": 0, "disabled": 0, "explicit none": 0}, "imported": []}


def test_explicit_list_names_must_be_known() -> None:
    with pytest.raises(ConfigError, match=r"unknown tracker\(s\) \['tensorboard'\].*wandb, trackio"):
        trackers_from_env(project="p", run="r", environ={"ART_ADAPTERS_TRACKERS": "wandb,tensorboard"})


@pytest.mark.parametrize(
    ("environ", "package"),
    [
        ({"WANDB_MODE": "offline"}, "wandb"),
        ({"WANDB_API_KEY": "x" * 40}, "wandb"),
        ({"TRACKIO_DIR": "/nonexistent/trackio"}, "trackio"),
        ({"TRACKIO_PROJECT": "p"}, "trackio"),
    ],
)
def test_configured_but_not_installed_is_one_warning(
    environ: dict[str, str], package: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A None entry in sys.modules is Python's documented way to make `import name` fail.
    monkeypatch.setitem(sys.modules, package, None)
    with caplog.at_level(logging.WARNING, logger="art_adapters.observe._trackers"):
        assert trackers_from_env(project="p", run="r", environ=environ) == []
    (record,) = caplog.records
    assert f"{package} is configured by the environment but not installed" in record.getMessage()
    assert "pip install 'art-adapters[trackers]'" in record.getMessage()


@pytest.mark.parametrize("package", ["wandb", "trackio"])
def test_explicit_but_not_installed_is_a_config_error(package: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, package, None)
    with pytest.raises(ConfigError, match=rf"lists '{package}' but the {package} package is not installed: "
                       r"pip install 'art-adapters\[trackers\]'"):
        trackers_from_env(project="p", run="r", environ={"ART_ADAPTERS_TRACKERS": f" {package} "})


class _FlakyTracker:
    """A user's own tracker whose backend goes away after the first row."""

    name = "flaky"
    where = "flaky: nowhere"

    def __init__(self) -> None:
        self.rows: list[tuple[int, dict[str, Any]]] = []

    def log(self, step: int, row: Mapping[str, Any], *, split: str = "train") -> None:
        if self.rows:
            raise ConnectionError("backend went away")
        self.rows.append((step, numeric_row(row, split)))

    def finish(self) -> None:
        raise ConnectionError("backend went away")


def test_a_tracker_that_raises_is_warned_once_then_skipped(caplog: pytest.LogCaptureFixture) -> None:
    inner = _FlakyTracker()
    tracker = guarded(inner)
    assert tracker.name == "flaky" and tracker.where == "flaky: nowhere"
    assert guarded(tracker) is tracker
    with caplog.at_level(logging.WARNING, logger="art_adapters.observe._trackers"):
        for step in range(4):
            tracker.log(step, {"loss": 1.0 / (step + 1)})
        tracker.finish()
    assert inner.rows == [(0, {"train/loss": 1.0})]
    (record,) = caplog.records
    assert "flaky log failed (ConnectionError: backend went away)" in record.getMessage()
    # The row that raised and the two after it; finish is skipped (it would raise too).
    assert (tracker.failures, tracker.dropped, tracker.active) == (1, 3, False)  # type: ignore[attr-defined]


def test_numeric_row_keeps_finite_numbers_only() -> None:
    import fractions

    row = {
        "a": 1, "b": 2.5, "c": fractions.Fraction(1, 4), "t": True, "s": "x", "n": None,
        "nan": float("nan"), "inf": float("-inf"), "list": [1.0], "step": 7,
    }
    assert numeric_row(row, "val") == {"val/a": 1, "val/b": 2.5, "val/c": 0.25}
