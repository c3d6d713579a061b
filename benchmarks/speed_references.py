"""The reference engines of the speed harness, over the package's own chunks.

The chunks are read back from the knowledge base's SQLite store and each is turned into the
exact text the package's Whoosh index holds for it
(:func:`knowledge_agent.search.documents.chunk_search_text`), so SQLite FTS5 and bm25s index
identical text. FTS5 is an on-disk database beside the knowledge base (``porter unicode61``,
CJK runs pre-split into bigrams as in :mod:`benchmarks.reference_systems`), queried with the
OR of the query's terms and ranked by ``bm25()``; bm25s is the quality harness's Lucene BM25.

The write figures have FTS5 as their reference too (:func:`fts5_write_cycle`): single-row
inserts, each its own committed transaction, then one query.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks.datasets import Document
from benchmarks.reference_systems import Bm25DocSystem, Fts5System
from benchmarks.reference_tokenizer import bigram_cjk_text
from benchmarks.speed_measure import WriteCycle, elapsed_ms
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


def fts5_write_cycle(database: str, texts: Sequence[tuple[str, str]], query: str) -> WriteCycle:
    """Open ``database`` (a file or ``":memory:"``) and create an FTS5 table; insert each
    ``(title, text)`` as a transaction of its own, committed; one query, top 10 by ``bm25()``;
    close. A file gets WAL and ``synchronous=NORMAL``, the package's own store's settings, so
    both pay the same for a commit."""
    started = time.perf_counter_ns()
    db = sqlite3.connect(database)
    if database != ":memory:":
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = NORMAL")
    db.execute("CREATE VIRTUAL TABLE texts USING fts5(body, tokenize='porter unicode61')")
    db.commit()
    open_ms = elapsed_ms(started)
    try:
        add_ms: list[float] = []
        last = 0
        for title, text in texts:
            started = time.perf_counter_ns()
            with db:  # commits
                cursor = db.execute(
                    "INSERT INTO texts (body) VALUES (?)", (bigram_cjk_text(f"{title}\n\n{text}"),)
                )
            add_ms.append(elapsed_ms(started))
            last = cursor.lastrowid or 0
        started = time.perf_counter_ns()
        rows = db.execute(
            "SELECT rowid FROM texts WHERE texts MATCH ? ORDER BY bm25(texts) LIMIT 10",
            (Fts5System.match_expression(query),),
        ).fetchall()
        search_ms = elapsed_ms(started)
    except BaseException:
        db.close()
        raise
    started = time.perf_counter_ns()
    db.close()
    close_ms = elapsed_ms(started)
    found = any(rowid == last for (rowid,) in rows)
    return WriteCycle(open_ms, tuple(add_ms), search_ms, close_ms, found)
