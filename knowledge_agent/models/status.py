"""Plain results of the facade's inspection calls: a chunk in context, the index status."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from knowledge_agent.models.knowledge_chunk import KnowledgeChunk
from knowledge_agent.models.knowledge_item import KnowledgeItem

__all__ = ["ChunkContext", "IndexDamage", "IndexStatus"]


@dataclass(frozen=True)
class ChunkContext:
    """A chunk, its item, and its neighbours before and after it in the same item."""

    chunk: KnowledgeChunk
    item: KnowledgeItem
    before: list[KnowledgeChunk]
    after: list[KnowledgeChunk]

    def to_dict(self, *, include_item_content: bool = False) -> dict[str, Any]:
        item = self.item.to_dict()
        if not include_item_content:
            item.pop("content")
        return {
            "chunk": self.chunk.to_dict(),
            "item": item,
            "before": [chunk.to_dict() for chunk in self.before],
            "after": [chunk.to_dict() for chunk in self.after],
        }


@dataclass(frozen=True)
class IndexDamage:
    """A damaged file of an index (``keyword``, ``semantic`` or ``dense``), or the index's
    folder when it could not be read for another reason, and what is wrong."""

    index: str
    file: str
    problem: str

    def to_dict(self) -> dict[str, str]:
        return {"index": self.index, "file": self.file, "problem": self.problem}


@dataclass
class IndexStatus:
    """What a knowledge base holds, and whether both indexes agree with SQLite.

    ``problems`` is empty when consistent; ``repaired`` says a check rebuilt or replayed.
    ``sizes`` are bytes on disk (0 for an in-memory knowledge base). ``damaged`` lists the
    index files found damaged (each index with some is also one of the ``problems``).
    """

    data_dir: str | None
    knowledge_bases: int
    items: int
    chunks: int
    sources: int
    roots: int
    keyword_items: int
    keyword_chunks: int
    semantic_items: int
    semantic_chunks: int
    pending_changes: int
    last_indexed_at: str | None
    sizes: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    damaged: list[IndexDamage] = field(default_factory=list)
    repaired: bool = False
    backend: str = "local"
    """``local`` (the data folder) or the database's URL without its password."""
    chunking: dict[str, Any] = field(default_factory=dict)
    """The chunk settings in effect (``ChunkConfig.to_dict``)."""
    rechunk_pending: list[str] = field(default_factory=list)
    """Collected paths and doc sources chunked with other settings: the next sync re-chunks
    them."""

    @property
    def consistent(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {
            "data_dir": self.data_dir,
            "backend": self.backend,
            "knowledge_bases": self.knowledge_bases,
            "items": self.items,
            "chunks": self.chunks,
            "sources": self.sources,
            "roots": self.roots,
            "keyword_index": {"items": self.keyword_items, "chunks": self.keyword_chunks},
            "semantic_index": {"items": self.semantic_items, "chunks": self.semantic_chunks},
            "pending_changes": self.pending_changes,
            "last_indexed_at": self.last_indexed_at,
            "sizes": dict(self.sizes),
            "consistent": self.consistent,
            "problems": list(self.problems),
            "damaged": [damage.to_dict() for damage in self.damaged],
            "repaired": self.repaired,
            "chunking": dict(self.chunking),
            "rechunk_pending": list(self.rechunk_pending),
        }
