"""The reference engines of the speed harness, over the package's own chunks.

The chunks are read back from the knowledge base's SQLite store and each is turned into the
exact text the package's Whoosh index holds for it
(:func:`knowledge_agent.search.documents.chunk_search_text`), so SQLite FTS5 and bm25s index
identical text. FTS5 is an on-disk database beside the knowledge base (``porter unicode61``,
CJK runs pre-split into bigrams as in :mod:`benchmarks.reference_systems`), queried with the
OR of the query's terms and ranked by ``bm25()``; bm25s is the quality harness's Lucene BM25.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from benchmarks.datasets import Document
from benchmarks.reference_systems import Bm25DocSystem, Fts5System
from benchmarks.reference_tokenizer import bigram_cjk_text
from knowledge_agent.models import KnowledgeChunk, KnowledgeItem
from knowledge_agent.search.documents import chunk_search_text
from knowledge_agent.storage import SQLiteStorageManager


@dataclass(frozen=True)
class ChunkTexts:
    """Chunk ids and the text indexed for each, in the store's item order."""

    ids: list[str]
    texts: list[str]

    @property
    def bytes(self) -> int:
        return sum(len(text.encode("utf-8")) for text in self.texts)


def stored_pairs(
    storage: SQLiteStorageManager,
) -> Iterator[tuple[KnowledgeItem, list[KnowledgeChunk]]]:
    """Every stored item with its chunks, read the way ``SearchEngineImpl.rebuild`` reads them."""
    for item in storage.iter_items():
        yield item, storage.get_chunks_for_item(item.id)


def read_chunk_texts(storage: SQLiteStorageManager) -> ChunkTexts:
    """The indexed text of every stored chunk."""
    ids: list[str] = []
    texts: list[str] = []
    for item, chunks in stored_pairs(storage):
        for chunk in chunks:
            ids.append(chunk.id)
            texts.append(chunk_search_text(item, chunk))
    return ChunkTexts(ids, texts)


class Fts5Reference:
    """SQLite FTS5 in a database file: one transaction to insert, top 10 by ``bm25()``."""

    name = "fts5"

    def __init__(self, path: Path) -> None:
        self.path = path
        self._db = sqlite3.connect(path)
        self._db.execute(
            "CREATE VIRTUAL TABLE chunks USING fts5(chunk_id UNINDEXED, body,"
            " tokenize='porter unicode61')"
        )

    def index(self, chunks: ChunkTexts) -> float:
        """Insert every chunk in one transaction; returns the seconds it took."""
        started = time.perf_counter()
        with self._db:
            self._db.executemany(
                "INSERT INTO chunks (chunk_id, body) VALUES (?, ?)",
                zip(chunks.ids, map(bigram_cjk_text, chunks.texts), strict=True),
            )
        return time.perf_counter() - started

    def search(self, query: str, k: int = 10) -> list[str]:
        """The ids of the ``k`` best chunks for the OR of the query's terms."""
        expression = Fts5System.match_expression(query)
        if not expression:
            return []
        rows = self._db.execute(
            "SELECT chunk_id FROM chunks WHERE chunks MATCH ? ORDER BY bm25(chunks) LIMIT ?",
            (expression, k),
        ).fetchall()
        return [chunk_id for (chunk_id,) in rows]

    def disk_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.path.parent.glob(self.path.name + "*"))

    def close(self) -> None:
        self._db.close()


class Bm25sReference:
    """bm25s (Lucene BM25, the quality harness's tokenizer) over the chunk texts."""

    name = "bm25s"

    def __init__(self) -> None:
        self._system = Bm25DocSystem("bm25s")

    def index(self, chunks: ChunkTexts) -> float:
        """Tokenize and index every chunk; returns the seconds it took."""
        pairs = zip(chunks.ids, chunks.texts, strict=True)
        docs = [Document(doc_id=chunk_id, title="", text=text) for chunk_id, text in pairs]
        started = time.perf_counter()
        self._system.index(docs)
        return time.perf_counter() - started

    def search(self, query: str, k: int = 10) -> list[str]:
        """The ids of the ``k`` best chunks."""
        return [hit.doc_id for hit in self._system.search(query, k)]

    def close(self) -> None:
        self._system.close()
