"""Checkpoint folders: atomic writes (kill -9 and exceptions mid-write), listing, retention, cleanup."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from art_adapters_backend.training.checkpoints import CheckpointStore

from art_adapters.files import TMP_PREFIX, atomic_directory


def _writer(content: str):
    def write(folder: Path) -> None:
        (folder / "adapter_config.json").write_text("{}")
        (folder / "adapter_model.safetensors").write_text(content)

    return write


def test_a_kill_during_the_write_leaves_no_visible_checkpoint(tmp_path: Path) -> None:
    root = tmp_path / "ckpts"
    CheckpointStore(root).write(1, _writer("step one"), {"reward_mean": 0.1})
    started = tmp_path / "started"
    script = textwrap.dedent(
        f"""
        import time
        from pathlib import Path
        from art_adapters_backend.training.checkpoints import CheckpointStore

        def slow_writer(folder):
            (folder / "adapter_config.json").write_text("{{}}")
            with open(folder / "adapter_model.safetensors", "wb") as handle:
                handle.write(b"x" * 1_000_000)
                handle.flush()
                Path({str(started)!r}).write_text("go")
                time.sleep(60)  # killed here, mid-write

        CheckpointStore({str(root)!r}).write(2, slow_writer)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + 60
        while not started.exists():
            assert proc.poll() is None, "the writer exited before the kill"
            assert time.monotonic() < deadline, "the writer never started"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
    # The partial folder exists on disk, hidden; readers never see step 2.
    assert any(p.name.startswith(TMP_PREFIX) for p in root.iterdir())
    assert not (root / "000002").exists()
    store = CheckpointStore(root)  # a restart cleans up
    assert [c.step for c in store.checkpoints()] == [1] and store.latest().step == 1
    assert len(store.removed_partial) == 1
    assert not any(p.name.startswith(TMP_PREFIX) for p in root.iterdir())
    assert store.write(2, _writer("step two")).step == 2  # the interrupted step can be written again


def test_an_exception_between_write_and_rename_leaves_nothing(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)

    def failing(folder: Path) -> None:
        _writer("half")(folder)
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        store.write(3, failing)
    assert list(tmp_path.iterdir()) == [] and store.latest() is None
    with pytest.raises(KeyError), atomic_directory(tmp_path / "adapter") as tmp:
        (tmp / "a").write_text("1")
        raise KeyError("boom")
    assert list(tmp_path.iterdir()) == []


def test_checkpoints_are_never_overwritten_and_need_a_manifest(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    store.write(1, _writer("a"))
    with pytest.raises(FileExistsError):
        store.write(1, _writer("b"))
    assert (store.path(1) / "adapter_model.safetensors").read_text() == "a"
    (tmp_path / "000007").mkdir()  # a folder without a manifest is not a checkpoint
    (tmp_path / "notes").mkdir()
    assert [c.step for c in store.checkpoints()] == [1]
    with pytest.raises(ValueError):
        store.path(-1)


def test_retention_keeps_the_latest_the_best_and_protected_steps(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    rewards = {1: 0.2, 2: 0.9, 3: 0.4, 4: 0.5, 5: 0.3}
    for step, reward in rewards.items():
        store.write(step, _writer(str(step)), {"reward_mean": reward})
    store.write(6, _writer("6"))  # no metric: never "best"
    deleted = store.retain(keep_latest=2, best_metric="reward_mean", protect={3})
    assert deleted == [1, 4]
    assert [c.step for c in store.checkpoints()] == [2, 3, 5, 6]
    assert store.retain(keep_latest=1, best_metric="reward_mean", mode="min") == [2, 3]
    assert [c.step for c in store.checkpoints()] == [5, 6]
    assert not any(p.name.startswith(TMP_PREFIX) for p in tmp_path.iterdir())
    with pytest.raises(ValueError, match="keep_latest"):
        store.retain(keep_latest=0)
    with pytest.raises(FileNotFoundError):
        store.delete(42)
