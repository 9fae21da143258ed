"""Private files and folders: run directories, logs and caches hold prompts, so only their owner may read them.

Modes are set explicitly (``chmod`` after creating), so they do not depend on the umask:
folders ``0o700``, files ``0o600``. An existing folder is never changed (it may be shared on
purpose, or be ``.`` or ``/tmp``); one that others can read gets a warning saying how to fix it.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

from ._durable import fsync_path

__all__ = ["PRIVATE_DIR_MODE", "PRIVATE_FILE_MODE", "open_private", "private_dir"]

logger = logging.getLogger(__name__)

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600


def _ours(uid: int) -> bool:
    geteuid = getattr(os, "geteuid", None)  # not on Windows, where modes mean little
    return geteuid is not None and uid == geteuid()


def private_dir(path: str | os.PathLike[str]) -> Path:
    """Create ``path`` and its missing parents as ``0o700`` folders (existing ones are left alone;
    ``path`` itself, if ours and open to others, is warned about). Returns ``path``."""
    folder = Path(path)
    missing = []
    for parent in (folder, *folder.parents):
        if parent.exists():
            break
        missing.append(parent)
    folder.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
    for created in missing:
        os.chmod(created, PRIVATE_DIR_MODE)  # mkdir's mode is cut by the umask; chmod is not
        fsync_path(created.parent)  # the new folder's entry survives a crash with what goes in it
    if not missing:
        info = folder.stat()
        if _ours(info.st_uid) and stat.S_IMODE(info.st_mode) & 0o077:
            # Never changed for you: it may be a shared folder (a run dir of ".", "/tmp") on purpose.
            logger.warning(
                "%s is readable by other users (mode %o) and will hold prompts; `chmod 700 %s` to make "
                "it private", folder, stat.S_IMODE(info.st_mode), folder,
            )  # fmt: skip
    return folder


def open_private(path: str | os.PathLike[str], flags: int = os.O_WRONLY | os.O_CREAT | os.O_APPEND) -> int:
    """``os.open`` a file with mode ``0o600`` (a regular file of ours that existed is set to it too);
    returns the descriptor."""
    fd = os.open(path, flags, PRIVATE_FILE_MODE)
    try:
        info = os.fstat(fd)
        if _ours(info.st_uid) and stat.S_ISREG(info.st_mode):  # not /dev/null or a pipe
            os.fchmod(fd, PRIVATE_FILE_MODE)
    except OSError:
        os.close(fd)
        raise
    return fd
