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

import base64
import binascii
import json
import logging
import os
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
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
from knowledge_agent.search.tfidf_segments import Segment

__all__ = ["KINDS", "Generation", "TfidfStore"]

logger = logging.getLogger(__name__)

KINDS = ("chunks", "items")
_FORMAT = "knowledge_agent.tfidf/1"
_MANIFEST = "manifest.json"
_SEGMENT_RE = re.compile(r"^(chunks|items)-\d{8}\.npz$")
_LOAD_ATTEMPTS = 5  # a writer may sweep a segment between our manifest read and its load


@dataclass
class Generation:
    """One committed state of the directory, as read from its manifest."""

    segments: dict[str, list[Segment]]  # KINDS → segments, oldest first
    applied_seq: int
    next_file: int
    version: tuple[int, int, int] | None  # of the manifest file


class _SegmentGone(Exception):
    """A segment named by the manifest was deleted by a writer before it could be read."""


class TfidfStore:
    """Reads and writes the generations of one TF-IDF index directory.

    ``config`` is what the index was built with; a directory written with another value
    (``sublinear_tf`` excepted: counts are stored raw) is refused as needing a rebuild.
    """

    def __init__(self, directory: Path, config: Mapping[str, Any], n_features: int) -> None:
        self.directory = directory
        self.config = dict(config)
        self.n_features = n_features

    @property
    def manifest(self) -> Path:
        return self.directory / _MANIFEST

    def version(self) -> tuple[int, int, int] | None:
        """The version of the manifest on disk (None: there is none)."""
        return file_version(self.manifest)

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
                    dead = base64.b64encode(np.packbits(seg.dead).tobytes()).decode("ascii")
                    entries[kind].append({"file": seg.name, "rows": seg.n_rows, "dead": dead})
            manifest = {
                "format": _FORMAT,
                "config": self.config,
                "applied_seq": applied_seq,
                "next_file": next_file,
                "segments": entries,
            }
            data = json.dumps(manifest, separators=(",", ":")).encode("utf-8")
            path = self.manifest
            write_atomically(path, lambda fh: fh.write(data))
            fsync_directory(self.directory)
        except (OSError, ValueError) as exc:
            raise SearchIndexError(f"cannot write TF-IDF index {path}: {exc}") from exc
        self._sweep({entry["file"] for kind in entries.values() for entry in kind})
        return next_file, self.version()

    def _sweep(self, referenced: set[str]) -> None:
        """Delete segment files the manifest no longer names (merged, or left by a crash)
        and temporary files of writes that never completed (only writers sweep)."""
        try:
            names = os.listdir(self.directory)
        except OSError as exc:
            logger.warning("cannot list TF-IDF index %s: %s", self.directory, exc)
            return
        for name in names:
            if (_SEGMENT_RE.match(name) and name not in referenced) or is_temporary(name):
                try:
                    os.unlink(self.directory / name)
                except OSError as exc:  # harmless: it is swept again after the next write
                    logger.warning("cannot remove %s: %s", self.directory / name, exc)

    # -- reading -------------------------------------------------------------------------

    def load(self, held: Mapping[str, Segment]) -> Generation | None:
        """The current generation (None: a new, empty directory), reusing ``held`` segments
        by file name. A segment swept by a writer while we read starts the load again from
        the newer manifest."""
        for attempt in range(_LOAD_ATTEMPTS):
            try:
                return self._load_once(held)
            except _SegmentGone:
                time.sleep(0.01 * (attempt + 1))
        raise SearchIndexError(f"TF-IDF index {self.directory} kept changing while it was read")

    def _load_once(self, held: Mapping[str, Segment]) -> Generation | None:
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
                raise SearchIndexError(f"cannot read TF-IDF index {self.directory}: {exc}") from exc
            if any(_SEGMENT_RE.match(name) for name in names):
                raise SearchIndexError(f"TF-IDF index {path} is missing") from None
            return None
        except (OSError, ValueError) as exc:
            raise SearchIndexError(f"cannot read TF-IDF index {path}: {exc}") from exc
        try:
            manifest = json.loads(text)
            _check(isinstance(manifest, dict) and manifest.get("format") == _FORMAT, "format")
            stored = manifest["config"]
            _check(isinstance(stored, dict), "config")
            wanted = json.loads(json.dumps(self.config))
            for key, value in wanted.items():
                if key != "sublinear_tf" and stored.get(key) != value:  # counts are raw: free
                    raise SearchIndexError(
                        f"TF-IDF index {path} was built with {key}={stored.get(key)!r}, "
                        f"not {value!r}: rebuild it"
                    )
            seq, next_file = manifest["applied_seq"], manifest["next_file"]
            for value in (seq, next_file):
                _check(type(value) is int and value >= 0, "applied_seq/next_file")
            listed = manifest["segments"]
            _check(isinstance(listed, dict), "segments")
        except SearchIndexError:
            raise
        except (ValueError, KeyError, TypeError) as exc:
            raise SearchIndexError(f"corrupt TF-IDF index {path}: {exc}") from exc
        segments: dict[str, list[Segment]] = {}
        for kind in KINDS:
            entries = listed.get(kind, [])
            if not isinstance(entries, list):
                raise SearchIndexError(f"corrupt TF-IDF index {path}: segments.{kind}")
            segments[kind] = [self._read_segment(entry, held) for entry in entries]
        return Generation(segments, seq, next_file, version)

    def _read_segment(self, entry: Any, held: Mapping[str, Segment]) -> Segment:
        """One manifest entry as a segment: a held one shares its arrays, else the file."""
        path = self.manifest
        try:
            name = entry["file"]
            # A name from the manifest never leaves the directory (no "../", no absolute path).
            _check(isinstance(name, str) and _SEGMENT_RE.match(name) is not None, "file name")
            path = self.directory / name
            old = held.get(name)
            if old is not None:
                # Immutable arrays and idf-free query structures carry over; the dead mask,
                # norms and string codes belong to the new state.
                segment = replace(old, dead=np.zeros(old.n_rows, bool), norms=None, codes={})
            else:
                try:
                    with np.load(path, allow_pickle=False) as npz:
                        arrays = {key: npz[key] for key in npz.files}
                except FileNotFoundError:
                    raise _SegmentGone(name) from None
                segment = Segment.from_arrays(arrays, self.n_features)
            rows = entry["rows"]
            _check(type(rows) is int and rows == segment.n_rows, "row count")
            bits = np.frombuffer(base64.b64decode(entry["dead"], validate=True), np.uint8)
            _check(bits.size == (rows + 7) // 8, "dead-row bitmap")
            segment.dead = np.unpackbits(bits, count=rows).astype(bool)
            segment.n_dead = int(segment.dead.sum())
        except (SearchIndexError, _SegmentGone):
            raise
        except (OSError, ValueError, KeyError, TypeError, EOFError, binascii.Error) as exc:
            raise SearchIndexError(f"cannot read TF-IDF index {path}: {exc}") from exc
        except Exception as exc:  # zipfile, numpy and scipy have more ways to reject a bad file
            raise SearchIndexError(f"corrupt TF-IDF index {path}: {exc}") from exc
        segment.name = name
        return segment


def _check(condition: bool, what: str) -> None:
    if not condition:
        raise ValueError(f"invalid {what}")
