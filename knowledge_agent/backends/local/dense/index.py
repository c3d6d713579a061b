"""Dense-vector cosine search over chunks (and items without chunks), from an embedder.

The dense sibling of :class:`~knowledge_agent.backends.local.tfidf.index.SemanticSearcher`:
the same public methods and the same update, rebuild, sharing and filter semantics, but rows
are unit vectors from an :class:`~knowledge_agent.embeddings.Embedder` and a query is text,
embedded with ``kind="query"``::

    chunk row   embed(f"{heading}\\n{content}"[:MAX_TEXT_CHARS])   (content alone without heading)
    item row    embed(f"{title}\\n{content}"[:MAX_TEXT_CHARS])     only for an item without chunks
    score       query · row                                        (cosine of unit vectors)

An item scores as its best row: its best chunk, or its own row when it has no chunks.
Scores are cosines in (0, 1]: rows scoring 1e-6 or less (an unrelated or empty text: an
orthogonal row's dot is float32 rounding noise), below ``min_similarity``, or not finite are
never returned. Filters restrict the rows *before*
the top k is taken (``SearchFilters.matches`` semantics, vectorised per item); the top k is
found with a partition, ties broken by row order. Queries are brute-force matrix-vector
products over the segments, in place: no copy of the vectors is made for a query.

**Updates** embed only their own rows, in batches of ``batch_size`` texts, and before any
row changes (an embedder failure changes nothing). A row whose text is unchanged since the
item's previous version (the same 64-bit text hash) keeps its vector, as do identical texts
within a batch, so replaying an update or re-adding an edited document embeds only what
changed. A rebuild (:meth:`DenseIndex.refit`) embeds everything again, unless it is asked
to reuse the vectors the index holds (when the rebuild is for another index's sake: a sound
dense index is then rewritten without a single text embedded again, where nothing changed).

**Storage** is log structured, like the TF-IDF index (:mod:`~knowledge_agent.search.
dense_store` has the layout): each :meth:`DenseIndex.update` appends one segment and marks
replaced rows dead; small segments are merged, a segment more than a quarter dead is
rewritten without its dead rows, and merges stream the vectors to the new file a block at a
time. Written vectors are memory-mapped, so the index costs page cache rather than heap and
reader processes share it. A directory written with another embedder ``name`` or
``dimensions`` (or another text recipe), or that cannot be read, raises
:class:`SearchIndexError` on open: rebuild it from SQLite.

**Sharing.** Opening never writes: a directory without a manifest is an empty index until
the first update creates it. One process writes a directory at a time (the data folder's
write lock); readers call :meth:`DenseIndex.refresh`, which notices a newer manifest and
loads it, reusing the segments it already holds.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from knowledge_agent.backends.local.dense.collection import DenseCollection
from knowledge_agent.backends.local.dense.segments import (
    DenseSegment,
    build_segment,
    merged_arrays,
    text_hash,
    vector_blocks,
)
from knowledge_agent.backends.local.dense.store import DenseStore, segment_name
from knowledge_agent.backends.local.segments.index import SegmentIndex
from knowledge_agent.embeddings.base import Embedder, normalize_rows
from knowledge_agent.errors import ConfigError, EmbeddingError
from knowledge_agent.models.knowledge_chunk import KnowledgeChunk
from knowledge_agent.models.knowledge_item import KnowledgeItem
from knowledge_agent.search.analysed_batch import AnalysedBatch, latest_pairs
from knowledge_agent.search.filters import SearchFilters
from knowledge_agent.search.hits import ChunkHit, ItemHit

__all__ = ["MAX_TEXT_CHARS", "DenseIndex", "DenseRefit", "chunk_text", "embed_rows", "item_text"]

logger = logging.getLogger(__name__)

MAX_TEXT_CHARS = 4000
"""Characters of a row's text (or a query) that are embedded: a chunk is at most
``max_chunk_size`` (1500 by default) plus its heading path, so this cuts only item rows of
long items without chunks (their head) and unusual chunks. A mean-pooling model gains
nothing from more, and an HTTP model would truncate it anyway."""

_TEXT_RECIPE = "chunk: heading\\ncontent; item without chunks: title\\ncontent"
_FIT_BATCH = 4096  # rows embedded into one segment by fit_chunks

_Pair = tuple[KnowledgeItem, Sequence[KnowledgeChunk]]


def chunk_text(chunk: KnowledgeChunk) -> str:
    """The text embedded for a chunk row: its heading path and content, capped."""
    text = f"{chunk.heading}\n{chunk.content}" if chunk.heading else chunk.content
    return text[:MAX_TEXT_CHARS]


def item_text(item: KnowledgeItem) -> str:
    """The text embedded for the row of an item without chunks: title and content head."""
    text = f"{item.title}\n{item.content}" if item.title else item.content
    return text[:MAX_TEXT_CHARS]


def embed_rows(
    texts: Sequence[str],
    hashes: Sequence[int],
    known: dict[int, np.ndarray],
    dimensions: int,
    batch_size: int,
    embed: Callable[[list[str]], np.ndarray],
) -> tuple[np.ndarray, int]:
    """The vector of each text (``hashes`` its text hashes): taken from ``known`` (hash →
    vector) when there, else embedded once per distinct text, ``batch_size`` texts per
    ``embed`` call. The vectors, and how many texts were embedded."""
    vectors = np.empty((len(texts), dimensions), np.float32)
    first: dict[int, int] = {}  # text hash → the first row that has it
    todo: list[int] = []
    copies: list[tuple[int, int]] = []
    for row, digest in enumerate(hashes):
        vector = known.get(digest)
        if vector is not None:
            vectors[row] = vector
        elif digest in first:
            copies.append((row, first[digest]))
        else:
            first[digest] = row
            todo.append(row)
    for start in range(0, len(todo), batch_size):
        rows = todo[start : start + batch_size]
        vectors[rows] = embed([texts[row] for row in rows])
    for row, source in copies:
        vectors[row] = vectors[source]
    return vectors, len(todo)


class DenseRefit:
    """A rebuild of a :class:`DenseIndex` fed batch by batch, holding its lock until
    :meth:`finish` swaps the new rows in or :meth:`cancel` leaves the old ones.

    On disk each batch's segment is written as it comes (and merged as segments pile up),
    so a rebuild holds one batch of vectors in memory, not all of them.
    """

    def __init__(self, index: DenseIndex, *, reuse: bool = False) -> None:
        # Vectors are taken over only from files verified whole: damage is never copied
        # into a new generation.
        damage = index.verify(full=True) if reuse else []
        if damage:
            logger.warning("embedding every row again: dense index %s", damage[0])
        index._acquire_open()
        self._index: DenseIndex | None = index
        self._started = time.perf_counter()
        self._fresh = DenseCollection(index.dimensions)
        # The rows held until finish() swaps in the new ones.
        self._reuse = index._collection if reuse and not damage else None

    def add(self, upserts: Sequence[_Pair] | AnalysedBatch) -> None:
        index = self._index
        assert index is not None, "the rebuild is over"
        segment = index._embed_segment(_pairs(upserts), reuse=self._reuse)
        if segment is None:
            return
        if index._store is not None:
            index._write_in_place(segment)
            assert segment.name is not None
            index._refit_names.add(segment.name)
        self._fresh.kill(segment.item_ids.tolist())  # an item given twice: the last wins
        self._fresh.add(segment)
        self._fresh.maintain(index.max_segments, index.compact_dead_fraction, index._merge)

    def finish(self) -> int:
        """Make the new rows the index; returns the chunk count."""
        index, fresh = self._index, self._fresh
        assert index is not None, "the rebuild is over"
        old = index._collection, index._applied_seq
        try:
            index._collection, index._applied_seq = fresh, 0
            try:
                index._persist()
            except BaseException:
                index._collection, index._applied_seq = old  # the manifest is the old one
                raise
            index._refit_names.clear()  # named by the manifest now: not to be discarded
        finally:
            self.cancel()
        logger.info(
            "dense index rebuilt: %d chunks, %d items in %.1f s",
            fresh.n_live_chunks,
            fresh.n_items,
            time.perf_counter() - self._started,
        )
        return fresh.n_live_chunks

    def cancel(self) -> None:
        """Leave the index as it was (if :meth:`finish` has not swapped it); idempotent."""
        index = self._index
        if index is None:
            return
        self._index = None
        try:
            if index._store is not None:
                for name in index._refit_names:
                    index._store.discard(name)
            index._refit_names.clear()
        finally:
            self._reuse = None
            index._lock.release()


class DenseIndex(SegmentIndex):
    """Cosine search over embedded chunk rows (and rows of items without chunks).

    ``index_dir=None`` keeps everything in memory; otherwise the state lives in that
    directory (created by the first update) and is loaded on open. A directory that cannot
    be read, or was written with another embedder ``name`` or ``dimensions``, raises
    :class:`SearchIndexError`: rebuild it from SQLite. Texts are embedded ``batch_size`` at
    a time. Thread-safe; one process writes a directory at a time, others :meth:`refresh`.
    """

    _label = "dense index"

    #: more segments than this triggers a merge of the newest ones
    max_segments: int = 16
    #: a segment with more dead rows than this fraction is rewritten without them
    compact_dead_fraction: float = 0.25

    def __init__(
        self,
        index_dir: str | os.PathLike[str] | None,
        embedder: Embedder,
        *,
        batch_size: int = 256,
    ) -> None:
        if not isinstance(embedder, Embedder):
            raise ConfigError(f"embedder must be an Embedder, got {type(embedder).__name__}")
        name, dimensions = embedder.name, embedder.dimensions
        if not isinstance(name, str) or not name:
            raise ConfigError(f"the embedder's name must be a non-empty string, got {name!r}")
        if isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions < 1:
            raise ConfigError(f"the embedder's dimensions must be positive, got {dimensions!r}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError(f"batch_size must be a positive integer, got {batch_size!r}")
        self.embedder = embedder
        self.dimensions = dimensions
        self.batch_size = batch_size
        self.index_dir = None if index_dir is None else Path(index_dir)
        self._embedder_name = name
        self._lock = threading.RLock()
        self._closed = False
        self._applied_seq = 0
        self._next_file = 1
        self._collection = DenseCollection(dimensions)
        self._refit_names: set[str] = set()  # written by a rebuild, in no manifest yet
        self._on_disk: tuple[int, int, int] | None = None  # the manifest this state reflects
        self._store = (
            None
            if self.index_dir is None
            else DenseStore(self.index_dir, self._config(), dimensions)
        )
        if self._store is not None:
            self._load()

    @property
    def embedder_name(self) -> str:
        """The name of the embedder the stored vectors were made with (this one's)."""
        return self._embedder_name

    def _config(self) -> dict[str, Any]:
        return {
            "embedder": self._embedder_name,
            "dimensions": self.dimensions,
            "text": _TEXT_RECIPE,
            "max_chars": MAX_TEXT_CHARS,
        }

    # -- lifecycle -----------------------------------------------------------------------

    def close(self) -> None:
        """Release the in-memory index and its file maps; everything is on disk already.
        Idempotent."""
        with self._lock:
            self._closed = True
            self._collection = DenseCollection(self.dimensions)

    # -- updates -------------------------------------------------------------------------

    def update(
        self, upserts: Sequence[_Pair] | AnalysedBatch = (), deletes: Iterable[str] = ()
    ) -> None:
        """Replace the rows of each upserted item, drop the rows of each deleted item id.

        ``upserts`` may be an :class:`AnalysedBatch` (its pairs are used). Only the new rows
        are embedded, and only those whose text changed. Replaying an update is harmless;
        an id both upserted and deleted in one call ends up deleted. One call is one
        persisted batch.
        """
        with self._lock:
            self._check_open()
            started = time.perf_counter()
            gone = [deletes] if isinstance(deletes, str) else list(deletes)
            doomed = set(gone)
            pairs = [pair for pair in _pairs(upserts) if pair[0].id not in doomed]
            segment = self._embed_segment(pairs, reuse=self._collection)
            collection = self._collection
            killed = collection.kill([*(item.id for item, _ in pairs), *gone])
            if segment is None and not killed:
                return
            if segment is not None:
                collection.add(segment)
            collection.maintain(self.max_segments, self.compact_dead_fraction, self._merge)
            self._persist()
            logger.debug("dense update applied in %.1f ms", (time.perf_counter() - started) * 1e3)

    def _fit_batch(self) -> int:
        return _FIT_BATCH  # read at call time, so a test can shrink it

    def refit(self, *, reuse: bool = False) -> DenseRefit:
        """A rebuild fed batch by batch (see :class:`DenseRefit`); :meth:`fit_chunks` in parts.
        With ``reuse``, a row whose item holds the same text as a live row of the index now
        keeps that row's vector, if every file of the index verifies: only what changed is
        embedded."""
        return DenseRefit(self, reuse=reuse)

    def _embed_segment(
        self,
        pairs: Sequence[tuple[KnowledgeItem, Sequence[KnowledgeChunk]]],
        reuse: DenseCollection | None,
    ) -> DenseSegment | None:
        """The rows of ``pairs`` as a new segment (None: no pairs), embedding each distinct
        text once and none that ``reuse`` holds for the same item already."""
        if not pairs:
            return None
        keys: list[str] = []
        chunk_index: list[int] = []
        is_chunk: list[bool] = []
        row_item: list[int] = []
        texts: list[str] = []
        for position, (item, chunks) in enumerate(pairs):
            if chunks:
                for chunk in chunks:
                    keys.append(chunk.id)
                    chunk_index.append(int(chunk.chunk_index))
                    is_chunk.append(True)
                    row_item.append(position)
                    texts.append(chunk_text(chunk))
            else:
                keys.append(item.id)
                chunk_index.append(-1)
                is_chunk.append(False)
                row_item.append(position)
                texts.append(item_text(item))
        hashes = [text_hash(text) for text in texts]
        known = self._known_vectors(pairs, reuse) if reuse is not None else {}
        vectors, embedded = embed_rows(
            texts,
            hashes,
            known,
            self.dimensions,
            self.batch_size,
            lambda batch: self._embed(batch, "document"),
        )
        logger.debug("dense rows: %d embedded, %d reused", embedded, len(texts) - embedded)
        return build_segment(
            vectors, keys, chunk_index, is_chunk, row_item, hashes, [item for item, _ in pairs]
        )

    @staticmethod
    def _known_vectors(
        pairs: Sequence[tuple[KnowledgeItem, Sequence[KnowledgeChunk]]],
        collection: DenseCollection,
    ) -> dict[int, np.ndarray]:
        """Text hash → vector of the live rows these items have now (copies: the rows
        may die before the vectors are used)."""
        known: dict[int, np.ndarray] = {}
        for item, _ in pairs:
            found = collection.live_rows(item.id)
            if found is None:
                continue
            seg, rows = found
            if rows.size == 0:
                continue
            block = np.array(seg.vectors[rows], dtype=np.float32)
            for digest, vector in zip(seg.hashes[rows].tolist(), block, strict=True):
                known[int(digest)] = vector
        return known

    def _embed(self, texts: list[str], kind: str) -> np.ndarray:
        """Unit float32 rows for ``texts``, checked: the embedder is someone else's code."""
        vectors = self.embedder.embed(texts, kind=kind)  # type: ignore[arg-type]
        try:
            matrix = np.asarray(vectors, dtype=np.float32)
        except (TypeError, ValueError) as exc:
            raise EmbeddingError(self._embedder_name, f"unusable vectors: {exc}") from exc
        if matrix.shape != (len(texts), self.dimensions):
            raise EmbeddingError(
                self._embedder_name,
                f"returned shape {matrix.shape} for {len(texts)} texts, "
                f"not ({len(texts)}, {self.dimensions})",
            )
        return normalize_rows(matrix)

    # -- maintenance ---------------------------------------------------------------------

    def _merge(self, segments: Sequence[DenseSegment]) -> DenseSegment:
        """One segment of the live rows of ``segments``: written at once on disk (its
        vectors streamed from theirs), concatenated in memory."""
        if self._store is not None:
            return self._write(segments)
        arrays, n_rows = merged_arrays(segments)
        blocks = list(vector_blocks(segments))
        vectors = (
            np.concatenate(blocks) if blocks else np.empty((n_rows, self.dimensions), np.float32)
        )
        return DenseSegment.from_arrays(arrays, vectors, self.dimensions)

    def _write(self, segments: Sequence[DenseSegment]) -> DenseSegment:
        """Write the live rows of ``segments`` as one new segment file pair; the result's
        vectors are memory-mapped from it."""
        assert self._store is not None
        arrays, n_rows = merged_arrays(segments)
        name = segment_name(self._next_file)
        vectors = self._store.write_segment(name, arrays, vector_blocks(segments), n_rows)
        self._next_file += 1
        merged = DenseSegment.from_arrays(arrays, vectors, self.dimensions)
        merged.name = name
        # A rebuild's segment that is merged away again was never in a manifest: no reader
        # can hold it, so it goes at once.
        for seg in segments:
            if seg.name in self._refit_names:
                self._refit_names.discard(seg.name)
                self._store.discard(seg.name)
        return merged

    def _persist(self) -> None:
        """Write what changed as a new generation (a no-op in memory)."""
        if self._store is None:
            return
        for seg in self._collection.segments:
            if seg.name is None:
                self._write_in_place(seg)
        self._on_disk = self._store.save(
            self._collection.segments, self._applied_seq, self._next_file, keep=self._refit_names
        )

    def _write_in_place(self, seg: DenseSegment) -> None:
        """Write a new segment as it is (dead rows too: its mask goes in the manifest) and
        map its vectors from the file; the object stays the one the collection holds."""
        assert self._store is not None
        name = segment_name(self._next_file)
        blocks = (seg.vectors[start : start + 8192] for start in range(0, seg.n_rows, 8192))
        seg.vectors = self._store.write_segment(name, seg.arrays(), blocks, seg.n_rows)
        self._next_file += 1
        seg.name = name  # only once complete: a failed write is retried

    # -- queries -------------------------------------------------------------------------

    def search_chunks(
        self,
        query: str,
        top_k: int,
        min_similarity: float = 0.0,
        filters: SearchFilters | None = None,
        *,
        per_item: int | None = None,
    ) -> list[ChunkHit]:
        """The ``top_k`` chunks whose vectors are closest to the query text's, best first;
        at most ``per_item`` of one item when it is given."""
        found = self._search(query, top_k, min_similarity, filters, per_item=False, cap=per_item)
        return [
            ChunkHit(
                chunk_id=str(seg.keys[row]),
                item_id=str(seg.item_ids[seg.row_item[row]]),
                chunk_index=int(seg.chunk_index[row]),
                score=score,
            )
            for seg, row, score in found
        ]

    def search_items(
        self,
        query: str,
        top_k: int,
        min_similarity: float = 0.0,
        filters: SearchFilters | None = None,
    ) -> list[ItemHit]:
        """The ``top_k`` items closest to the query text, each scored by its best chunk
        (or by its own row when it has no chunks), best first."""
        found = self._search(query, top_k, min_similarity, filters, per_item=True)
        return [
            ItemHit(item_id=str(seg.item_ids[seg.row_item[row]]), score=score)
            for seg, row, score in found
        ]

    def _search(
        self,
        query: str,
        top_k: int,
        min_similarity: float,
        filters: SearchFilters | None,
        *,
        per_item: bool,
        cap: int | None = None,
    ) -> list[tuple[DenseSegment, int, float]]:
        """The best (segment, row, score) for the query text. The query is embedded
        outside the lock (the embedder may be a slow HTTP call, and the index state is not
        involved), so other threads keep searching meanwhile."""
        self._check_open()
        if top_k <= 0 or not isinstance(query, str) or not query.strip():
            return []
        if self._collection.n_live == 0:
            return []  # no embedding call for an empty index (a racy read: only a shortcut)
        vector = self._embed([query[:MAX_TEXT_CHARS]], "query")[0]
        if not np.any(vector):
            return []
        threshold = float(min_similarity) if min_similarity == min_similarity else 0.0  # NaN
        with self._lock:
            self._check_open()
            return self._collection.search(
                vector, int(top_k), threshold, filters, per_item=per_item, cap=cap
            )

    # -- state ---------------------------------------------------------------------------

    def chunk_count(self) -> int:
        """Live chunk rows."""
        with self._lock:
            self._check_open()
            return self._collection.n_live_chunks

    def item_count(self) -> int:
        """Indexed items (with chunks or not)."""
        with self._lock:
            self._check_open()
            return self._collection.n_items

    def indexed_item_ids(self, *, chunks: bool = False) -> set[str]:
        """The id of every indexed item (``chunks``: of every item with live chunk rows)."""
        with self._lock:
            self._check_open()
            collection = self._collection
            return collection.chunk_item_ids() if chunks else collection.item_ids()

    # -- sharing -------------------------------------------------------------------------

    def _load(self) -> None:
        assert self._store is not None
        held = {seg.name: seg for seg in self._collection.segments if seg.name is not None}
        generation = self._store.load(held)
        collection = DenseCollection(self.dimensions)
        if generation is None:  # a new index: empty until the first update writes it
            self._collection, self._applied_seq, self._next_file = collection, 0, 1
            self._on_disk = None
            return
        for segment in generation.segments:
            collection.add(segment)
        self._collection = collection
        self._applied_seq = generation.applied_seq
        self._next_file = generation.next_file
        self._on_disk = generation.version
        logger.debug(
            "opened dense index %s: %d chunks, %d items",
            self.index_dir,
            collection.n_live_chunks,
            collection.n_items,
        )


def _pairs(
    upserts: Iterable[_Pair] | AnalysedBatch,
) -> list[tuple[KnowledgeItem, list[KnowledgeChunk]]]:
    """One (item, chunks) pair per item id, its last version."""
    if isinstance(upserts, AnalysedBatch):
        return upserts.pairs  # built with latest_pairs already
    return latest_pairs(upserts)
