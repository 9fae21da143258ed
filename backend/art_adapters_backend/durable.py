"""Durability on disk: make a file's or a folder's contents (a rename into it included) survive a crash."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["fsync_path", "make_dirs", "write_atomic"]


def fsync_path(path: str | os.PathLike[str]) -> None:
    """``fsync`` the file or directory at ``path`` (for a directory: the entries created or renamed in it)."""
    fd = os.open(Path(path), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dirs(path: str | os.PathLike[str]) -> Path:
    """Create the folder ``path`` and its missing parents, each one's entry fsynced into its parent.

    A plain ``mkdir(parents=True)`` may lose the new folders in a crash even after files
    written inside them were fsynced; returns ``path``.
    """
    folder = Path(path)
    missing = []
    probe = folder
    while not probe.exists():
        missing.append(probe)
        probe = probe.parent
    folder.mkdir(parents=True, exist_ok=True)
    for created in reversed(missing):
        fsync_path(created.parent)
    return folder


def write_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Replace the file at ``path`` with ``data`` all at once: a reader sees the old or new file, never half.

    The data is fsynced before the rename and the folder after it, so after a crash the file
    is the old or the new one, and once this returns it is the new one. On an error the
    temporary file is removed and the old file is untouched.
    """
    target = Path(path)
    make_dirs(target.parent)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_path(target.parent)
