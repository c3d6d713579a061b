"""A dense index directory on disk: segment files and the manifest that names them.

::

    {directory}/manifest.json                 format, config (embedder name, dimensions,
                                              text recipe), applied_seq, next_file,
                                              segments + dead-row bitmaps + each file's
                                              size and CRC-32 (a sealed JSON file)
    {directory}/seg-00000007.vectors.npy      float32 (rows, dimensions), memory-mapped
    {directory}/seg-00000007.meta.npz         keys, chunk indexes, text hashes, item metadata

Every file goes through :func:`~knowledge_agent.backends.local.atomic_files.write_atomically`; a
segment's files never change once written and the manifest is written after the segments
it names, so a reader sees one complete generation. Only ``.npy`` / ``.npz`` with
``allow_pickle=False`` and JSON are read, and a name from the manifest never leaves the
directory: an index directory from elsewhere cannot execute code or make us read other files.

Opening checks each file's size, and the checksums of the files this process has not
verified yet when they total at most
:data:`~knowledge_agent.backends.local.checksums.VERIFY_ON_OPEN_BYTES`: the vectors are
memory-mapped and read only where a query needs them, so reading all of a large index to
open it would cost what mapping saves. ``check`` verifies every checksum
(:meth:`~knowledge_agent.backends.local.segments.store.ManifestDirectory.verify`).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from knowledge_agent.backends.local.atomic_files import write_atomically
from knowledge_agent.backends.local.checksums import Damage, read_json_file
from knowledge_agent.backends.local.dense.segments import DenseSegment, write_vectors
from knowledge_agent.backends.local.segments.store import (
    MANIFEST,
    Layout,
    ManifestDirectory,
    SegmentGone,
    check,
    check_sizes,
    dead_bitmap,
    load_retrying,
    read_dead,
    read_errors,
    read_manifest,
    segment_sums,
    sweep,
    write_manifest,
)
from knowledge_agent.errors import DamagedIndexError, SearchIndexError

__all__ = ["DenseStore", "Generation", "stored_config", "verify_dense_folder"]

logger = logging.getLogger(__name__)

FORMAT = "knowledge_agent.dense/2"
_NAME_RE = re.compile(r"^seg-\d{8}$")
_LAYOUT = Layout(
    label="dense index",
    format=FORMAT,
    legacy_format="knowledge_agent.dense/1",
    file_re=re.compile(r"^(seg-\d{8})\.(?:vectors\.npy|meta\.npz)$"),  # two files a segment
    key="name",
    suffixes=(".vectors.npy", ".meta.npz"),
)


def segment_name(number: int) -> str:
    return f"seg-{number:08d}"


def stored_config(directory: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The configuration (``embedder``, ``dimensions``, …) a dense index directory was
    written with, or None when it has no readable manifest. Reads one small JSON file."""
    try:
        manifest, plain = read_json_file(Path(directory) / MANIFEST)
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict):
        return None
    if manifest.get("format") != (_LAYOUT.legacy_format if plain else FORMAT):
        return None
    config = manifest.get("config")
    return dict(config) if isinstance(config, dict) else None


def verify_dense_folder(directory: Path, *, full: bool = True) -> list[Damage]:
    """The damaged files of the dense index in ``directory``, without loading it (see
    :meth:`~knowledge_agent.backends.local.segments.store.ManifestDirectory.verify`)."""
    return DenseStore(directory, {}, 0).verify(full=full)


@dataclass
class Generation:
    """One committed state of the directory, as read from its manifest."""

    segments: list[DenseSegment]  # oldest first
    applied_seq: int
    next_file: int
    version: tuple[int, int, int] | None  # of the manifest file


