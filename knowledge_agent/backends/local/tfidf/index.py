"""TF-IDF cosine search over chunks (R4.2), and over whole items for the fallback.

Refitting a ``TfidfVectorizer`` per update is O(corpus). Instead the feature space is fixed
(the columns of ``HashingVectorizer`` over :class:`~knowledge_agent.analysis.TextAnalyzer`
terms: raw counts, no fitting) and document frequencies are counted incrementally, so an
update only vectorises its own rows::

    tf     = 1 + log(count)            (count itself when sublinear_tf is off)
    idf    = log((1 + N) / (1 + df)) + 1   (smooth idf over the N live rows; a vector, cheap)
    score  = Σ_t q_t · tf_dt · idf_t² / (‖d‖ · ‖q‖)   with q_t = tf(query count) · idf_t

This gives exactly the scores of a fresh fit over the same rows. Rows are counted from an
:class:`~knowledge_agent.search.analysed_batch.AnalysedBatch` (the keyword index reads the same
one), each distinct term hashed once (:mod:`~knowledge_agent.search.term_hashing`): a chunk
row is its title (``include_title``), heading path (``include_heading``) and body; an item row
its title and item-level text. Row norms depend on idf, so
they are recomputed lazily (one sparse mat-vec) before the first query after a change. A query
reads only the postings of its own terms (a per-segment CSC copy), then applies the filter
mask and min_similarity *before* the top-k, ties broken by row order.

Storage is log structured. Each :meth:`SemanticSearcher.update` appends one segment per
collection (chunk rows, item rows) and marks replaced rows dead; small segments are merged,
and a segment more than a quarter dead is rewritten without its dead rows. The parts:

* :mod:`~knowledge_agent.backends.local.tfidf.segments` — segments and their postings;
* :mod:`~knowledge_agent.backends.local.tfidf.collection` — a collection: df, idf, norms, merges,
  filter masks, the query itself;
* :mod:`~knowledge_agent.backends.local.tfidf.store` — the directory on disk: segment files and the
  manifest, each written under a temporary name and renamed, so readers in other processes
  see whole generations.

**Sharing.** Opening never writes: a directory without a manifest is an empty index until
the first update creates it. One process writes a directory at a time (the data folder's
write lock); readers call :meth:`SemanticSearcher.refresh`, which notices a newer manifest
(its inode, size and mtime) and loads it, reusing the segments it already holds.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from knowledge_agent.analysis import TextAnalyzer
from knowledge_agent.backends.local.segments.index import SegmentIndex
from knowledge_agent.backends.local.tfidf.collection import Collection
from knowledge_agent.backends.local.tfidf.segments import Segment, build_segment
from knowledge_agent.backends.local.tfidf.store import KINDS, TfidfStore
from knowledge_agent.errors import ConfigError
from knowledge_agent.faults import Faults
from knowledge_agent.models.knowledge_chunk import KnowledgeChunk
from knowledge_agent.models.knowledge_item import KnowledgeItem
from knowledge_agent.search.analysed_batch import AnalysedBatch, gather
from knowledge_agent.search.distinct import distinct_counts
from knowledge_agent.search.filters import SearchFilters
from knowledge_agent.search.hashing import feature_column
from knowledge_agent.search.hits import ChunkHit, ItemHit
from knowledge_agent.search.query_terms import analysed

__all__ = ["Refit", "SemanticSearcher"]

logger = logging.getLogger(__name__)

_FIT_BATCH = 2048  # rows vectorised at once by fit_chunks: bounds the texts held in memory

_Pair = tuple[KnowledgeItem, Sequence[KnowledgeChunk]]


class Refit:
    """A rebuild of a :class:`SemanticSearcher` fed batch by batch, holding its lock until
    :meth:`finish` swaps the new rows in or :meth:`cancel` leaves the old ones."""

    def __init__(self, searcher: SemanticSearcher) -> None:
        searcher._acquire_open()
        self._searcher: SemanticSearcher | None = searcher
        self._started = time.perf_counter()
        # Memory: the old rows stay until the new ones are complete, their query
        # structures (as big again) need not.
        for collection in searcher._collections.values():
            collection.release()
        self._fresh = searcher._empty_collections()

    def add(self, upserts: Sequence[_Pair] | AnalysedBatch) -> None:
        assert self._searcher is not None, "the rebuild is over"
        self._searcher._apply(self._fresh, upserts, ())

    def finish(self) -> int:
        """Make the new rows the index; returns the chunk count."""
        searcher, fresh = self._searcher, self._fresh
        assert searcher is not None, "the rebuild is over"
        try:
            for collection in fresh.values():
                collection.merge_all()
            searcher._collections = fresh  # frees the old rows before the new query structures
            for collection in fresh.values():
                collection.prepare()  # a rebuild is slow anyway: spare the first query
            searcher._applied_seq = 0
            searcher._persist()
        finally:
            self.cancel()
        count = fresh["chunks"].n_live
        logger.info(
            "TF-IDF index rebuilt: %d chunks, %d items in %.1f s",
            count,
            fresh["items"].n_live,
            time.perf_counter() - self._started,
        )
        return count

    def cancel(self) -> None:
        """Leave the index as it was (if :meth:`finish` has not swapped it); idempotent."""
        if self._searcher is not None:
            self._searcher._lock.release()
            self._searcher = None


class SemanticSearcher(SegmentIndex):
    """TF-IDF cosine search over chunk rows and item rows, updated without refitting.

    ``index_dir=None`` keeps everything in memory; otherwise the state lives in that
    directory (created by the first update) and is loaded on open. A directory that cannot
    be read, or was written with another ``n_features``, ``include_title``,
    ``include_heading`` or analyzer configuration, raises :class:`SearchIndexError`:
    rebuild it from SQLite. ``faults`` is a testing hook (:mod:`knowledge_agent.faults`).
    Thread-safe; one process writes a directory at a time, others :meth:`refresh`.
    """

    _label = "TF-IDF index"

    #: more segments than this per collection triggers a merge of the newest ones
    max_segments: int = 16
    #: a segment with more dead rows than this fraction is rewritten without them
    compact_dead_fraction: float = 0.25

    def __init__(
        self,
        index_dir: str | os.PathLike[str] | None = None,
        analyzer: TextAnalyzer | None = None,
        *,
        n_features: int = 2**20,
        sublinear_tf: bool = True,
        include_title: bool = False,
        include_heading: bool = True,
        faults: Faults | None = None,
    ) -> None:
        if isinstance(n_features, bool) or not isinstance(n_features, int):
            raise ConfigError(f"n_features must be an integer, got {n_features!r}")
        if not 1 <= n_features < 2**31:
            raise ConfigError(f"n_features must be between 1 and 2**31 - 1, got {n_features}")
        if analyzer is not None and not isinstance(analyzer, TextAnalyzer):
            raise ConfigError(f"analyzer must be a TextAnalyzer, got {type(analyzer).__name__}")
        self.analyzer = analyzer if analyzer is not None else TextAnalyzer()
        self.n_features = n_features
        self.sublinear_tf = bool(sublinear_tf)
        self.include_title = bool(include_title)
        self.include_heading = bool(include_heading)
        self.index_dir = None if index_dir is None else Path(index_dir)
        self._lock = threading.RLock()
        self._closed = False
        self._applied_seq = 0
        self._next_file = 1
        self._collections = self._empty_collections()
        self._on_disk: tuple[int, int, int] | None = None  # the manifest this state reflects
        self._store = (
            None
            if self.index_dir is None
            else TfidfStore(self.index_dir, self._config(), self.n_features, faults)
        )
        if self._store is not None:
            self._load()

    def _empty_collections(self) -> dict[str, Collection]:
        return {kind: Collection(self.n_features, self.sublinear_tf) for kind in KINDS}

    # -- lifecycle -----------------------------------------------------------------------

    def close(self) -> None:
        """Release the in-memory index; everything is already on disk. Idempotent."""
        with self._lock:
            self._closed = True
            self._collections = self._empty_collections()

    # -- updates -------------------------------------------------------------------------

    def update(
        self, upserts: Sequence[_Pair] | AnalysedBatch = (), deletes: Iterable[str] = ()
    ) -> None:
        """Replace the rows of each upserted item, drop the rows of each deleted item id.

        ``upserts`` may come analysed already (an :class:`AnalysedBatch` of this analyzer's
        configuration). Only the new rows are vectorised. Replaying an update is harmless;
        an id both upserted and deleted in one call ends up deleted. One call is one
        persisted batch.
        """
        with self._lock:
            self._check_open()
            started = time.perf_counter()
            if not self._apply(self._collections, upserts, deletes):
                return
            for collection in self._collections.values():
                collection.maintain(self.max_segments, self.compact_dead_fraction)
            self._persist()
            logger.debug("TF-IDF update applied in %.1f ms", (time.perf_counter() - started) * 1e3)

    def _fit_batch(self) -> int:
        return _FIT_BATCH  # read at call time, so a test can shrink it

    def refit(self) -> Refit:
        """A rebuild fed batch by batch (see :class:`Refit`); :meth:`fit_chunks` in parts."""
        return Refit(self)

    def _apply(
        self,
        collections: dict[str, Collection],
        upserts: Iterable[_Pair] | AnalysedBatch,
        deletes: Iterable[str],
    ) -> bool:
        """Vectorise the new rows, then kill the replaced ones and add the new segments.

        Vectorising first means an exception (a bad chunk, the analyzer) changes nothing.
        Returns whether any row was added or removed.
        """
        batch = self._analysed(upserts)
        gone = [deletes] if isinstance(deletes, str) else list(deletes)
        doomed = set(gone)
        keep = np.array(
            [i for i, (item, _) in enumerate(batch.pairs) if item.id not in doomed], np.int64
        )
        chunk_segment = self._chunk_segment(batch, keep)
        item_segment = self._item_segment(batch, keep)
        changed = item_segment is not None
        kept_ids = [batch.pairs[i][0].id for i in keep.tolist()]
        for kind, segment in (("chunks", chunk_segment), ("items", item_segment)):
            collection = collections[kind]
            changed = collection.kill([*kept_ids, *gone]) > 0 or changed
            if segment is not None:
                collection.add(segment)
        return changed

    def _analysed(self, upserts: Iterable[_Pair] | AnalysedBatch) -> AnalysedBatch:
        if isinstance(upserts, AnalysedBatch) and upserts.matches(self.analyzer):
            return upserts
        pairs = upserts.pairs if isinstance(upserts, AnalysedBatch) else upserts
        return AnalysedBatch.build(self.analyzer, pairs)

    def _chunk_segment(self, batch: AnalysedBatch, keep: np.ndarray) -> Segment | None:
        counts = np.diff(batch.chunk_start)[keep]
        with_chunks = keep[counts > 0]
        chunks = gather(batch.chunk_start[with_chunks], counts[counts > 0])
        if chunks.size == 0:
            return None
        owner = batch.chunk_items()[chunks]
        empty = np.zeros(chunks.size, np.int64)
        title = batch.title[owner] if self.include_title else np.stack([empty, empty], 1)
        heading = batch.heading[chunks] if self.include_heading else np.stack([empty, empty], 1)
        body = batch.body[chunks]
        ids, row = batch.rows([(p[:, 0], p[:, 1]) for p in (title, heading, body)])
        every = [chunk for i in with_chunks.tolist() for chunk in batch.pairs[i][1]]
        row_item = np.repeat(np.arange(with_chunks.size), counts[counts > 0])
        return build_segment(
            self._vectorize(batch, ids, row, chunks.size),
            [chunk.id for chunk in every],
            [chunk.chunk_index for chunk in every],
            row_item.tolist(),
            [batch.pairs[i][0] for i in with_chunks.tolist()],
        )

    def _item_segment(self, batch: AnalysedBatch, keep: np.ndarray) -> Segment | None:
        if keep.size == 0:
            return None
        items = [batch.pairs[i][0] for i in keep.tolist()]
        ids, row = batch.item_rows(keep)
        return build_segment(
            self._vectorize(batch, ids, row, keep.size),
            [item.id for item in items],
            [0] * len(items),
            list(range(len(items))),
            items,
        )

    def _vectorize(
        self, batch: AnalysedBatch, ids: np.ndarray, rows: np.ndarray, n_rows: int
    ) -> sp.csr_matrix:
        """Raw term counts per row over hashed columns (``HashingVectorizer``'s matrix) of
        the term ids ``ids`` of ``batch``, term ``i`` in row ``rows[i]``."""
        columns = batch.feature_columns(self.n_features)[ids].astype(np.int64)
        keys, counts = distinct_counts(rows * self.n_features + columns)
        row, column = np.divmod(keys, self.n_features)
        indptr = np.zeros(n_rows + 1, np.int64)
        np.cumsum(np.bincount(row, minlength=n_rows), out=indptr[1:])
        return sp.csr_matrix(
            (counts.astype(np.float32), column.astype(np.int32), indptr),
            shape=(n_rows, self.n_features),
        )

    # -- queries -------------------------------------------------------------------------

    def search_chunks(
        self,
        terms: Sequence[str],
        top_k: int,
        min_similarity: float = 0.0,
        filters: SearchFilters | None = None,
        *,
        per_item: int | None = None,
    ) -> list[ChunkHit]:
        """The ``top_k`` chunks most similar to the analysed query ``terms`` (or the query
        text, analysed here as the engine does), best first; at most ``per_item`` of one
        item when it is given."""
        with self._lock:
            self._check_open()
            found = self._search("chunks", terms, top_k, min_similarity, filters, per_item)
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
        terms: Sequence[str],
        top_k: int,
        min_similarity: float = 0.0,
        filters: SearchFilters | None = None,
    ) -> list[ItemHit]:
        """The ``top_k`` whole items (title + content) most similar to ``terms``."""
        with self._lock:
            self._check_open()
            found = self._search("items", terms, top_k, min_similarity, filters)
            return [ItemHit(item_id=str(seg.keys[row]), score=score) for seg, row, score in found]

    def _search(
        self,
        kind: str,
        terms: Sequence[str],
        top_k: int,
        min_similarity: float,
        filters: SearchFilters | None,
        per_item: int | None = None,
    ) -> list[tuple[Segment, int, float]]:
        if top_k <= 0:
            return []
        if terms is None:
            return []
        terms = analysed(terms, self.analyzer)  # query text is analysed as the engine does
        clean = [term for term in terms if isinstance(term, str) and term]
        if not clean:
            return []
        # The same columns as the indexing vectorizer, without importing it (hashing.py).
        frequency = Counter(feature_column(term, self.n_features) for term in clean)
        cols = np.array(sorted(frequency), dtype=np.int64)
        counts = np.array([frequency[col] for col in cols], dtype=np.float64)
        threshold = float(min_similarity) if min_similarity == min_similarity else 0.0  # NaN
        return self._collections[kind].search(
            cols, counts, int(top_k), threshold, filters, per_item
        )

    # -- state ---------------------------------------------------------------------------

    def chunk_count(self) -> int:
        """Live chunk rows."""
        with self._lock:
            self._check_open()
            return self._collections["chunks"].n_live

    def item_count(self) -> int:
        """Live item rows."""
        with self._lock:
            self._check_open()
            return self._collections["items"].n_live

    def indexed_item_ids(self, *, chunks: bool = False) -> set[str]:
        """The id of every item with a live item row (``chunks``: with live chunk rows)."""
        with self._lock:
            self._check_open()
            return self._collections["chunks" if chunks else "items"].item_ids()

    # -- persistence ---------------------------------------------------------------------

    def _config(self) -> dict[str, Any]:
        return {
            "n_features": self.n_features,
            "sublinear_tf": self.sublinear_tf,
            "include_title": self.include_title,
            "include_heading": self.include_heading,
            "analyzer": self.analyzer.config.to_dict(),
        }

    def _persist(self) -> None:
        """Write what changed as a new generation (a no-op in memory)."""
        if self._store is None:
            return
        segments = {kind: c.segments for kind, c in self._collections.items()}
        self._next_file, self._on_disk = self._store.save(
            segments, self._applied_seq, self._next_file
        )

    def _load(self) -> None:
        assert self._store is not None
        held = {
            seg.name: seg
            for collection in self._collections.values()
            for seg in collection.segments
            if seg.name is not None
        }
        generation = self._store.load(held)
        collections = self._empty_collections()
        if generation is None:  # a new index: empty until the first update writes it
            self._collections, self._applied_seq, self._next_file = collections, 0, 1
            self._on_disk = None
            return
        for kind, segments in generation.segments.items():
            for segment in segments:
                collections[kind].add(segment)
        self._collections = collections
        self._applied_seq = generation.applied_seq
        self._next_file = generation.next_file
        self._on_disk = generation.version
        logger.debug(
            "opened TF-IDF index %s: %d chunks, %d items",
            self.index_dir,
            collections["chunks"].n_live,
            collections["items"].n_live,
        )
