"""Durability on disk: make a file's or a folder's contents (a rename into it included) survive a crash.

One implementation serves the client and the backend: the helpers live in the client package
(``art_adapters.files``), which the backend depends on anyway, and are re-exported here.
"""

from __future__ import annotations

from art_adapters.files import fsync_path, make_dirs, write_atomic

__all__ = ["fsync_path", "make_dirs", "write_atomic"]