class DenseStore(ManifestDirectory):
    """Reads and writes the generations of one dense index directory.

    ``config`` is what the index was built with (embedder name, dimensions, text recipe);
    a directory written with another value is refused as needing a rebuild.
    """

    layout = _LAYOUT

    def __init__(self, directory: Path, config: Mapping[str, Any], dimensions: int) -> None:
        super().__init__(directory, config)
        self.dimensions = dimensions

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
            meta = write_atomically(meta_path, lambda fh: np.savez(fh, **arrays))
            path = vectors_path
            vectors = write_atomically(
                vectors_path, lambda fh: write_vectors(fh, blocks, n_rows, self.dimensions)
            )
            self.sums[name] = {meta_path.name: meta, vectors_path.name: vectors}
            self.verified.add(meta_path)
            self.verified.add(vectors_path)
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
            files = {name: value.to_json() for name, value in self.recorded(seg.name).items()}
            dead = dead_bitmap(seg.dead)
            entries.append({"name": seg.name, "rows": seg.n_rows, "dead": dead, "files": files})
        write_manifest(self.directory, _LAYOUT, self.config, applied_seq, next_file, entries)
        self.legacy = None
        referenced = {entry["name"] for entry in entries} | set(keep)
        self.sweep(referenced)
        self.sums = {name: sums for name, sums in self.sums.items() if name in referenced}
        return self.version()

    def sweep(self, referenced: Collection[str]) -> None:
        """Delete segment files not named in ``referenced`` (merged away, or left by a
        crash) and temporary files of writes that never completed (only writers sweep)."""
        sweep(self.directory, _LAYOUT, referenced)

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
        return load_retrying(lambda: self._load_once(held), _LAYOUT, self.directory)

    def _load_once(self, held: Mapping[str, DenseSegment]) -> Generation | None:
        manifest = read_manifest(self.directory, _LAYOUT, self.config, listing=list)
        if manifest is None:
            return None
        segments = [self._read_segment(entry, held, manifest.legacy) for entry in manifest.segments]
        names = [seg.name for seg in segments]
        self.sums = {name: sums for name, sums in self.sums.items() if name in names}
        files = [pair for name in names if name in self.sums for pair in self.sums[name].items()]
        damage = self.verified.check(self.directory, files)
        if any(d.problem == "missing" for d in damage):
            raise SegmentGone(damage[0].path)  # swept by a writer since: read the newer one
        if damage:
            raise DamagedIndexError(f"dense index {damage[0]}")
        if len(set(names)) != len(names):
            raise SearchIndexError(
                f"corrupt dense index {self.manifest}: a segment is listed twice"
            )
        self.legacy = manifest.version if manifest.legacy else None
        return Generation(segments, manifest.applied_seq, manifest.next_file, manifest.version)

    def _read_segment(
        self, entry: Any, held: Mapping[str, DenseSegment], legacy: bool
    ) -> DenseSegment:
        """One manifest entry as a segment: a held one shares its arrays, else the files
        (checked for their sizes unless ``legacy``: the previous release recorded none)."""
        with read_errors(_LAYOUT.label, self.manifest) as at:
            name = entry["name"]
            # A name from the manifest never leaves the directory (no "../", no absolute path).
            check(isinstance(name, str) and _NAME_RE.match(name) is not None, "segment name")
            vectors_path, meta_path = self._paths(name)
            sums = None if legacy else segment_sums(entry, _LAYOUT)
            expected = {vectors_path.name, meta_path.name}
            check(sums is None or set(sums) == expected, "segment files")
            old = held.get(name)
            if old is not None:
                segment = old.reopened()
            else:
                if sums is not None:
                    check_sizes(self.directory, sums)
                try:
                    at.path = meta_path
                    with np.load(meta_path, allow_pickle=False) as npz:
                        arrays = {key: npz[key] for key in npz.files}
                    at.path = vectors_path
                    vectors = _map_vectors(vectors_path)
                except FileNotFoundError:
                    raise SegmentGone(name) from None
                segment = DenseSegment.from_arrays(arrays, vectors, self.dimensions)
            read_dead(segment, entry)
        if sums is not None:
            self.sums[name] = sums
        segment.name = name
        return segment


def _map_vectors(path: Path) -> np.ndarray:
    """A ``.npy`` file's array, memory-mapped read-only (a plain ndarray view of the map:
    the file stays mapped while any view of it lives)."""
    mapped = np.load(path, mmap_mode="r", allow_pickle=False)
    return np.asarray(mapped)
