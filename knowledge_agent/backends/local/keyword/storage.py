"""Where the keyword indexes live: a folder on disk, or memory with a private temp folder."""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from pathlib import Path

from whoosh.filedb.filestore import FileStorage, RamStorage
from whoosh.util import random_name

__all__ = ["WHOOSH_INDEX_NAME", "PrivateRamStorage", "has_toc"]

WHOOSH_INDEX_NAME = "MAIN"  # whoosh's default index name inside a storage


def has_toc(path: Path) -> bool:
    """Whether ``path`` holds a Whoosh index (a TOC file), without reading it."""
    prefix = f"_{WHOOSH_INDEX_NAME}_"
    try:
        return any(n.startswith(prefix) and n.endswith(".toc") for n in os.listdir(path))
    except OSError:
        return False


class PrivateRamStorage(RamStorage):
    """In-memory storage whose writers keep their temporary files in a private directory.

    Whoosh's RamStorage puts them in ``{tempdir}/{indexname}.tmp``, shared by every in-memory
    index of the machine: whichever writer finishes first deletes the others' files. Here the
    same layout lives under a directory of this storage's own, removed by :meth:`remove_tempdir`.
    """

    def __init__(self) -> None:
        super().__init__()
        self._tempdir: str | None = None
        self._remove_tempdir: weakref.finalize | None = None

    def temp_storage(self, name: str | None = None) -> FileStorage:
        if self._tempdir is None:
            self._tempdir = tempfile.mkdtemp(prefix="knowledge-agent-whoosh-")
            self._remove_tempdir = weakref.finalize(
                self, shutil.rmtree, self._tempdir, ignore_errors=True
            )
        name = name or f"{random_name()}.tmp"
        return FileStorage(os.path.join(self._tempdir, name)).create()

    def remove_tempdir(self) -> None:
        # Not close(): whoosh calls Storage.close() itself whenever a reader closes.
        if self._remove_tempdir is not None:
            self._remove_tempdir()
        self._tempdir = self._remove_tempdir = None
