"""File helpers shared by the tests that build folders to collect (no tests of their own)."""

from __future__ import annotations

import os
from pathlib import Path


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
