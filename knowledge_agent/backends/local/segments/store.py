"""The manifest of a log-structured index directory, shared by the TF-IDF and dense stores.

Both indexes keep immutable segment files plus ``manifest.json``: a format tag, the config
the index was built with, the journal position applied, the next file number and the
segments with their dead-row bitmaps. What differs is described by a :class:`Layout` (the
name in messages, the format tag, which file names are segment files) and by the callers,
which read and write the segment files themselves and give the manifest its segment list
(a dict of kinds for TF-IDF, a list for dense). Messages read ``cannot read {label} {path}``
and the like, so each index keeps its own wording.

The manifest is a sealed JSON file (:mod:`~knowledge_agent.backends.local.checksums`: it carries its
own CRC-32, is read bounded in size, and fails to load as a whole) and records, in each
segment's ``files``, the size and CRC-32 of the segment's files as they were written. A
segment's files are checked for size whenever they are read; :meth:`ManifestDirectory.verify`
(``check``) checks their checksums too.

**The previous release's manifest** (``Layout.legacy_format``) was plain JSON, its entries
without ``files``. Exactly that form is still read, and its segments loaded as that release
loaded them (no sizes or sums to check them against); :meth:`ManifestDirectory.upgrade`
then gives the generation its sums and seals its manifest, the segment files untouched.
Any other plain manifest is damage.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import os
import re
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np

from knowledge_agent.backends.local.atomic_files import (
    file_version,
    fsync_directory,
    is_temporary,
    write_sealed,
)
from knowledge_agent.backends.local.checksums import (
    Damage,
    FileSum,
    VerifiedFiles,
    file_sum,
    read_json_file,
    verify_files,
)
from knowledge_agent.errors import DamagedIndexError, SearchIndexError

__all__ = [
    "MANIFEST",
    "Layout",
    "Manifest",
    "ManifestDirectory",
    "ReadingAt",
    "SegmentGone",
    "check",
    "check_sizes",
    "dead_bitmap",
    "load_retrying",
    "read_dead",
    "read_errors",
    "read_manifest",
    "segment_files",
    "segment_sums",
    "sweep",
    "write_manifest",
]

logger = logging.getLogger(__name__)

MANIFEST = "manifest.json"
_LOAD_ATTEMPTS = 5  # a writer may sweep a segment between our manifest read and its load

T = TypeVar("T")
FileVersion = tuple[int, int, int]


@dataclass(frozen=True)
class Layout:
    """What tells one kind of index directory from another."""

    label: str  # "TF-IDF index", "dense index": how messages name it
    format: str  # the manifest's format tag
    legacy_format: str  # the previous release's format tag
    file_re: re.Pattern[str]  # a segment file's name; group 1 is the segment it belongs to
    key: str  # the field of a manifest entry naming its segment
    suffixes: tuple[str, ...]  # a segment's files: its name followed by each of these

    def segment_of(self, file_name: str) -> str | None:
        """The segment a file belongs to (None: not a segment file)."""
        match = self.file_re.match(file_name)
        return None if match is None else match.group(1)

    def files_of(self, segment: str) -> list[str]:
        """The names of a segment's files."""
        return [segment + suffix for suffix in self.suffixes]


@dataclass
class Manifest:
    """A manifest as read, checked but for its segment entries (the caller's format)."""

    segments: Any  # a list or a dict, as the caller asked
    applied_seq: int
    next_file: int
    version: FileVersion | None  # of the manifest file
    legacy: bool = False  # in the previous release's format: entries without ``files``


