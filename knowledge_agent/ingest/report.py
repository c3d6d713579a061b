"""What a collection run did: the report, its summary of skipped files, the progress events."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any

from knowledge_agent.ingest.walker import LINK_OUTSIDE, NON_TEXT_KINDS
from knowledge_agent.storage.sources import path_to_db

__all__ = [
    "LINK_LEAVING",
    "MAX_EXTENSIONS",
    "MAX_KEPT_PATHS",
    "NOT_DOCUMENT",
    "NOT_TEXT",
    "CollectProgress",
    "CollectReport",
    "FileIssue",
    "NotTextFiles",
    "SkipGroup",
    "skip_kind",
    "walk_skip_reason",
]

NOT_TEXT = "not text"
"""The reason of every file the walk leaves out as not text (images, fonts …)."""

NOT_DOCUMENT = "not a document"
"""The reason of every file the walk leaves out as not a document (templates …)."""

_NOT_DOCUMENTS = frozenset({"template", "site setting"})

LINK_LEAVING = "link leaving the folder"
"""The reason of every symlink the walk did not follow because its target is outside."""

MAX_KEPT_PATHS = 10_000
"""Paths of files left out as not text that a report keeps for a listing; counts are complete."""

MAX_EXTENSIONS = 32
"""Distinct extensions counted per kind; the rest count under "" (a folder of odd names)."""


def skip_kind(reason: str) -> str:
    """The kind of a skip from its reason, for grouping: "binary", "empty", "encoding" …"""
    if reason == "binary file":
        return "binary"
    if reason == "empty file":
        return "empty"
    if reason.startswith("unrecognised text encoding"):
        return "encoding"
    if reason.startswith("no extractable text"):
        return "no text"
    if reason.endswith(" limit") and " is over the " in reason:
        return "too large"
    return "other"


def walk_skip_reason(kind: str) -> str:
    """The reason of an entry the walk left out unread, by its kind (see NotTextFiles)."""
    if kind == LINK_OUTSIDE:
        return LINK_LEAVING
    return NOT_DOCUMENT if kind in _NOT_DOCUMENTS else NOT_TEXT


def _group_reason(kind: str, reason: str) -> str:
    """The part of a reason that files of one group share (not the size of each file)."""
    if kind == "too large":
        return reason.partition(" is ")[2] or reason  # "2.9 KB is over the 2.0 KB limit"
    if kind == "encoding":
        return "unrecognised text encoding"
    return reason


def _extension(path: str) -> str:
    """What a skipped file is, by name: "png", "tar.gz", "min.js"; a lock file's whole name."""
    pure = PurePath(path.replace("\\", "/"))
    if pure.name in _LOCK_NAMES:
        return pure.name
    suffixes = [suffix.lower() for suffix in pure.suffixes]
    if len(suffixes) > 1 and suffixes[-2] in (".tar", ".min"):
        return (suffixes[-2] + suffixes[-1]).lstrip(".")
    return suffixes[-1].lstrip(".") if suffixes else ""


# Lock files are named, not suffixed: the name says what they are.
_LOCK_NAMES = frozenset(NON_TEXT_KINDS["lock file"])


def _count_extension(counts: Counter[str], extension: str) -> None:
    """Count one file, keeping ``counts`` bounded (``MAX_EXTENSIONS``)."""
    if extension in counts or len(counts) < MAX_EXTENSIONS:
        counts[extension] += 1
    else:
        counts[""] += 1


@dataclass(frozen=True)
class FileIssue:
    """A file that was skipped or failed, and why.

    ``path`` and ``reason`` are readable text: a byte of the file name that is not UTF-8
    is shown as its stored escape (``\ufffdFF``), so a report can always be printed.
    ``kind`` groups skipped files in a summary; empty, it is read from the reason
    (:func:`skip_kind`).
    """

    path: str
    reason: str
    kind: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", path_to_db(self.path))
        object.__setattr__(self, "reason", path_to_db(self.reason))
        if not self.kind:
            object.__setattr__(self, "kind", skip_kind(self.reason))

    def to_dict(self) -> dict[str, str]:
        return {"path": self.path, "reason": self.reason}


@dataclass(frozen=True)
class SkipGroup:
    """Skipped files of one kind and reason: how many, and their extensions, most first.

    ``kind`` is a ``NON_TEXT_KINDS`` key of the walker ("image", "font", "media",
    "archive", "lock file", "source map", "minified") with reason ``NOT_TEXT``, "template" or
    "site setting" with reason ``NOT_DOCUMENT``, the walker's
    ``LINK_OUTSIDE`` with reason ``LINK_LEAVING``, or one of "too large", "binary",
    "empty", "encoding", "no text", "other". ``paths`` holds the
    files when the report has them all (skips the collector saw; not-text files while
    the report kept their paths).
    """

    kind: str
    reason: str
    count: int
    extensions: tuple[tuple[str, int], ...]
    paths: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "reason": self.reason,
            "count": self.count,
            "extensions": dict(self.extensions),
        }


@dataclass
class NotTextFiles:
    """Files a walk left out unread — as not text, or as links leaving the folder — counted
    by kind (:func:`walk_skip_reason`) and extension, in bounded memory.

    A folder may hold a hundred thousand images: every one is counted, but only the first
    ``MAX_KEPT_PATHS`` paths are kept (for a listing), as (path, kind).
    """

    count: int = 0
    by_kind: dict[str, Counter[str]] = field(default_factory=dict)
    paths: list[tuple[str, str]] = field(default_factory=list)

    def add(self, path: str, kind: str) -> None:
        self.count += 1
        _count_extension(self.by_kind.setdefault(kind, Counter()), _extension(path))
        if len(self.paths) < MAX_KEPT_PATHS:
            self.paths.append((path_to_db(path), kind))

    def merge(self, other: NotTextFiles) -> None:
        self.count += other.count
        for kind, counts in other.by_kind.items():
            mine = self.by_kind.setdefault(kind, Counter())
            for extension, number in counts.items():
                if extension in mine or len(mine) < MAX_EXTENSIONS:
                    mine[extension] += number
                else:
                    mine[""] += number
        self.paths.extend(other.paths[: max(0, MAX_KEPT_PATHS - len(self.paths))])

    @property
    def dropped(self) -> int:
        """Files counted whose path was not kept."""
        return self.count - len(self.paths)


