"""The folders a model's first checkpoint and first saved groups create survive a crash with them:
each new folder is fsynced into its parent (``models/<name>/checkpoints``, ``.../groups``).

The real calls run; a wrapper around ``os`` only records which file or folder each ``fsync``,
``replace``/``rename`` and ``mkdir`` touched, in order (Linux: fds named via /proc).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from art_adapters_backend.training.checkpoints import CheckpointStore
from art_adapters_backend.training.service import write_groups_file

from art_adapters import Trajectory, TrajectoryGroup, load_groups

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="names fsynced descriptors via /proc/self/fd")


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, str]]]:
    """The ordered ``(op, path)`` file-system calls made during the test."""
    recorded: list[tuple[str, str]] = []

    def wrap(name: str, describe: Callable[..., str]) -> None:
        real = getattr(os, name)

        def traced(*args: Any, **kwargs: Any) -> Any:
            result = real(*args, **kwargs)
            recorded.append((name, describe(*args)))
            return result

        monkeypatch.setattr(os, name, traced)

    wrap("fsync", lambda fd: os.readlink(f"/proc/self/fd/{fd}"))
    wrap("mkdir", lambda path, *a: str(Path(path).resolve()))
    wrap("replace", lambda src, dst, *a: f"{Path(src).resolve()} -> {Path(dst).resolve()}")
    yield recorded


def _assert_new_folders_fsynced(calls: list[tuple[str, str]], expected: list[Path]) -> None:
    made = [(i, path) for i, (op, path) in enumerate(calls) if op == "mkdir" and Path(path) in expected]
    assert [Path(p) for _, p in made] == expected, calls
    for i, path in made:
        parent = str(Path(path).parent)
        assert ("fsync", parent) in calls[i:], f"new folder {path}: its parent {parent} was not fsynced"


def test_first_checkpoint_fsyncs_the_folders_it_creates(tmp_path: Path, calls: list[tuple[str, str]]) -> None:
    models = (tmp_path / "run").resolve()
    models.mkdir()
    root = models / "models" / "agent" / "checkpoints"

    def writer(folder: Path) -> None:
        (folder / "adapter_config.json").write_text("{}")

    checkpoint = CheckpointStore(root).write(1, writer, {"loss": 0.5})
    _assert_new_folders_fsynced(calls, [models / "models", models / "models" / "agent", root])
    assert ("fsync", str(root)) in calls  # the checkpoint's own rename
    assert checkpoint.path == root / "000001" and (checkpoint.path / "checkpoint.json").is_file()


def test_groups_file_fsynced_before_rename_and_new_folder(tmp_path: Path, calls: list[tuple[str, str]]) -> None:
    folder = (tmp_path / "models" / "agent" / "groups").resolve()
    group = TrajectoryGroup(trajectories=[Trajectory(messages=[{"role": "user", "content": "x"}], reward=0.0)])
    path = write_groups_file(folder / "step-000001.jsonl", [group])
    _assert_new_folders_fsynced(calls, [folder.parent.parent, folder.parent, folder])
    rename = next(i for i, (op, p) in enumerate(calls) if op == "replace" and p.endswith(f"-> {path}"))
    tmp = calls[rename][1].split(" -> ")[0]
    assert ("fsync", tmp) in calls[:rename] and ("fsync", str(folder)) in calls[rename:]
    assert load_groups(path)[0].trajectories[0].reward == 0.0
