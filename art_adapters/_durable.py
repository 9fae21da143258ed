"""Durability on disk for the client: files that are whole after a crash, and folders that stay.

The backend re-exports these (``art_adapters_backend.durable``): one implementation for both. Use :func:`write_atomic` for any file whose loss costs
work (saved groups, RULER answers), :func:`make_dirs` for folders created to hold one.
"""

from __future__ import annotations

import os
import uuid
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
    """Create the folder ``path`` and its missing parents, each one's entry fsynced into its parent."""
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


def write_atomic(path: str | os.PathLike[str], data: bytes) -> Path:
    """Replace the file at ``path`` with ``data`` all at once; returns ``path``.

    The data is fsynced before the rename and the folder after it: after a crash the file is
    the old or the new one, never empty or half, and once this returns it is the new one. On
    an error the temporary file is removed and the old file is untouched.
    """
    target = Path(path)
    make_dirs(target.parent)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
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
    return target
