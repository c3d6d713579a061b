"""A TF-IDF index directory on disk: segment files and the manifest that names them.

::

    {directory}/manifest.json        format, config, applied_seq, segments + dead-row bitmaps
                                     + each file's size and CRC-32 (a sealed JSON file)
    {directory}/chunks-00000007.npz  one segment: CSR term counts, row keys, item metadata
    {directory}/items-00000008.npz

Every file goes through :func:`~knowledge_agent.backends.local.atomic_files.write_atomically`; a
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

from knowledge_agent.backends.local.atomic_files import write_atomically
from knowledge_agent.backends.local.checksums import Damage
from knowledge_agent.backends.local.segments.store import (
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
from knowledge_agent.backends.local.tfidf.segments import Segment
from knowledge_agent.errors import SearchIndexError
from knowledge_agent.faults import Faults

__all__ = ["KINDS", "Generation", "TfidfStore", "verify_tfidf_folder"]

KINDS = ("chunks", "items")
_LAYOUT = Layout(
    label="TF-IDF index",
    format="knowledge_agent.tfidf/2",
    legacy_format="knowledge_agent.tfidf/1",
    file_re=re.compile(r"^((?:chunks|items)-\d{8}\.npz)$"),  # one file per segment
    key="file",
    suffixes=("",),  # the entry's "file" is the file
)


def verify_tfidf_folder(directory: Path, *, full: bool = True) -> list[Damage]:
    """The damaged files of the TF-IDF index in ``directory``, without loading it (see
    :meth:`~knowledge_agent.backends.local.segments.store.ManifestDirectory.verify`)."""
    return TfidfStore(directory, {}, 0).verify(full=full)


@dataclass
class Generation:
    """One committed state of the directory, as read from its manifest."""

    segments: dict[str, list[Segment]]  # KINDS → segments, oldest first
    applied_seq: int
    next_file: int
    version: tuple[int, int, int] | None  # of the manifest file


class TfidfStore(ManifestDirectory):
    """Reads and writes the generations of one TF-IDF index directory.

    A segment file is checked for size before it is loaded, and ``np.load`` checks the
    CRC-32 of every array in it (a ``.npz`` is a zip file): loading it verifies it whole.

    ``config`` is what the index was built with; a directory written with another value
    (``sublinear_tf`` excepted: counts are stored raw) is refused as needing a rebuild.
    """

    layout = _LAYOUT

    def __init__(
        self,
        directory: Path,
        config: Mapping[str, Any],
        n_features: int,
        faults: Faults | None = None,
    ) -> None:
        super().__init__(directory, config)
        self.n_features = n_features
        self._faults = faults or Faults()  # a testing hook: where this process kills itself

    # -- writing -------------------------------------------------------------------------

    def save(
        self, segments: Mapping[str, Sequence[Segment]], applied_seq: int, next_file: int
    ) -> tuple[int, tuple[int, int, int] | None]:
        """Write the unwritten segments (numbered from ``next_file``), then the manifest,
        then sweep files it no longer names; returns the next file number and the
        manifest's version."""
        path = self.directory
        first_file = next_file
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
                        written = write_atomically(
                            path, lambda fh, seg=seg: np.savez(fh, **seg.arrays())
                        )
                        self.sums[name] = {name: written}
                        seg.name = name  # only once complete: a failed write is retried
                    sums = self.recorded(seg.name)
                    files = {file: value.to_json() for file, value in sums.items()}
                    entries[kind].append(
                        {
                            "file": seg.name,
                            "rows": seg.n_rows,
                            "dead": dead_bitmap(seg.dead),
                            "files": files,
                        }
                    )
        except (OSError, ValueError) as exc:
            raise SearchIndexError(f"cannot write TF-IDF index {path}: {exc}") from exc
        if next_file != first_file:
            self._faults.reached("before-manifest")
        write_manifest(self.directory, _LAYOUT, self.config, applied_seq, next_file, entries)
        self.legacy = None
        referenced = {entry["file"] for kind in entries.values() for entry in kind}
        sweep(self.directory, _LAYOUT, referenced)
        self.sums = {name: self.sums[name] for name in referenced}
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
            segments[kind] = [self._read_segment(entry, held, manifest.legacy) for entry in entries]
        named = {seg.name for kind in segments.values() for seg in kind}
        self.sums = {name: sums for name, sums in self.sums.items() if name in named}
        self.legacy = manifest.version if manifest.legacy else None
        return Generation(segments, manifest.applied_seq, manifest.next_file, manifest.version)

    def _read_segment(self, entry: Any, held: Mapping[str, Segment], legacy: bool) -> Segment:
        """One manifest entry as a segment: a held one shares its arrays, else the file
        (checked for its size unless ``legacy``: the previous release recorded none)."""
        with read_errors(_LAYOUT.label, self.manifest) as at:
            name = entry["file"]
            # A name from the manifest never leaves the directory (no "../", no absolute path).
            check(isinstance(name, str) and _LAYOUT.file_re.match(name) is not None, "file name")
            sums = None if legacy else segment_sums(entry, _LAYOUT)
            check(sums is None or set(sums) == {name}, "segment files")
            at.path = self.directory / name
            old = held.get(name)
            if old is not None:
                # Immutable arrays and idf-free query structures carry over; the dead mask,
                # norms and string codes belong to the new state.
                segment = replace(old, dead=np.zeros(old.n_rows, bool), norms=None, codes={})
            else:
                if sums is not None:
                    check_sizes(self.directory, sums)
                try:
                    with np.load(at.path, allow_pickle=False) as npz:
                        arrays = {key: npz[key] for key in npz.files}
                except FileNotFoundError:
                    raise SegmentGone(name) from None
                segment = Segment.from_arrays(arrays, self.n_features)
            read_dead(segment, entry)
        if sums is not None:
            self.sums[name] = sums
        segment.name = name
        return segment
