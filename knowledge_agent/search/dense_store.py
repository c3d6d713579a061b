"""A dense index directory on disk: segment files and the manifest that names them.

::

    {directory}/manifest.json                 format, config (embedder name, dimensions,
                                              text recipe), applied_seq, next_file,
                                              segments + dead-row bitmaps
    {directory}/seg-00000007.vectors.npy      float32 (rows, dimensions), memory-mapped
    {directory}/seg-00000007.meta.npz         keys, chunk indexes, text hashes, item metadata

Every file goes through :func:`~knowledge_agent.search.atomic_files.write_atomically`; a
segment's files never change once written and the manifest is written after the segments
it names, so a reader sees one complete generation. Only ``.npy`` / ``.npz`` with
``allow_pickle=False`` and JSON are read, and a name from the manifest never leaves the
directory: an index directory from elsewhere cannot execute code or make us read other files.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import os
import re
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from knowledge_agent.errors import SearchIndexError
from knowledge_agent.search.atomic_files import (
    file_version,
    fsync_directory,
    is_temporary,
    write_atomically,
)
from knowledge_agent.search.dense_segments import DenseSegment, write_vectors

__all__ = ["DenseStore", "Generation", "stored_config"]

logger = logging.getLogger(__name__)

FORMAT = "knowledge_agent.dense/1"
MANIFEST = "manifest.json"
_NAME_RE = re.compile(r"^seg-\d{8}$")
_FILE_RE = re.compile(r"^(seg-\d{8})\.(?:vectors\.npy|meta\.npz)$")
_LOAD_ATTEMPTS = 5  # a writer may sweep a segment between our manifest read and its load


def segment_name(number: int) -> str:
    return f"seg-{number:08d}"


def stored_config(directory: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The configuration (``embedder``, ``dimensions``, …) a dense index directory was
    written with, or None when it has no readable manifest. Reads one small JSON file."""
    try:
        manifest = json.loads((Path(directory) / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        return None
    config = manifest.get("config")
    return dict(config) if isinstance(config, dict) else None


@dataclass
class Generation:
    """One committed state of the directory, as read from its manifest."""

    segments: list[DenseSegment]  # oldest first
    applied_seq: int
    next_file: int
    version: tuple[int, int, int] | None  # of the manifest file


class _SegmentGone(Exception):
    """A segment named by the manifest was deleted by a writer before it could be read."""


class DenseStore:
    """Reads and writes the generations of one dense index directory.

    ``config`` is what the index was built with (embedder name, dimensions, text recipe);
    a directory written with another value is refused as needing a rebuild.
    """

    def __init__(self, directory: Path, config: Mapping[str, Any], dimensions: int) -> None:
        self.directory = directory
        self.config = dict(config)
        self.dimensions = dimensions

    @property
    def manifest(self) -> Path:
        return self.directory / MANIFEST

    def version(self) -> tuple[int, int, int] | None:
        """The version of the manifest on disk (None: there is none)."""
        return file_version(self.manifest)

    def _paths(self, name: str) -> tuple[Path, Path]:
        return (
            self.directory / f"{name}.vectors.npy",
            self.directory / f"{name}.meta.npz",
        )

    # -- writing -------------------------------------------------------------------------

    def write_segment(
        self,
        name: str,
        arrays: Mapping[str, np.ndarray],
        blocks: Iterator[np.ndarray],
        n_rows: int,
    ) -> np.ndarray:
        """Write one segment's two files (vectors streamed from ``blocks``); returns its
        vectors memory-mapped from the new file."""
        vectors_path, meta_path = self._paths(name)
        path = self.directory
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            path = meta_path
            write_atomically(meta_path, lambda fh: np.savez(fh, **arrays))
            path = vectors_path
            write_atomically(
                vectors_path, lambda fh: write_vectors(fh, blocks, n_rows, self.dimensions)
            )
            return _map_vectors(vectors_path)
        except (OSError, ValueError) as exc:
            raise SearchIndexError(f"cannot write dense index {path}: {exc}") from exc

    def save(
        self,
        segments: Sequence[DenseSegment],
        applied_seq: int,
        next_file: int,
        keep: Collection[str] = (),
    ) -> tuple[int, int, int] | None:
        """Write the manifest naming ``segments`` (all written already), then sweep the
        files it no longer names except those of ``keep``; returns the manifest's version."""
        entries = []
        for seg in segments:
            assert seg.name is not None, "write every segment before the manifest"
            dead = base64.b64encode(np.packbits(seg.dead).tobytes()).decode("ascii")
            entries.append({"name": seg.name, "rows": seg.n_rows, "dead": dead})
        manifest = {
            "format": FORMAT,
            "config": self.config,
            "applied_seq": applied_seq,
            "next_file": next_file,
            "segments": entries,
        }
        data = json.dumps(manifest, separators=(",", ":")).encode("utf-8")
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            write_atomically(self.manifest, lambda fh: fh.write(data))
            fsync_directory(self.directory)
        except (OSError, ValueError) as exc:
            raise SearchIndexError(f"cannot write dense index {self.manifest}: {exc}") from exc
        self.sweep({entry["name"] for entry in entries} | set(keep))
        return self.version()

    def sweep(self, referenced: Collection[str]) -> None:
        """Delete segment files not named in ``referenced`` (merged away, or left by a
        crash) and temporary files of writes that never completed (only writers sweep)."""
        try:
            names = os.listdir(self.directory)
        except OSError as exc:
            logger.warning("cannot list dense index %s: %s", self.directory, exc)
            return
        for name in names:
            match = _FILE_RE.match(name)
            if (match and match.group(1) not in referenced) or is_temporary(name):
                try:
                    os.unlink(self.directory / name)
                except OSError as exc:  # harmless: it is swept again after the next write
                    logger.warning("cannot remove %s: %s", self.directory / name, exc)

    def discard(self, name: str) -> None:
        """Delete one segment's files that no manifest names (a cancelled rebuild's)."""
        for path in self._paths(name):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            except OSError as exc:
                logger.warning("cannot remove %s: %s", path, exc)

    # -- reading -------------------------------------------------------------------------

    def load(self, held: Mapping[str, DenseSegment]) -> Generation | None:
        """The current generation (None: a new, empty directory), reusing ``held`` segments
        by name. A segment swept by a writer while we read starts the load again from the
        newer manifest."""
        for attempt in range(_LOAD_ATTEMPTS):
            try:
                return self._load_once(held)
            except _SegmentGone:
                time.sleep(0.01 * (attempt + 1))
        raise SearchIndexError(f"dense index {self.directory} kept changing while it was read")

    def _load_once(self, held: Mapping[str, DenseSegment]) -> Generation | None:
        path = self.manifest
        try:
            version = file_version(path)
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            try:
                names = os.listdir(self.directory)
            except FileNotFoundError:
                names = []
            except OSError as exc:
                raise SearchIndexError(f"cannot read dense index {self.directory}: {exc}") from exc
            if any(_FILE_RE.match(name) for name in names):
                raise SearchIndexError(f"dense index {path} is missing") from None
            return None
        except (OSError, ValueError) as exc:
            raise SearchIndexError(f"cannot read dense index {path}: {exc}") from exc
        try:
            manifest = json.loads(text)
            _check(isinstance(manifest, dict) and manifest.get("format") == FORMAT, "format")
            stored = manifest["config"]
            _check(isinstance(stored, dict), "config")
            wanted = json.loads(json.dumps(self.config))
            for key, value in wanted.items():
                if stored.get(key) != value:
                    raise SearchIndexError(
                        f"dense index {path} was built with {key}={stored.get(key)!r}, "
                        f"not {value!r}: rebuild it"
                    )
            seq, next_file = manifest["applied_seq"], manifest["next_file"]
            for value in (seq, next_file):
                _check(type(value) is int and value >= 0, "applied_seq/next_file")
            listed = manifest["segments"]
            _check(isinstance(listed, list), "segments")
        except SearchIndexError:
            raise
        except (ValueError, KeyError, TypeError) as exc:
            raise SearchIndexError(f"corrupt dense index {path}: {exc}") from exc
        segments = [self._read_segment(entry, held) for entry in listed]
        names = [seg.name for seg in segments]
        if len(set(names)) != len(names):
            raise SearchIndexError(f"corrupt dense index {path}: a segment is listed twice")
        return Generation(segments, seq, next_file, version)

    def _read_segment(self, entry: Any, held: Mapping[str, DenseSegment]) -> DenseSegment:
        """One manifest entry as a segment: a held one shares its arrays, else the files."""
        path = self.manifest
        try:
            name = entry["name"]
            # A name from the manifest never leaves the directory (no "../", no absolute path).
            _check(isinstance(name, str) and _NAME_RE.match(name) is not None, "segment name")
            vectors_path, meta_path = self._paths(name)
            old = held.get(name)
            if old is not None:
                segment = old.reopened()
            else:
                try:
                    path = meta_path
                    with np.load(meta_path, allow_pickle=False) as npz:
                        arrays = {key: npz[key] for key in npz.files}
                    path = vectors_path
                    vectors = _map_vectors(vectors_path)
                except FileNotFoundError:
                    raise _SegmentGone(name) from None
                segment = DenseSegment.from_arrays(arrays, vectors, self.dimensions)
            rows = entry["rows"]
            _check(type(rows) is int and rows == segment.n_rows, "row count")
            bits = np.frombuffer(base64.b64decode(entry["dead"], validate=True), np.uint8)
            _check(bits.size == (rows + 7) // 8, "dead-row bitmap")
            segment.dead = np.unpackbits(bits, count=rows).astype(bool)
            segment.n_dead = int(segment.dead.sum())
        except (SearchIndexError, _SegmentGone):
            raise
        except (OSError, ValueError, KeyError, TypeError, EOFError, binascii.Error) as exc:
            raise SearchIndexError(f"cannot read dense index {path}: {exc}") from exc
        except Exception as exc:  # zipfile and numpy have more ways to reject a bad file
            raise SearchIndexError(f"corrupt dense index {path}: {exc}") from exc
        segment.name = name
        return segment


def _map_vectors(path: Path) -> np.ndarray:
    """A ``.npy`` file's array, memory-mapped read-only (a plain ndarray view of the map:
    the file stays mapped while any view of it lives)."""
    mapped = np.load(path, mmap_mode="r", allow_pickle=False)
    return np.asarray(mapped)


def _check(condition: bool, what: str) -> None:
    if not condition:
        raise ValueError(f"invalid {what}")
