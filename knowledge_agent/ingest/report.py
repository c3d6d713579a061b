"""What a collection run did: the report and the per-file progress events."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from knowledge_agent.storage.sources import path_to_db

__all__ = ["CollectProgress", "CollectReport", "FileIssue"]


@dataclass(frozen=True)
class FileIssue:
    """A file that was skipped or failed, and why.

    ``path`` and ``reason`` are readable text: a byte of the file name that is not UTF-8
    is shown as its stored escape (``\ufffdFF``), so a report can always be printed.
    """

    path: str
    reason: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", path_to_db(self.path))
        object.__setattr__(self, "reason", path_to_db(self.reason))

    def to_dict(self) -> dict[str, str]:
        return {"path": self.path, "reason": self.reason}


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
    ``removed`` files had disappeared, so their items were deleted.
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

    @property
    def files_skipped(self) -> int:
        """Unchanged files plus files with nothing to index."""
        return self.unchanged + len(self.skipped)

    def merge(self, other: CollectReport) -> None:
        """Add another run's counts to this one (used when syncing several roots)."""
        self.processed += other.processed
        self.unchanged += other.unchanged
        self.removed += other.removed
        self.skipped.extend(other.skipped)
        self.failed.extend(other.failed)
        self.chunks_added += other.chunks_added
        self.chunks_removed += other.chunks_removed
        self.bytes_processed += other.bytes_processed
        self.duration_s += other.duration_s
        self.item_ids.extend(other.item_ids)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the CLI's ``--json`` shape)."""
        return {
            "kb": self.kb,
            "processed": self.processed,
            "unchanged": self.unchanged,
            "skipped": [issue.to_dict() for issue in self.skipped],
            "failed": [issue.to_dict() for issue in self.failed],
            "removed": self.removed,
            "chunks_added": self.chunks_added,
            "chunks_removed": self.chunks_removed,
            "bytes_processed": self.bytes_processed,
            "duration_s": round(self.duration_s, 3),
            "item_ids": list(self.item_ids),
        }
