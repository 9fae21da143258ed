"""Files whose loss costs work are fsynced before they replace the old one, and new folders are
fsynced into their parents: ``save_groups`` (the loop's saved batches) and the RULER cache.

The real calls run; a wrapper around ``os`` only records which file or folder each
``fsync``, ``replace``/``rename`` and ``mkdir`` touched, in order (Linux: fds named via /proc).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from art_adapters import Trajectory, TrajectoryGroup, load_groups, save_groups
from art_adapters.ruler._answer import JudgeScore
from art_adapters.ruler._cache import RulerCache

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="names fsynced descriptors via /proc/self/fd")


class OsTrace:
    """The ordered file-system calls made while installed: ``(op, path)`` tuples."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def fsynced_before_replace(self, target: Path) -> None:
        """The file renamed onto ``target`` was fsynced before the rename, its folder after."""
        renames = [i for i, (op, path) in enumerate(self.calls) if op == "replace" and path.endswith(f"-> {target}")]
        assert renames, f"nothing was renamed onto {target}: {self.calls}"
        at = renames[-1]
        tmp = self.calls[at][1].split(" -> ")[0]
        assert ("fsync", tmp) in self.calls[:at], f"{tmp} was not fsynced before replacing {target}: {self.calls}"
        assert ("fsync", str(target.parent)) in self.calls[at:], f"{target.parent} not fsynced: {self.calls}"

    def new_folders_fsynced(self) -> list[str]:
        """Every folder created was fsynced into its parent after it was made; returns them."""
        made = [(i, path) for i, (op, path) in enumerate(self.calls) if op == "mkdir"]
        for i, path in made:
            parent = str(Path(path).parent)
            assert ("fsync", parent) in self.calls[i:], f"new folder {path}: {parent} not fsynced: {self.calls}"
        return [path for _, path in made]


@pytest.fixture
def os_trace(monkeypatch: pytest.MonkeyPatch) -> Iterator[OsTrace]:
    trace = OsTrace()

    def wrap(name: str, describe: Callable[..., str]) -> None:
        real = getattr(os, name)

        def traced(*args: Any, **kwargs: Any) -> Any:
            result = real(*args, **kwargs)
            trace.calls.append((name if name != "rename" else "replace", describe(*args)))
            return result

        monkeypatch.setattr(os, name, traced)

    wrap("fsync", lambda fd: os.readlink(f"/proc/self/fd/{fd if isinstance(fd, int) else fd.fileno()}"))
    wrap("replace", lambda src, dst, *a: f"{Path(src).resolve()} -> {Path(dst).resolve()}")
    wrap("rename", lambda src, dst, *a: f"{Path(src).resolve()} -> {Path(dst).resolve()}")
    wrap("mkdir", lambda path, *a: str(Path(path).resolve()))
    yield trace


def _group() -> TrajectoryGroup:
    return TrajectoryGroup(trajectories=[Trajectory(messages=[{"role": "user", "content": "hi"}], reward=1.0)])


def test_save_groups_fsyncs_the_file_before_replacing_and_new_folders(tmp_path: Path, os_trace: OsTrace) -> None:
    target = (tmp_path / "run" / "batches" / "batch-000001.scored.jsonl").resolve()
    save_groups(target, [_group()])
    os_trace.fsynced_before_replace(target)
    assert os_trace.new_folders_fsynced() == [str(target.parent.parent), str(target.parent)]
    assert len(load_groups(target)) == 1
    assert [p.name for p in target.parent.iterdir()] == [target.name]  # no temporary file left


def test_ruler_cache_entry_is_fsynced_before_replacing(tmp_path: Path, os_trace: OsTrace) -> None:
    cache = RulerCache(tmp_path / "ruler")
    scores = {"t1": JudgeScore(trajectory_id="t1", explanation="fine", score=0.5)}
    cache.put("ab" + "0" * 62, "judge", scores)
    target = cache._path("ab" + "0" * 62).resolve()
    os_trace.fsynced_before_replace(target)
    assert os_trace.new_folders_fsynced() == [str(target.parent.parent), str(target.parent)]
    assert cache.get("ab" + "0" * 62, ["t1"]) == scores
