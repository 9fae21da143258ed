"""Durability on disk: make a file's or a folder's contents (a rename into it included) survive a crash."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["fsync_path", "write_atomic"]


def fsync_path(path: str | os.PathLike[str]) -> None:
    """``fsync`` the file or directory at ``path`` (for a directory: the entries created or renamed in it)."""
    fd = os.open(Path(path), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Replace the file at ``path`` with ``data`` all at once: a reader sees the old or the new file, never half."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, target)
    fsync_path(target.parent)