@dataclass(frozen=True)
class CollectProgress:
    """Progress of a collection run.

    One event per file, ``status`` processed, unchanged, skipped, failed or removed, with
    ``done`` / ``total`` files and bytes; then ``indexing`` events while the search indexes
    catch up, ``done`` / ``total`` counting items (``path`` empty, bytes 0). ``path`` is
    readable text, as in :class:`FileIssue`.
    """

    path: str
    status: str
    done: int
    total: int
    bytes_done: int
    bytes_total: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", path_to_db(self.path))


@dataclass
class CollectReport:
    """The outcome of :meth:`KnowledgeAgentCore.collect_knowledge` or ``sync``.

    ``processed`` files were (re)indexed, ``unchanged`` ones were left alone, ``skipped``
    had nothing to index (binary, empty, too large), ``failed`` could not be read or
    parsed (a previously indexed version stays searchable and is retried next run), and
    ``removed`` files had disappeared, so their items were deleted. ``not_text`` counts
    the files the walk left out as not text (images, fonts, archives …), never read;
    :meth:`skip_summary` groups them with ``skipped`` by kind and reason. ``stopped_by``
    names the bounds that cut a crawl short (its ``max_time``, the sitemap caps): pages it
    did not reach were neither fetched nor removed. ``notes`` say what else the user
    should know and what to do about it, a sentence each (sitemap URLs left out as on
    another origin, say).
    """

    kb: str
    processed: int = 0
    unchanged: int = 0
    removed: int = 0
    skipped: list[FileIssue] = field(default_factory=list)
    failed: list[FileIssue] = field(default_factory=list)
    chunks_added: int = 0
    chunks_removed: int = 0
    bytes_processed: int = 0
    duration_s: float = 0.0
    item_ids: list[str] = field(default_factory=list)
    not_text: NotTextFiles = field(default_factory=NotTextFiles)
    stopped_by: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def files_skipped(self) -> int:
        """Unchanged files plus files with nothing to index."""
        return self.unchanged + len(self.skipped)

    @property
    def skipped_count(self) -> int:
        """Files skipped by the collector plus files left out as not text."""
        return len(self.skipped) + self.not_text.count

    def skip_summary(self) -> list[SkipGroup]:
        """Every skipped file in groups of one kind and reason, the biggest group first."""
        counts: dict[tuple[str, str], Counter[str]] = {}
        paths: dict[tuple[str, str], list[str]] = {}
        for issue in self.skipped:
            key = (issue.kind, _group_reason(issue.kind, issue.reason))
            _count_extension(counts.setdefault(key, Counter()), _extension(issue.path))
            paths.setdefault(key, []).append(issue.path)
        complete = not self.not_text.dropped
        if complete:
            for path, kind in self.not_text.paths:
                paths.setdefault((kind, walk_skip_reason(kind)), []).append(path)
        for kind, extensions in self.not_text.by_kind.items():
            counts.setdefault((kind, walk_skip_reason(kind)), Counter()).update(extensions)
        groups = [
            SkipGroup(
                kind=kind,
                reason=reason,
                count=sum(extensions.values()),
                extensions=tuple(sorted(extensions.items(), key=lambda e: (-e[1], e[0]))),
                paths=tuple(paths.get((kind, reason), ())),
            )
            for (kind, reason), extensions in counts.items()
        ]
        return sorted(groups, key=lambda group: (-group.count, group.kind, group.reason))

    def merge(self, other: CollectReport) -> None:
        """Add another run's counts to this one (used when syncing several roots)."""
        self.processed += other.processed
        self.unchanged += other.unchanged
        self.removed += other.removed
        self.skipped.extend(other.skipped)
        self.not_text.merge(other.not_text)
        self.failed.extend(other.failed)
        self.chunks_added += other.chunks_added
        self.chunks_removed += other.chunks_removed
        self.bytes_processed += other.bytes_processed
        self.duration_s += other.duration_s
        self.item_ids.extend(other.item_ids)
        self.stopped_by.extend(other.stopped_by)
        self.notes.extend(other.notes)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the CLI's ``--json`` shape)."""
        return {
            "kb": self.kb,
            "processed": self.processed,
            "unchanged": self.unchanged,
            "skipped": [issue.to_dict() for issue in self.skipped],
            "skipped_summary": {
                "total": self.skipped_count,
                "groups": [group.to_dict() for group in self.skip_summary()],
            },
            "failed": [issue.to_dict() for issue in self.failed],
            "removed": self.removed,
            "chunks_added": self.chunks_added,
            "chunks_removed": self.chunks_removed,
            "bytes_processed": self.bytes_processed,
            "duration_s": round(self.duration_s, 3),
            "item_ids": list(self.item_ids),
            "stopped_by": list(self.stopped_by),
            "notes": list(self.notes),
        }


class CollectInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped a collection run; ``report`` counts the files committed before it.

    Every file is committed in its own transaction, so what the report lists is in the
    database and the rest is picked up by the next run.
    """

    def __init__(self, report: CollectReport) -> None:
        super().__init__(f"interrupted after {report.processed} files")
        self.report = report
