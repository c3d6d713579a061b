"""File helpers shared by the tests that build folders to collect or hold a data folder's
lock (no tests of their own)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from knowledge_agent.backends.local.folder_lock import FolderLock


def write(path: Path, text: str | bytes) -> Path:
    """Write text (UTF-8) or bytes to ``path``, creating its folders."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def bump_mtime(path: Path) -> None:
    """Move the mtime forward by a second: file systems with coarse clocks still see a change."""
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))


@contextmanager
def another_writer(data_dir: Path) -> Iterator[None]:
    """The data folder's write lock held, as by another process: nothing can be rebuilt."""
    holder = FolderLock(data_dir)
    holder.acquire()
    try:
        yield
    finally:
        holder.release()