class ManifestDirectory:
    """An index directory and the config its manifest must match.

    ``sums`` holds the recorded sums of the files of every segment this object wrote or
    read, by segment name: what the next manifest records for them. ``verified`` is what
    this process has checksummed whole (or written). ``legacy`` is the version of the
    manifest in the previous release's format that the last load read whole (None: the
    generation loaded is in this version's format).
    """

    layout: Layout

    def __init__(self, directory: Path, config: Mapping[str, Any]) -> None:
        self.directory = directory
        self.config = dict(config)
        self.sums: dict[str, dict[str, FileSum]] = {}
        self.verified = VerifiedFiles()
        self.legacy: FileVersion | None = None

    @property
    def manifest(self) -> Path:
        return self.directory / MANIFEST

    def version(self) -> FileVersion | None:
        """The version of the manifest on disk (None: there is none)."""
        return file_version(self.manifest)

    def verify(self, *, full: bool = True) -> list[Damage]:
        """The damaged files of the generation on disk now: the manifest, and every file
        it names for its size and, with ``full``, its checksum."""
        for _ in range(_LOAD_ATTEMPTS):
            version = self.version()
            found = self._verify_once(full)
            if self.version() == version:  # no writer replaced the generation meanwhile
                return found
        return []  # replaced on every attempt: a writer is busy, and it checked its files

    def _verify_once(self, full: bool) -> list[Damage]:
        path = self.manifest
        try:
            manifest, legacy = _load_manifest(path, self.layout)
            entries = _entries(manifest["segments"])
            if legacy:  # no sums to check: every file it names is there
                names = [name for entry in entries for name in segment_files(entry, self.layout)]
                return [
                    Damage(str(self.directory / name), "missing")
                    for name in names
                    if not (self.directory / name).is_file()
                ]
            sums = [
                (name, value)
                for entry in entries
                for name, value in segment_sums(entry, self.layout).items()
            ]
        except FileNotFoundError:
            if _segment_files(self.directory, self.layout):
                return [Damage(str(path), "missing")]
            return []
        except Exception as exc:
            return [Damage(str(path), str(exc))]
        return verify_files(self.directory, sums, full=full)

    def recorded(self, segment: str) -> dict[str, FileSum]:
        """The recorded sums of ``segment``'s files, for the next manifest: those of a
        segment loaded from the previous release's format are computed now, once."""
        sums = self.sums.get(segment)
        if sums is None:
            sums = {name: file_sum(self.directory / name) for name in self.layout.files_of(segment)}
            for name in sums:
                self.verified.add(self.directory / name)
            self.sums[segment] = sums
        return sums

    def upgrade(self) -> bool:
        """Give the generation in the previous release's format that the last load read
        whole (and so checked, as that release did) its sums, and seal its manifest in this
        version's format; its segment files are not touched. False when there is none, or
        the manifest on disk is no longer that one. Only the writer calls this."""
        if self.legacy is None or self.version() != self.legacy:
            return False
        path, label = self.manifest, self.layout.label
        try:
            manifest, legacy = _load_manifest(path, self.layout)
            if not legacy:
                return False
            for entry in _entries(manifest["segments"]):
                segment_files(entry, self.layout)  # names that stay in the directory
                sums = self.recorded(entry[self.layout.key])
                entry["files"] = {name: value.to_json() for name, value in sums.items()}
            config, seq, next_file = (
                manifest["config"],
                manifest["applied_seq"],
                manifest["next_file"],
            )
        except FileNotFoundError as exc:
            raise DamagedIndexError(f"{label} {exc.filename}: missing") from exc
        except OSError as exc:
            raise SearchIndexError(f"cannot upgrade {label} {path}: {exc}") from exc
        except (ValueError, KeyError, TypeError) as exc:  # loaded whole before: only a race
            raise DamagedIndexError(f"corrupt {label} {path}: {exc}") from exc
        write_manifest(self.directory, self.layout, config, seq, next_file, manifest["segments"])
        self.legacy = None
        return True


class SegmentGone(Exception):
    """A segment named by the manifest was deleted by a writer before it could be read."""


class _Segment(Protocol):
    dead: np.ndarray
    n_dead: int

    @property
    def n_rows(self) -> int: ...


def check(condition: bool, what: str) -> None:
    if not condition:
        raise ValueError(f"invalid {what}")


def _entries(listed: Any) -> list[Any]:
    """The segment entries of a manifest's ``segments`` (a list, or a dict of lists)."""
    if isinstance(listed, dict):
        check(all(isinstance(kind, list) for kind in listed.values()), "segments")
        return [entry for kind in listed.values() for entry in kind]
    check(isinstance(listed, list), "segments")
    return list(listed)


