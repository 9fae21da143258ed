"""Durability on disk: make a file's or a folder's contents (a rename into it included) survive a crash."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["fsync_path"]


def fsync_path(path: str | os.PathLike[str]) -> None:
    """``fsync`` the file or directory at ``path`` (for a directory: the entries created or renamed in it)."""
    fd = os.open(Path(path), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
