"""A TF-IDF index directory on disk: segment files and the manifest that names them.

::

    {directory}/manifest.json        format, config, applied_seq, segments + dead-row bitmaps
    {directory}/chunks-00000007.npz  one segment: CSR term counts, row keys, item metadata
    {directory}/items-00000008.npz

Every file goes through :func:`~knowledge_agent.search.atomic_files.write_atomically`; a
segment file never changes once written and the manifest is written after the segments it
names, so a reader sees one complete generation. Only ``.npz`` (``allow_pickle=False``) and
JSON are read, and a file name from the manifest never leaves the directory: an index
directory from elsewhere cannot execute code or make us read other files.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from knowledge_agent.errors import SearchIndexError
from knowledge_agent.search.atomic_files import write_atomically
from knowledge_agent.search.segment_store import (
    Layout,
    ManifestDirectory,
    SegmentGone,
    check,
    dead_bitmap,
    load_retrying,
    read_dead,
    read_errors,
    read_manifest,
    sweep,
    write_manifest,
)
from knowledge_agent.search.tfidf_segments import Segment

__all__ = ["KINDS", "Generation", "TfidfStore"]

KINDS = ("chunks", "items")
_LAYOUT = Layout(
    label="TF-IDF index",
    format="knowledge_agent.tfidf/1",
    file_re=re.compile(r"^((?:chunks|items)-\d{8}\.npz)$"),  # one file per segment
)


@dataclass
class Generation:
    """One committed state of the directory, as read from its manifest."""

    segments: dict[str, list[Segment]]  # KINDS → segments, oldest first
    applied_seq: int
    next_file: int
    version: tuple[int, int, int] | None  # of the manifest file


class TfidfStore(ManifestDirectory):
    """Reads and writes the generations of one TF-IDF index directory.

    ``config`` is what the index was built with; a directory written with another value
    (``sublinear_tf`` excepted: counts are stored raw) is refused as needing a rebuild.
    """

    def __init__(self, directory: Path, config: Mapping[str, Any], n_features: int) -> None:
        super().__init__(directory, config)
        self.n_features = n_features

    # -- writing -------------------------------------------------------------------------

    def save(
        self, segments: Mapping[str, Sequence[Segment]], applied_seq: int, next_file: int
    ) -> tuple[int, tuple[int, int, int] | None]:
        """Write the unwritten segments (numbered from ``next_file``), then the manifest,
        then sweep files it no longer names; returns the next file number and the
        manifest's version."""
        path = self.directory
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            entries: dict[str, list[dict[str, Any]]] = {}
            for kind, kind_segments in segments.items():
                entries[kind] = []
                for seg in kind_segments:
                    if seg.name is None:
                        name = f"{kind}-{next_file:08d}.npz"
                        next_file += 1
                        path = self.directory / name
                        write_atomically(path, lambda fh, seg=seg: np.savez(fh, **seg.arrays()))
                        seg.name = name  # only once complete: a failed write is retried
                    entry = {"file": seg.name, "rows": seg.n_rows, "dead": dead_bitmap(seg.dead)}
                    entries[kind].append(entry)
        except (OSError, ValueError) as exc:
            raise SearchIndexError(f"cannot write TF-IDF index {path}: {exc}") from exc
        write_manifest(self.directory, _LAYOUT, self.config, applied_seq, next_file, entries)
        sweep(
            self.directory, _LAYOUT, {entry["file"] for kind in entries.values() for entry in kind}
        )
        return next_file, self.version()

    # -- reading -------------------------------------------------------------------------

    def load(self, held: Mapping[str, Segment]) -> Generation | None:
        """The current generation (None: a new, empty directory), reusing ``held`` segments
        by file name. A segment swept by a writer while we read starts the load again from
        the newer manifest."""
        return load_retrying(lambda: self._load_once(held), _LAYOUT, self.directory)

    def _load_once(self, held: Mapping[str, Segment]) -> Generation | None:
        # Counts are stored raw, so sublinear_tf is applied at query time: free to differ.
        manifest = read_manifest(
            self.directory, _LAYOUT, self.config, listing=dict, free=("sublinear_tf",)
        )
        if manifest is None:
            return None
        segments: dict[str, list[Segment]] = {}
        for kind in KINDS:
            entries = manifest.segments.get(kind, [])
            if not isinstance(entries, list):
                raise SearchIndexError(f"corrupt TF-IDF index {self.manifest}: segments.{kind}")
            segments[kind] = [self._read_segment(entry, held) for entry in entries]
        return Generation(segments, manifest.applied_seq, manifest.next_file, manifest.version)

    def _read_segment(self, entry: Any, held: Mapping[str, Segment]) -> Segment:
        """One manifest entry as a segment: a held one shares its arrays, else the file."""
        with read_errors(_LAYOUT.label, self.manifest) as at:
            name = entry["file"]
            # A name from the manifest never leaves the directory (no "../", no absolute path).
            check(isinstance(name, str) and _LAYOUT.file_re.match(name) is not None, "file name")
            at.path = self.directory / name
            old = held.get(name)
            if old is not None:
                # Immutable arrays and idf-free query structures carry over; the dead mask,
                # norms and string codes belong to the new state.
                segment = replace(old, dead=np.zeros(old.n_rows, bool), norms=None, codes={})
            else:
                try:
                    with np.load(at.path, allow_pickle=False) as npz:
                        arrays = {key: npz[key] for key in npz.files}
                except FileNotFoundError:
                    raise SegmentGone(name) from None
                segment = Segment.from_arrays(arrays, self.n_features)
            read_dead(segment, entry)
        segment.name = name
        return segment
