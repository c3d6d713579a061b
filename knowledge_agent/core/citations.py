"""Checking a citation: is the text an evidence reference points at still what it said?

A reference names a chunk, its document's path and lines, and a hash of its text. Chunks get
new ids whenever their document is indexed again, so a reference whose chunk is gone is
looked up by path: the same text elsewhere in the document is ``moved``, other text at the
cited lines is ``changed``, nothing there (or no such document) is ``gone``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from knowledge_agent.errors import QueryError
from knowledge_agent.models import KnowledgeChunk, KnowledgeItem
from knowledge_agent.models.evidence import EvidenceRef, chunk_hash, evidence_ref
from knowledge_agent.storage import SQLiteStorageManager

__all__ = ["CITATION_STATUSES", "CitationCheck", "check_citation"]

CITATION_STATUSES = ("unchanged", "moved", "changed", "gone")


@dataclass(frozen=True)
class CitationCheck:
    """What became of a cited passage: ``status`` is one of :data:`CITATION_STATUSES`;
    ``chunk`` and ``current_ref`` are the text there now (None and "" when gone)."""

    ref: str
    status: str
    item: KnowledgeItem | None = None
    chunk: KnowledgeChunk | None = None
    current_ref: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "ref": self.ref,
            "status": self.status,
            "current_ref": self.current_ref,
            "item_id": self.item.id if self.item else None,
            "title": self.item.title if self.item else None,
            "chunk": self.chunk.to_dict() if self.chunk else None,
        }


def check_citation(storage: SQLiteStorageManager, ref: str) -> CitationCheck:
    """Look up ``ref``; ``QueryError`` when it is not an evidence reference."""
    try:
        cited = EvidenceRef.parse(ref)
    except ValueError as exc:
        raise QueryError(str(exc)) from None
    chunk = storage.get_chunk_by_id(cited.chunk_id)
    if chunk is not None:
        item = storage.get_item(chunk.item_id)
        status = "unchanged" if cited.matches(chunk.content) else "changed"
        return _found(ref, status, item, chunk, cited.path)
    for item in storage.items_with_source(cited.path):
        chunks = storage.get_chunks_for_item(item.id)
        same = [c for c in chunks if chunk_hash(c.content).startswith(cited.content_hash)]
        if same:
            return _found(ref, "moved", item, same[0], cited.path)
        there = [c for c in chunks if _overlaps(c, cited)]
        if there:
            return _found(ref, "changed", item, there[0], cited.path)
    return CitationCheck(ref, "gone")


def _found(
    ref: str, status: str, item: KnowledgeItem | None, chunk: KnowledgeChunk, path: str
) -> CitationCheck:
    where = (item.source_uri or item.title or item.id) if item else path
    return CitationCheck(
        ref, status, item, chunk, evidence_ref(chunk.id, where, chunk.metadata, chunk.content)
    )


def _overlaps(chunk: KnowledgeChunk, cited: EvidenceRef) -> bool:
    start, end = chunk.metadata.get("start_line"), chunk.metadata.get("end_line")
    if cited.start_line is None or not isinstance(start, int) or not isinstance(end, int):
        return False
    return start <= (cited.end_line or cited.start_line) and end >= cited.start_line
