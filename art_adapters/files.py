"""Files that survive a crash and folders only their owner reads: one implementation for every package.

Use :func:`write_atomic` for any file whose loss costs work, :func:`append_durably` for a JSON Lines
log, :func:`atomic_directory` for a folder that must appear whole, :func:`private_dir` /
:func:`open_private` for anything holding prompts. One implementation (one temp-name scheme, one fsync
rule, one crash rule for appends) that the backend and :mod:`mcp_tools` use too.
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = [
    "PRIVATE_DIR_MODE",
    "PRIVATE_FILE_MODE",
    "TMP_PREFIX",
    "append_durably",
    "atomic_directory",
    "cut_torn_line",
    "fsync_path",
    "make_dirs",
    "open_private",
    "private_dir",
    "write_atomic",
]

logger = logging.getLogger(__name__)

#: Mode of the folders made by :func:`private_dir` (set by ``chmod``, so the umask does not matter).
PRIVATE_DIR_MODE = 0o700
#: Mode of the files opened by :func:`open_private`.
PRIVATE_FILE_MODE = 0o600
#: Prefix of every temporary file or folder written here (``.tmp-<name>-<8 hex>``, beside its target),
#: so a folder's leftovers from a crash can be found and removed.
TMP_PREFIX = ".tmp-"


def _temp_path(target: Path) -> Path:
    """A fresh hidden name beside ``target``: the one temporary-name scheme."""
    return target.with_name(f"{TMP_PREFIX}{target.name}-{uuid.uuid4().hex[:8]}")


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


def write_atomic(path: str | os.PathLike[str], data: bytes, *, mode: int = 0o666) -> Path:
    """Replace the file at ``path`` with ``data`` all at once; returns ``path``.

    For any file whose loss costs work: saved groups, RULER answers, registries, port files.

    The data is fsynced before the rename and the folder after it: after a crash the file is
    the old or the new one, never empty or half, and once this returns it is the new one. On
    an error the temporary file is removed and the old file is untouched. A new file gets
    ``mode`` (less the umask); pass :data:`PRIVATE_FILE_MODE` for one only its owner reads.
    """
    target = Path(path)
    make_dirs(target.parent)
    tmp = _temp_path(target)
    try:
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode), "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_path(target.parent)
    return target


def _fsync_tree(folder: Path) -> None:
    for dirpath, _dirnames, filenames in os.walk(folder):
        for name in filenames:
            fsync_path(Path(dirpath) / name)
        fsync_path(dirpath)


@contextmanager
def atomic_directory(final: str | os.PathLike[str], *, replace: bool = False) -> Iterator[Path]:
    """Yield a temporary folder beside ``final`` to fill; on success it appears at ``final`` whole.

    Every file and folder in it is fsynced, then it is renamed to ``final`` and the parent
    fsynced (new parent folders are fsynced into theirs too). With ``replace`` an existing
    ``final`` is first renamed out of sight and removed afterwards. On an exception the
    temporary folder is removed, ``final`` is left as it was, and the exception propagates;
    after a crash only a :data:`TMP_PREFIX` folder is left.

    Raises:
        FileExistsError: ``final`` exists and ``replace`` is not set.
    """
    final = Path(final)
    if final.exists() and not replace:
        raise FileExistsError(f"{final} already exists; delete it first or write a new step")
    make_dirs(final.parent)
    tmp = _temp_path(final)
    tmp.mkdir()
    old: Path | None = None
    try:
        yield tmp
        _fsync_tree(tmp)
        if final.is_dir() and any(final.iterdir()):  # os.replace replaces an empty folder only
            old = _temp_path(final)
            os.rename(final, old)
        os.replace(tmp, final)
        fsync_path(final.parent)
    except BaseException:
        if old is not None and not final.exists():
            os.rename(old, final)  # put the previous folder back
            old = None
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


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


#: How far back :func:`cut_torn_line` reads at a time looking for the last newline.
_SCAN_CHUNK = 64 * 1024


def _last_newline_end(fd: int, size: int) -> int:
    """The offset just past the last ``\n`` in the first ``size`` bytes of ``fd`` (0: none)."""
    end = size
    while end > 0:
        start = max(0, end - _SCAN_CHUNK)
        chunk = os.pread(fd, end - start, start)
        found = chunk.rfind(b"\n")
        if found >= 0:
            return start + found + 1
        end = start
    return 0


def _cut_torn(fd: int, path: Path) -> int:
    """Cut a last line without its newline off the open file ``fd``; returns the size after."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return size
    good = _last_newline_end(fd, size)
    os.ftruncate(fd, good)
    os.fsync(fd)
    logger.warning("cut a torn last line off %s (%d bytes at byte %d, never acknowledged)", path, size - good, good)
    return good


def cut_torn_line(path: str | os.PathLike[str]) -> int:
    """Cut a last line without its newline off the file at ``path`` (see :func:`append_durably`);
    returns the file's size after (0 when it does not exist).

    Raises:
        OSError: the file could not be read or cut.
    """
    target = Path(path)
    try:
        fd = os.open(target, os.O_RDWR)
    except FileNotFoundError:
        return 0
    try:
        return _cut_torn(fd, target)
    finally:
        os.close(fd)


def append_durably(path: str | os.PathLike[str], data: bytes, *, mode: int = PRIVATE_FILE_MODE) -> int:
    """Append whole lines to a JSON Lines file and ``fsync`` them; returns the offset they start at.

    The one crash rule of every append-only log (metrics, scenarios, cassettes, completion
    records, saved groups): ``data`` must end with ``\n``; it is written with ``O_APPEND`` and
    fsynced before this returns, so a line is acknowledged only once it is on disk. A last line
    without its newline was never acknowledged (a crash or a full disk cut it): it is cut off
    before the append, and an append that fails part-way is cut off at once, so the file holds
    whole lines only. The folder is created; a new file gets ``mode`` (less the umask).

    Raises:
        ValueError: ``data`` does not end with a newline.
        OSError: the append failed (nothing of it is left when the cut succeeded).
    """
    if not data.endswith(b"\n"):
        raise ValueError("append_durably writes whole lines: data must end with a newline")
    target = Path(path)
    make_dirs(target.parent)
    created = not target.exists()
    fd = os.open(target, os.O_RDWR | os.O_CREAT | os.O_APPEND, mode)
    try:
        offset = _cut_torn(fd, target)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except OSError:
            try:
                os.ftruncate(fd, offset)
                os.fsync(fd)
            except OSError as exc:  # the next append (or cut_torn_line) cuts it
                logger.error("cannot cut a failed append off %s at byte %d: %s", target, offset, exc)
            raise
    finally:
        os.close(fd)
    if created:
        fsync_path(target.parent)
    return offset