def _segment_files(directory: Path, layout: Layout) -> list[str]:
    try:
        return [name for name in os.listdir(directory) if layout.segment_of(name) is not None]
    except FileNotFoundError:
        return []


def segment_files(entry: Any, layout: Layout) -> list[str]:
    """The names of the files of a manifest entry's segment; ``ValueError`` for a segment
    name that would lead out of the directory."""
    check(isinstance(entry, dict), "segment entry")
    segment = entry[layout.key]
    check(isinstance(segment, str), "segment name")
    names = layout.files_of(segment)
    # A name from the manifest never leaves the directory (no "../", no absolute path).
    check(all(layout.segment_of(name) == segment for name in names), "segment name")
    return names


def segment_sums(entry: Any, layout: Layout) -> dict[str, FileSum]:
    """The recorded sums of the files of a manifest entry's segment, by file name; a name
    that is not one of the segment's files is refused (``ValueError``)."""
    check(isinstance(entry, dict), "segment entry")
    segment, files = entry[layout.key], entry["files"]
    check(isinstance(files, dict) and bool(files), "segment files")
    sums = {}
    for name, value in files.items():
        # A name from the manifest never leaves the directory (no "../", no absolute path).
        check(layout.segment_of(name) == segment, "segment file name")
        sums[name] = FileSum.from_json(value)
    return sums


def check_sizes(directory: Path, sums: Mapping[str, FileSum]) -> None:
    """Each file's size against its recorded one: :class:`SegmentGone` for a file that is
    not there (a writer swept it), :class:`DamagedIndexError` for another size."""
    for name, expected in sums.items():
        path = directory / name
        try:
            size = os.stat(path).st_size
        except FileNotFoundError:
            raise SegmentGone(name) from None
        if size != expected.size:
            raise DamagedIndexError(f"{path}: {size} bytes, {expected.size} when written")


# -- writing -------------------------------------------------------------------------------


def dead_bitmap(dead: np.ndarray) -> str:
    """A dead-row mask as the manifest stores it."""
    return base64.b64encode(np.packbits(dead).tobytes()).decode("ascii")


def write_manifest(
    directory: Path,
    layout: Layout,
    config: Mapping[str, Any],
    applied_seq: int,
    next_file: int,
    segments: object,
) -> None:
    """Write the manifest naming ``segments`` (all written already) and make it durable."""
    path = directory / MANIFEST
    manifest = {
        "format": layout.format,
        "config": dict(config),
        "applied_seq": applied_seq,
        "next_file": next_file,
        "segments": segments,
    }
    try:
        directory.mkdir(parents=True, exist_ok=True)
        write_sealed(path, manifest)
        fsync_directory(directory)
    except (OSError, ValueError) as exc:
        raise SearchIndexError(f"cannot write {layout.label} {path}: {exc}") from exc


def sweep(directory: Path, layout: Layout, referenced: Collection[str]) -> None:
    """Delete segment files of segments not in ``referenced`` (merged away, or left by a
    crash) and temporary files of writes that never completed (only writers sweep)."""
    try:
        names = os.listdir(directory)
    except OSError as exc:
        logger.warning("cannot list %s %s: %s", layout.label, directory, exc)
        return
    for name in names:
        segment = layout.segment_of(name)
        if (segment is not None and segment not in referenced) or is_temporary(name):
            try:
                os.unlink(directory / name)
            except OSError as exc:  # harmless: it is swept again after the next write
                logger.warning("cannot remove %s: %s", directory / name, exc)


# -- reading -------------------------------------------------------------------------------


def load_retrying(load_once: Callable[[], T], layout: Layout, directory: Path) -> T:
    """``load_once()``, started again from the newer manifest when a segment it names was
    swept by a writer while we read."""
    for attempt in range(_LOAD_ATTEMPTS):
        try:
            return load_once()
        except SegmentGone:
            time.sleep(0.01 * (attempt + 1))
    raise SearchIndexError(f"{layout.label} {directory} kept changing while it was read")


