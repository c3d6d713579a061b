"""Files that readers in other processes may open at any moment: written whole, then renamed.

A file is written under a unique temporary name beside its final name, fsynced, and renamed
over it, so a reader opens either the old version or the new one — never a torn file, and
never one that two writers wrote at once. The size and CRC-32 of what was written are
returned, for the file that names it to record (:mod:`~knowledge_agent.backends.local.checksums`).
:func:`file_version` identifies the version of such a file cheaply (a rename gives it a new
inode), so a reader can tell it changed.
"""

from __future__ import annotations

import contextlib
import os
import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from knowledge_agent.backends.local.checksums import FileSum, file_sum, seal_json

__all__ = ["file_version", "fsync_directory", "is_temporary", "write_atomically", "write_sealed"]

_TEMP_NAME = re.compile(r"\.[0-9a-f]{32}\.tmp$")

FileVersion = tuple[int, int, int]


def write_atomically(path: Path, write: Callable[[BinaryIO], object]) -> FileSum:
    """``write(fh)`` into a unique temporary file beside ``path``, fsync, rename over it;
    returns the size and CRC-32 of the file written."""
    tmp = path.with_name(f"{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        with open(tmp, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())  # never rename an incomplete file into place
        # Read back (from the page cache): np.savez seeks back over what it wrote, so a
        # checksum of the writes as they pass would not be the file's.
        written = file_sum(tmp)
        os.replace(tmp, path)
        return written
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_sealed(path: Path, value: Any) -> None:
    """``value`` as a sealed JSON file
    (:func:`~knowledge_agent.backends.local.checksums.seal_json`), written atomically."""
    data = seal_json(value)
    write_atomically(path, lambda fh: fh.write(data))


def is_temporary(name: str) -> bool:
    """Whether ``name`` is a temporary file of :func:`write_atomically` (left by a crash)."""
    return _TEMP_NAME.search(name) is not None


def file_version(path: Path) -> FileVersion | None:
    """What identifies one version of a file that is only ever replaced by rename."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def fsync_directory(directory: Path) -> None:
    """Make a rename durable (POSIX); a no-op where directories cannot be opened."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