def read_manifest(
    directory: Path,
    layout: Layout,
    config: Mapping[str, Any],
    *,
    listing: type,
    free: Collection[str] = (),
) -> Manifest | None:
    """The manifest of ``directory`` (None: a new, empty directory), refused when it was
    written with another ``config`` (keys in ``free`` may differ) or its ``segments`` are
    not a ``listing``."""
    label, path = layout.label, directory / MANIFEST
    try:
        version = file_version(path)
        manifest, legacy = _load_manifest(path, layout)
    except FileNotFoundError:
        try:
            names = os.listdir(directory)
        except FileNotFoundError:
            names = []
        except OSError as exc:
            raise SearchIndexError(f"cannot read {label} {directory}: {exc}") from exc
        if any(layout.segment_of(name) is not None for name in names):
            raise DamagedIndexError(f"{label} {path} is missing") from None
        return None
    except OSError as exc:
        raise SearchIndexError(f"cannot read {label} {path}: {exc}") from exc
    except Exception as exc:  # a bad checksum or JSON, nesting too deep, too large
        raise DamagedIndexError(f"{label} {path} is damaged: {exc}") from exc
    try:
        stored = manifest["config"]
        check(isinstance(stored, dict), "config")
        wanted = json.loads(json.dumps(dict(config)))  # as JSON gives it back (tuples: lists)
        for key, value in wanted.items():
            if key not in free and stored.get(key) != value:
                raise SearchIndexError(
                    f"{label} {path} was built with {key}={stored.get(key)!r}, "
                    f"not {value!r}: rebuild it"
                )
        seq, next_file = manifest["applied_seq"], manifest["next_file"]
        for value in (seq, next_file):
            check(type(value) is int and value >= 0, "applied_seq/next_file")
        listed = manifest["segments"]
        check(isinstance(listed, listing), "segments")
    except SearchIndexError:
        raise
    except Exception as exc:  # wrong types anywhere
        raise DamagedIndexError(f"corrupt {label} {path}: {exc}") from exc
    return Manifest(listed, seq, next_file, version, legacy)


def _load_manifest(path: Path, layout: Layout) -> tuple[dict[str, Any], bool]:
    """The manifest at ``path`` as an object of ``layout``'s format (not checked further),
    and whether it is in the previous release's format: plain JSON with that format tag
    and no ``files`` in any segment entry. Any other plain file is refused."""
    manifest, plain = read_json_file(path)
    check(isinstance(manifest, dict), "manifest")
    if not plain:
        check(manifest.get("format") == layout.format, "format")
        return manifest, False
    if manifest.get("format") != layout.legacy_format:
        raise ValueError(
            f"not a sealed JSON file, nor a manifest of format {layout.legacy_format} "
            "(damaged, or written by another version)"
        )
    entries = _entries(manifest.get("segments"))
    check(all(isinstance(e, dict) and "files" not in e for e in entries), "segment entry")
    return manifest, True


def read_dead(segment: _Segment, entry: Any) -> None:
    """Give ``segment`` the dead-row mask of its manifest ``entry``, checking its row count."""
    rows = entry["rows"]
    check(type(rows) is int and rows == segment.n_rows, "row count")
    bits = np.frombuffer(base64.b64decode(entry["dead"], validate=True), np.uint8)
    check(bits.size == (rows + 7) // 8, "dead-row bitmap")
    segment.dead = np.unpackbits(bits, count=rows).astype(bool)
    segment.n_dead = int(segment.dead.sum())


@dataclass
class ReadingAt:
    """The file a segment read is at, for the message of an error (see :func:`read_errors`)."""

    path: Path


@contextmanager
def read_errors(label: str, path: Path) -> Iterator[ReadingAt]:
    """Map what reading a segment may raise to :class:`SearchIndexError` naming the file
    read (the caller moves ``at.path`` from file to file); :class:`SegmentGone` passes."""
    at = ReadingAt(path)
    try:
        yield at
    except (SearchIndexError, SegmentGone):
        raise
    except (OSError, ValueError, KeyError, TypeError, EOFError, binascii.Error) as exc:
        raise SearchIndexError(f"cannot read {label} {at.path}: {exc}") from exc
    except Exception as exc:  # zipfile, numpy and scipy have more ways to reject a bad file
        raise SearchIndexError(f"corrupt {label} {at.path}: {exc}") from exc
