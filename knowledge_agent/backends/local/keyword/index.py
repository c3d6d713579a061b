"""SearchIndexManager: the Whoosh BM25F keyword index over chunks and over whole items (R4.1).

Two Whoosh indexes, both derived from SQLite and rebuildable from it at any time:

* the **chunk index** (``{index_dir}/chunks/``), one document per chunk — the first stage
  of every search;
* the **item index** (``{index_dir}/items/``), one document per item — the fallback when the
  chunk index is empty or unavailable (R6.4).

``index_dir=None`` keeps both in memory. ``{index_dir}/state.json`` records the journal
sequence number the indexes reflect (:attr:`SearchIndexManager.applied_seq`); the SQLite
journal replays later entries.

**Sharing.** One process writes at a time (the data folder's write lock, taken by the
caller); any number read. Opening never writes: an index directory that holds no index yet
is *absent* and answers as empty (an in-memory stand-in) until a writer creates it. A Whoosh
commit is a new generation (TOC file written under a temporary name and renamed); searchers
notice it on their next query, and :meth:`SearchIndexManager.refresh` picks up a newly
created index and a newer ``state.json``.

Decisions (see also the module's tests):

* **Queries are lists of analysed terms**, built into ``Term`` queries directly; no query
  parser ever sees user text, so no input can raise. A term repeated in the query becomes one
  ``Term`` per field whose boost is multiplied by the repeat count, which scores exactly like
  repeating it (BM25 query-term frequency) with fewer matchers.
* **Scoring** is Whoosh's ``BM25F(B=0.75, K1=1.2)`` with Lucene's idf (:class:`LuceneBM25F`),
  computed over whole posting blocks with numpy
  (:mod:`~knowledge_agent.backends.local.keyword.bm25_scan`) rather than by Whoosh's
  per-posting matchers: same scores, several times faster.
  A chunk's ``content`` field holds its heading path twice, the title and the body
  (:func:`~knowledge_agent.search.documents.chunk_search_text`), so a heading match outranks a
  body-only match the BM25F way: weighted term frequency in one field. The separate
  ``heading`` (and, for items, ``title``) fields have query boost 0 by default; boosts are
  applied at query time, so changing them needs no reindexing.
* **Ties** are broken by docnum, i.e. by index order: the same documents indexed by the same
  sequence of updates give the same order every run (ids are random, so they cannot decide).
* **Filters** become a mask of allowed docnums
  (:mod:`~knowledge_agent.backends.local.keyword.filters`), cached until the index changes.
* **No positions**: text fields are indexed with ``phrase=False`` (frequencies only). Every
  query here is a bag of terms; positions would cost index size and indexing time for
  nothing. Phrase search would need a schema change and a rebuild.
* **Searchers** are long-lived (one per index) and reopened only when a commit, here or in
  another process, changed the index generation; not through ``Searcher.refresh()``, which is
  broken in whoosh-reloaded 2.7.5 (see :meth:`SearchIndexManager._searcher`). One
  :meth:`SearchIndexManager.update` is one writer and one commit per index; Whoosh's own
  write lock (``lock_timeout``) is uncontended under the data folder's lock.
* **Writes in bulk**: an update's items are analysed once
  (:class:`~knowledge_agent.search.analysed_batch.AnalysedBatch`, shared with the TF-IDF
  index when the engine passes it on) and each index's new segment is written from arrays
  by :class:`~knowledge_agent.backends.local.keyword.bulk.BulkSegmentWriter`, merges included. The
  item index's ``content`` is derived from the chunks' terms, not analysed again. On a
  Whoosh version the fast paths were not tested with, Whoosh's own writer is used.
* **Nothing stored but keys**: SQLite holds the text. Opening an index that is corrupt,
  holds a pickle of anything but the schema's own classes
  (:mod:`~knowledge_agent.backends.local.keyword.safe`), or whose schema or analyzer differs
  from this code's, raises :class:`SearchIndexError`: a writer deletes the directory and rebuilds it
  from SQLite. So does a ``state.json`` that fails to load.
* **The previous release's index** (a plain ``state.json``, generations without sums:
  :mod:`~knowledge_agent.backends.local.keyword.state`) is read as that release read it, and
  :meth:`SearchIndexManager.upgrade` records its sums in place.
* **Damage is found**: every generation records its files' checksums
  (:mod:`~knowledge_agent.backends.local.keyword.sums`). Opening checks the TOC's checksum and every
  file's size; :meth:`SearchIndexManager.verify` (``check``) every checksum; and a read that
  fails (a posting block that does not decompress) has the index verified, raising
  :class:`DamagedIndexError` when a file is damaged.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import threading
from collections import Counter, OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np
from whoosh import fields as wf
from whoosh.filedb.filestore import Storage
from whoosh.index import FileIndex, LockError
from whoosh.searching import Searcher
from whoosh.writing import SegmentWriter

from knowledge_agent.analysis import TextAnalyzer
from knowledge_agent.backends.local.atomic_files import file_version
from knowledge_agent.backends.local.checksums import Damage
from knowledge_agent.backends.local.keyword.batch import BatchWriter, cancel, delete_terms
from knowledge_agent.backends.local.keyword.blocks import chunk_block, item_block
from knowledge_agent.backends.local.keyword.bm25_scan import Clause, ScanCache, scored_docs
from knowledge_agent.backends.local.keyword.bulk import BulkSegmentWriter, write_together
from knowledge_agent.backends.local.keyword.filters import filter_mask
from knowledge_agent.backends.local.keyword.groups import ItemGroups
from knowledge_agent.backends.local.keyword.internals import bulk_writing, compact_posting_pool
from knowledge_agent.backends.local.keyword.merge import may_merge, merge_policy
from knowledge_agent.backends.local.keyword.parts import Codec, PostingTable
from knowledge_agent.backends.local.keyword.safe import (
    SafeFileStorage,
    open_file_index,
    seal_legacy_generation,
    stored_schema,
)
from knowledge_agent.backends.local.keyword.schema import (
    DEFAULT_FIELD_BOOSTS,
    LuceneBM25F,
    chunk_documents,
    chunk_schema,
    item_document,
    item_schema,
    schema_signature,
)
from knowledge_agent.backends.local.keyword.state import STATE_FILE, read_state, write_state
from knowledge_agent.backends.local.keyword.storage import (
    WHOOSH_INDEX_NAME,
    PrivateRamStorage,
    has_toc,
)
from knowledge_agent.backends.local.keyword.sums import verify_index
from knowledge_agent.errors import ConfigError, DamagedIndexError, QueryError, SearchIndexError
from knowledge_agent.models.knowledge_chunk import KnowledgeChunk
from knowledge_agent.models.knowledge_item import KnowledgeItem
from knowledge_agent.search.analysed_batch import AnalysedBatch, grouped, latest_pairs
from knowledge_agent.search.filters import SearchFilters
from knowledge_agent.search.hits import ChunkHit, ItemHit
from knowledge_agent.search.query_terms import analysed, term_weights
from knowledge_agent.search.topk import best_rows, capped_best_rows

__all__ = ["DEFAULT_FIELD_BOOSTS", "LuceneBM25F", "SearchIndexManager", "verify_keyword_folder"]

logger = logging.getLogger(__name__)

_LOCK_RETRY_DELAY = 0.05  # seconds between attempts to take a held write lock
_FILTER_CACHE_SIZE = 16  # distinct SearchFilters remembered per searcher generation

Pair = tuple[KnowledgeItem, Sequence[KnowledgeChunk]]


@dataclass(eq=False)
class _Work:
    """The items of one write, analysed when a bulk writer first needs them (once for both
    indexes)."""

    pairs: list[tuple[KnowledgeItem, list[KnowledgeChunk]]]
    analyzer: TextAnalyzer
    batch: AnalysedBatch | None = None

    @classmethod
    def of(cls, upserts: Iterable[Pair] | AnalysedBatch, analyzer: TextAnalyzer) -> _Work:
        if isinstance(upserts, AnalysedBatch):
            return cls(upserts.pairs, analyzer, upserts)
        return cls(latest_pairs(upserts), analyzer)

    @classmethod
    def groups(
        cls, pairs: Iterable[Pair | AnalysedBatch], analyzer: TextAnalyzer, size: int
    ) -> Iterator[_Work]:
        """``pairs`` in groups of up to ``size`` chunks or items, pulled lazily."""
        for group in grouped(pairs, size):
            yield cls.of(group, analyzer)

    def analysed(self) -> AnalysedBatch:
        if self.batch is None or not self.batch.matches(self.analyzer):
            self.batch = AnalysedBatch.build(self.analyzer, self.pairs)
        return self.batch


# --------------------------------------------------------------------------- one index


@dataclass(eq=False)
class _Index:
    """One Whoosh index and what the manager keeps open on it."""

    name: str
    schema: wf.Schema
    text_fields: tuple[str, ...]
    location: str  # for messages: a directory or "memory"
    path: Path | None
    storage: Storage | None = None
    ix: FileIndex | None = None
    absent: bool = False  # no index on disk yet: ix is an empty in-memory stand-in
    searcher: Searcher | None = None
    filter_cache: OrderedDict[SearchFilters, np.ndarray] = field(default_factory=OrderedDict)
    scan_cache: ScanCache = field(default_factory=ScanCache)
    item_groups: ItemGroups = field(default_factory=ItemGroups)  # kept across searchers

    def close_searcher(self) -> None:
        if self.searcher is not None:
            with contextlib.suppress(Exception):  # closing must never mask the real error
                self.searcher.close()
            self.searcher = None
        self.filter_cache.clear()
        self.scan_cache.clear()


# --------------------------------------------------------------------------- the manager


class SearchIndexManager:
    """The keyword (BM25F) indexes over chunks and items; safe to share between threads.

    One :meth:`update` call opens one writer per index and commits once, which is how bulk
    ingestion stays fast. Every Whoosh or OS error surfaces as :class:`SearchIndexError`.
    """

    #: Documents per commit during :meth:`rebuild` (bounded memory, visible progress).
    rebuild_commit_every: int = 5_000

    def __init__(
        self,
        index_dir: str | os.PathLike[str] | None = None,
        analyzer: TextAnalyzer | None = None,
        *,
        field_boosts: Mapping[str, float] | None = None,
        lock_timeout: float = 10.0,
    ) -> None:
        self.analyzer = analyzer if analyzer is not None else TextAnalyzer()
        boosts = dict(DEFAULT_FIELD_BOOSTS)
        if field_boosts:
            unknown = set(field_boosts) - set(DEFAULT_FIELD_BOOSTS)
            if unknown:
                raise ConfigError(f"field_boosts: unknown fields {sorted(unknown)}")
            boosts.update({name: float(value) for name, value in field_boosts.items()})
        if any(value < 0 for value in boosts.values()):
            raise ConfigError(f"field_boosts must not be negative, got {boosts}")
        if lock_timeout < 0:
            raise ConfigError(f"lock_timeout must be >= 0, got {lock_timeout!r}")
        self.field_boosts: dict[str, float] = boosts
        self.lock_timeout = float(lock_timeout)
        self.index_dir = None if index_dir is None else Path(index_dir)
        self._lock = threading.RLock()
        self._closed = False
        self._weighting = LuceneBM25F(B=0.75, K1=1.2)
        self._applied_seq = 0
        self._state_seen: tuple[int, int, int] | None = None  # state.json last read
        self._legacy = False  # state.json is the previous release's: sums may be missing

        self._chunks = self._new_index("chunks", chunk_schema(self.analyzer))
        self._items = self._new_index("items", item_schema(self.analyzer))
        if self.index_dir is not None:
            self._applied_seq = self._read_state()
        try:
            for idx in (self._chunks, self._items):
                self._open(idx)
        except BaseException:
            self.close()
            raise

    def _new_index(self, name: str, schema: wf.Schema) -> _Index:
        text_fields = tuple(f for f in ("title", "heading", "content") if f in schema.names())
        if self.index_dir is None:
            return _Index(name, schema, text_fields, location="memory", path=None)
        path = self.index_dir / name
        return _Index(name, schema, text_fields, location=str(path), path=path)

    # -- opening -----------------------------------------------------------------------------

    def _open(self, idx: _Index, *, create: bool = False, recreate: bool = False) -> None:
        """Open one index as it is on disk; never writes unless asked to.

        A directory holding no index leaves the index *absent* (an empty stand-in) unless
        ``create``; ``recreate`` deletes the directory and creates the index afresh. An index
        that cannot be read (corrupt TOC or segments) or was built with another schema or
        analyzer configuration raises :class:`SearchIndexError` naming its directory: a
        writer deletes it and rebuilds from SQLite.
        """
        idx.close_searcher()
        idx.ix = None
        idx.absent = False
        try:
            if isinstance(idx.storage, PrivateRamStorage):
                idx.storage.remove_tempdir()
            if idx.path is None:
                if recreate or idx.storage is None:
                    idx.storage = PrivateRamStorage()
            else:
                if recreate and idx.path.exists():
                    shutil.rmtree(idx.path)
                if not (create or recreate) and not has_toc(idx.path):
                    self._stand_in(idx)
                    return
                idx.path.mkdir(parents=True, exist_ok=True)
                idx.storage = SafeFileStorage(str(idx.path), legacy=self._legacy)
            storage = idx.storage
            # Whoosh's index_exists() would unpickle the TOC; a file listing is enough here
            # and leaves a corrupt TOC to the guarded open below.
            if idx.path is None or not has_toc(idx.path):
                idx.ix = storage.create_index(idx.schema)
                logger.debug("created the %s index in %s", idx.name, idx.location)
                return
        except Exception as exc:  # OSError, or whoosh's assorted errors on odd storage
            if idx.path is not None:
                self._stand_in(idx)  # answers as empty; the next write tries again
            raise SearchIndexError(
                f"cannot create the {idx.name} index in {idx.location}: {exc}"
            ) from exc
        try:
            compatible = schema_signature(stored_schema(storage)) == schema_signature(idx.schema)
            # Our own schema object: its analyzer (and its term cache) is shared by every
            # writer instead of being unpickled afresh from the TOC for each one.
            ix = open_file_index(storage, idx.schema) if compatible else None
        except DamagedIndexError as exc:
            raise DamagedIndexError(
                f"the {idx.name} index in {idx.location} is damaged: {exc}"
            ) from exc
        except Exception as exc:  # corrupt TOC, unpickling error, unreadable files, …
            raise SearchIndexError(
                f"the {idx.name} index in {idx.location} cannot be opened "
                f"({type(exc).__name__}: {exc}); delete it and rebuild"
            ) from exc
        if ix is None:
            raise SearchIndexError(
                f"the {idx.name} index in {idx.location} was built with another schema or "
                "analyzer configuration; delete it and rebuild"
            )
        idx.ix = ix
        self._searcher(idx)  # reads every segment now: a broken one fails here, not later

    @staticmethod
    def _stand_in(idx: _Index) -> None:
        """An empty in-memory index in place of one not (or no longer) on disk."""
        idx.close_searcher()
        if isinstance(idx.storage, PrivateRamStorage):
            idx.storage.remove_tempdir()
        idx.storage = PrivateRamStorage()
        idx.ix = idx.storage.create_index(idx.schema)
        idx.absent = True

    def refresh(self) -> bool:
        """Pick up what a writer in another process committed since the last look: an index
        it created and a newer ``state.json``. True when anything changed. (Queries pick up
        new Whoosh generations and created indexes on their own.)"""
        with self._lock:
            if self._closed:
                raise SearchIndexError("the search index manager is closed")
            if self.index_dir is None:
                return False
            changed = False
            for idx in (self._chunks, self._items):
                if idx.absent and idx.path is not None and has_toc(idx.path):
                    self._open(idx)
                    changed = True
            if file_version(self.index_dir / STATE_FILE) != self._state_seen:
                self._applied_seq = self._read_state()
                changed = True
            return changed

    def _usable(self, idx: _Index) -> FileIndex:
        if self._closed or idx.ix is None:
            raise SearchIndexError("the search index manager is closed")
        return idx.ix

    def _searcher(self, idx: _Index) -> Searcher:
        """The index's long-lived searcher, reopened when any writer (here or in another
        process) has committed since it was opened.

        Not ``Searcher.refresh()``: in whoosh-reloaded 2.7.5 it reuses readers by segment id
        and re-adds the old reader's segments (whoosh PR #520), so after a merge it returns
        merged-away documents twice and after a delete it keeps the deleted ones.
        """
        if idx.absent and idx.path is not None and has_toc(idx.path):
            self._open(idx)  # created by a writer since: a cheap listing while absent
        ix = self._usable(idx)
        try:
            if idx.searcher is not None and not idx.searcher.up_to_date():
                idx.close_searcher()
            if idx.searcher is None:
                idx.searcher = ix.searcher(weighting=self._weighting)
            return idx.searcher
        except Exception as exc:
            idx.close_searcher()
            raise self._failure(idx, exc, "cannot read") from exc

    def _writer(self, idx: _Index) -> SegmentWriter:
        if idx.absent:
            self._open(idx, create=True)  # the first write creates the index on disk
        ix = self._usable(idx)
        try:
            if bulk_writing():
                return BulkSegmentWriter(
                    ix, codec=Codec(), timeout=self.lock_timeout, delay=_LOCK_RETRY_DELAY
                )
            writer = ix.writer(timeout=self.lock_timeout, delay=_LOCK_RETRY_DELAY, codec=Codec())
            if compact_posting_pool():
                writer.pool = PostingTable()
            return writer
        except LockError as exc:
            raise SearchIndexError(
                f"timed out after {self.lock_timeout:g} s waiting for the write lock of the "
                f"{idx.name} index in {idx.location}"
            ) from exc
        except Exception as exc:
            raise self._failure(idx, exc, "cannot open a writer on") from exc

    # -- writing -----------------------------------------------------------------------------

    def update(
        self, upserts: Sequence[Pair] | AnalysedBatch = (), deletes: Iterable[str] = ()
    ) -> None:
        """Replace the documents of every upserted item and remove those of every deleted id.

        One writer per index, one commit. Deletes apply first, so an id both deleted and
        upserted ends up upserted; an item upserted twice keeps its last version. Replaying
        the same call is harmless. ``upserts`` may come analysed already (an
        :class:`AnalysedBatch`; one of another analyzer configuration is analysed again).
        """
        work = _Work.of(upserts, self.analyzer)
        latest = {item.id for item, _ in work.pairs}
        doomed = {item_id for item_id in deletes if item_id not in latest}
        if not latest and not doomed:
            return
        with self._lock:
            for idx in (self._chunks, self._items):
                self._usable(idx)
            self._write(work, [*doomed, *latest])

    def _write(self, work: _Work, replaced: Sequence[str]) -> None:
        """Both indexes' writers, then their commits: a small update's two segments are
        written in one pass before the commits (:func:`write_together`), the chunk index
        committed first."""
        writers: list[tuple[_Index, SegmentWriter]] = []
        added: dict[str, int] = {}
        idx = self._chunks
        try:
            for idx in (self._chunks, self._items):
                writer = self._writer(idx)
                writers.append((idx, writer))
                delete_terms(writer, "item_id", replaced)
                added[idx.name] = self._add(idx, writer, work)
            bulk = [writer for _, writer in writers if isinstance(writer, BulkSegmentWriter)]
            if len(bulk) == len(writers) and not any(may_merge(w.segments) for w in bulk):
                write_together(bulk)
            while writers:
                idx, writer = writers[0]
                writer.commit(mergetype=merge_policy(added[idx.name]))
                writers.pop(0)
        except SearchIndexError:
            for _, writer in writers:
                cancel(writer)
            raise
        except Exception as exc:
            for _, writer in writers:
                cancel(writer)
            raise self._failure(idx, exc, "cannot write to") from exc

    def _add(self, idx: _Index, writer: SegmentWriter, work: _Work) -> int:
        """Add the documents of ``work``'s items to ``writer``; returns how many were added."""
        if isinstance(writer, BulkSegmentWriter):
            batch = work.analysed()
            block = item_block(batch) if idx is self._items else chunk_block(batch)
            writer.add_block(block)
            return block.count
        added = 0
        for item, chunks in work.pairs:
            documents = (
                [item_document(item)] if idx is self._items else chunk_documents(item, chunks)
            )
            for document in documents:
                writer.add_document(**document)
            added += len(documents)
        return added

    def _batch_writer(self, idx: _Index, every: int) -> BatchWriter[_Work]:
        return BatchWriter(
            lambda: self._writer(idx),
            lambda writer, work: self._add(idx, writer, work),
            every,
            f"the {idx.name} index in {idx.location}",
        )

    def add_chunks(self, item: KnowledgeItem, chunks: Sequence[KnowledgeChunk]) -> None:
        """Index one item and its chunks, replacing whatever was indexed for it before."""
        self.update(upserts=[(item, chunks)])

    def remove_chunks_for_item(self, item_id: str) -> None:
        """Remove an item's chunk and item documents (nothing happens if there are none)."""
        self.update(deletes=[item_id])

    def rebuild(self, pairs: Iterable[Pair | AnalysedBatch]) -> int:
        """Drop both indexes and index every (item, chunks) pair; returns the chunk count.

        ``pairs`` (which may hold analysed batches) is consumed lazily, a batch of up to
        :attr:`rebuild_commit_every` chunks or items at a time, each index committing once
        that many of its documents are pending; readers see the old content until the first
        commit. An index that has become
        unreadable since it was opened is deleted and created afresh first. If ``pairs`` or
        a write fails, the error propagates (``pairs``' own exceptions unchanged) and the
        index may hold part of the rebuild: rebuild again.
        """
        with self._lock:
            if self._closed:
                raise SearchIndexError("the search index manager is closed")
            for idx in (self._chunks, self._items):
                try:
                    self._searcher(idx)  # proves the index and its segments can be read
                    if idx.absent:
                        self._open(idx, create=True)
                except SearchIndexError:
                    self._open(idx, recreate=True)
            every = max(1, int(self.rebuild_commit_every))
            chunks = self._batch_writer(self._chunks, every)
            try:
                items = self._batch_writer(self._items, every)
            except BaseException:
                chunks.cancel()
                raise
            total = 0
            try:
                for work in _Work.groups(pairs, self.analyzer, every):
                    total += chunks.add(work)
                    items.add(work)
                chunks.finish()
                items.finish()
            except BaseException:
                chunks.cancel()
                items.cancel()
                raise
        logger.info("rebuilt the keyword indexes: %d chunks", total)
        return total

    def rebuild_chunk_index(self, pairs: Iterable[Pair | AnalysedBatch]) -> int:
        """Alias of :meth:`rebuild` under the requirement's name."""
        return self.rebuild(pairs)

    # -- state -------------------------------------------------------------------------------

    @property
    def applied_seq(self) -> int:
        """The journal sequence number the indexes reflect (0 for a new index)."""
        with self._lock:
            return self._applied_seq

    def set_applied_seq(self, seq: int) -> None:
        """Record that the indexes reflect the journal up to ``seq`` (persisted atomically)."""
        if isinstance(seq, bool) or not isinstance(seq, int) or seq < 0:
            raise ConfigError(f"applied_seq must be an integer >= 0, got {seq!r}")
        with self._lock:
            if self._closed:
                raise SearchIndexError("the search index manager is closed")
            if self.index_dir is not None:
                self._write_state(seq)
            self._applied_seq = seq

    def _read_state(self) -> int:
        """The journal position in ``state.json`` (0 when there is none); a state file that
        fails to load, for whatever reason, makes the index unreadable
        (:class:`DamagedIndexError`): it is rebuilt."""
        assert self.index_dir is not None
        path = self.index_dir / STATE_FILE
        self._state_seen = file_version(path)
        try:
            state = read_state(path)
        except FileNotFoundError:
            self._set_legacy(False)
            return 0
        except Exception as exc:  # OSError, a bad checksum or JSON, nesting, wrong types
            raise DamagedIndexError(f"the keyword index state {path} is damaged: {exc}") from exc
        self._set_legacy(state.legacy)
        return state.applied_seq

    def _write_state(self, seq: int) -> None:
        """Write ``state.json``; an index of the previous release has its generations'
        sums recorded first, as a sealed state file says every generation has them."""
        assert self.index_dir is not None
        if self._legacy:
            self._seal_legacy_generations()
        path = self.index_dir / STATE_FILE
        try:
            self.index_dir.mkdir(parents=True, exist_ok=True)
            write_state(path, seq)
            self._state_seen = file_version(path)
        except OSError as exc:
            raise SearchIndexError(f"cannot write {path}: {exc}") from exc
        self._set_legacy(False)

    def _set_legacy(self, legacy: bool) -> None:
        self._legacy = legacy
        for idx in (self._chunks, self._items):
            if isinstance(idx.storage, SafeFileStorage):
                idx.storage.legacy = legacy

    # -- upgrading ---------------------------------------------------------------------------

    @property
    def legacy(self) -> bool:
        """Whether the index on disk is the previous release's (its state file is plain
        JSON, and its generations may have no sums), as opened."""
        with self._lock:
            return self._legacy

    def upgrade(self) -> bool:
        """Record the sums of each generation of the previous release opened here, then
        seal the state file: the index files themselves are not touched. False when the
        index is not the previous release's. Only the writer (holding the data folder's
        lock) calls this."""
        with self._lock:
            if self._closed:
                raise SearchIndexError("the search index manager is closed")
            if not self._legacy:
                return False
            self._write_state(self._applied_seq)
            return True

    def _seal_legacy_generations(self) -> None:
        for idx in (self._chunks, self._items):
            if idx.absent or not isinstance(idx.storage, SafeFileStorage):
                continue  # no index on disk (or none opened from it: not vouched for)
            try:
                seal_legacy_generation(idx.storage)
            except Exception as exc:  # OSError; a TOC that fails to parse now: damage
                raise self._failure(idx, exc, "cannot upgrade") from exc

    # -- damage ------------------------------------------------------------------------------

    def verify(self, *, full: bool = True) -> list[Damage]:
        """The damaged files of both indexes and of ``state.json`` as they are on disk now:
        every file's size, and with ``full`` its checksum (none for indexes in memory)."""
        return [] if self.index_dir is None else verify_keyword_folder(self.index_dir, full=full)

    def _failure(self, idx: _Index, exc: Exception, doing: str) -> SearchIndexError:
        """The error for ``exc``, raised while reading or writing ``idx``: a
        :class:`DamagedIndexError` when a file of the index is damaged — every checksum is
        verified now, as a failed read is rare — else a :class:`SearchIndexError`."""
        where = f"the {idx.name} index in {idx.location}"
        if isinstance(exc, DamagedIndexError):
            return DamagedIndexError(f"{where} is damaged: {exc}")
        damage = (
            []
            if idx.path is None
            else verify_index(idx.path, WHOOSH_INDEX_NAME, legacy=self._legacy)
        )
        if damage:
            return DamagedIndexError(
                f"{where} is damaged: {damage[0]} ({type(exc).__name__}: {exc})"
            )
        return SearchIndexError(f"{doing} {where}: {exc}")

    # -- reading -----------------------------------------------------------------------------

    def search_chunks(
        self,
        terms: Sequence[str] | Mapping[str, float],
        limit: int,
        filters: SearchFilters | None = None,
        *,
        per_item: int | None = None,
    ) -> list[ChunkHit]:
        """The best ``limit`` chunks for analysed ``terms`` (or term → weight) among those
        ``filters`` allow; at most ``per_item`` of one item when it is given."""
        return [
            ChunkHit(
                chunk_id=str(fields_["chunk_id"]),
                item_id=str(fields_["item_id"]),
                chunk_index=int(fields_["chunk_index"]),
                score=float(score),
            )
            for score, fields_ in self._search(self._chunks, terms, limit, filters, per_item)
        ]

    def idf(self, terms: Iterable[str], *, items: bool = False) -> dict[str, float]:
        """The BM25 idf of each term over the chunks' (or items') text. A term no text has
        gets the idf of frequency zero, the highest: a query word the base does not know
        counts against a match instead of vanishing."""
        with self._lock:
            idx = self._items if items else self._chunks
            searcher = self._searcher(idx)
            field = searcher.schema["content"]
            found: dict[str, float] = {}
            for term in terms:
                if term not in found:
                    try:
                        btext = field.to_bytes(term)
                    except ValueError:  # a lone surrogate: no text has it
                        btext = b""
                    try:
                        found[term] = idx.scan_cache.idf(searcher, "content", btext)
                    except Exception as exc:
                        raise self._failure(idx, exc, "cannot read") from exc
            return found

    def unseen(self, terms: Iterable[str], *, items: bool = False) -> set[str]:
        """The terms no chunk (or item) holds in any of its text fields: words the base has
        never seen, which say a query is about something else."""
        with self._lock:
            idx = self._items if items else self._chunks
            searcher = self._searcher(idx)
            found: set[str] = set()
            for term in set(terms):
                try:
                    seen = any(  # the body first: nearly every known word is there
                        idx.scan_cache.doc_frequency(
                            searcher, name, searcher.schema[name].to_bytes(term)
                        )
                        for name in sorted(idx.text_fields, key=lambda name: name != "content")
                    )
                except ValueError:  # a lone surrogate: no text has it
                    seen = False
                except Exception as exc:
                    raise self._failure(idx, exc, "cannot read") from exc
                if not seen:
                    found.add(term)
            return found

    def best_possible_score(self, terms: Sequence[str], idf: Mapping[str, float]) -> float:
        """The BM25 a text would score if it held every term as often as counts can help:
        the yardstick that makes a score comparable across queries."""
        saturated = self._weighting.K1 + 1
        boost = self.field_boosts["content"]
        return sum(count * idf.get(term, 0.0) for term, count in term_weights(terms).items()) * (
            saturated * boost
        )

    def search_items(
        self, terms: Sequence[str], limit: int, filters: SearchFilters | None = None
    ) -> list[ItemHit]:
        """The best ``limit`` items (whole-document BM25F) for analysed ``terms``."""
        return [
            ItemHit(item_id=str(fields_["item_id"]), score=float(score))
            for score, fields_ in self._search(self._items, terms, limit, filters)
        ]

    def _search(
        self,
        idx: _Index,
        terms: Sequence[str] | Mapping[str, float],
        limit: int,
        filters: SearchFilters | None,
        per_item: int | None = None,
    ) -> list[tuple[float, dict[str, Any]]]:
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise QueryError(f"limit must be an integer, got {limit!r}")
        weights = term_weights(analysed(terms, self.analyzer))
        if filters is not None and not isinstance(filters, SearchFilters):
            raise QueryError(f"filters must be SearchFilters, got {type(filters).__name__}")
        if not weights or limit < 1:
            return []
        with self._lock:
            searcher = self._searcher(idx)
            try:
                if searcher.doc_count() == 0:
                    return []
                allow = self._allowed(idx, searcher, filters)
                if allow is not None and not allow.any():
                    return []
                clauses = [
                    Clause(name, term, self.field_boosts[name] * count)
                    for term, count in weights.items()
                    for name in idx.text_fields
                    if self.field_boosts[name] > 0
                ]
                rows, scores = scored_docs(searcher, idx.scan_cache, clauses, allow)
                top, top_scores = best_rows(rows, scores, limit)
                cache = idx.scan_cache
                stored = {docnum: cache.stored(searcher, docnum) for docnum in top.tolist()}
                if per_item is not None and _over_cap(stored.values(), per_item):
                    groups = idx.item_groups.of(searcher)[rows]
                    top, top_scores = capped_best_rows(rows, scores, groups, limit, per_item)
                found = [
                    stored[docnum] if docnum in stored else cache.stored(searcher, docnum)
                    for docnum in top.tolist()
                ]
                return list(zip(top_scores.tolist(), found, strict=True))
            except SearchIndexError:
                raise
            except Exception as exc:
                raise self._failure(idx, exc, "cannot search") from exc

    # -- filters -----------------------------------------------------------------------------

    def _allowed(
        self, idx: _Index, searcher: Searcher, filters: SearchFilters | None
    ) -> np.ndarray | None:
        """A mask of the docnums ``filters`` allow (None: everything), cached per searcher."""
        if filters is None or filters.is_empty():
            return None
        cache = idx.filter_cache
        if filters in cache:
            cache.move_to_end(filters)
            return cache[filters]
        docs = filter_mask(searcher, filters)
        cache[filters] = docs
        if len(cache) > _FILTER_CACHE_SIZE:
            cache.popitem(last=False)
        return docs

    # -- status ------------------------------------------------------------------------------

    def has_chunk_index(self) -> bool:
        """True when the chunk index exists, opens and holds at least one chunk; raises
        only :class:`DamagedIndexError`."""
        return self._has_docs(self._chunks)

    def has_item_index(self) -> bool:
        """True when the item index exists, opens and holds at least one item; raises
        only :class:`DamagedIndexError`."""
        return self._has_docs(self._items)

    def _has_docs(self, idx: _Index) -> bool:
        with self._lock:
            try:
                return self._count(idx) > 0
            except DamagedIndexError:
                raise
            except SearchIndexError:
                return False

    def chunk_count(self) -> int:
        """How many chunks the chunk index holds."""
        with self._lock:
            return self._count(self._chunks)

    def item_count(self) -> int:
        """How many items the item index holds."""
        with self._lock:
            return self._count(self._items)

    def indexed_item_ids(self, *, chunks: bool = False) -> set[str]:
        """The id of every item in the item index (``chunks``: of every item with chunks
        in the chunk index). Reads every stored key: for repairs."""
        idx = self._chunks if chunks else self._items
        with self._lock:
            searcher = self._searcher(idx)
            try:
                return {str(fields_["item_id"]) for fields_ in searcher.all_stored_fields()}
            except Exception as exc:
                raise self._failure(idx, exc, "cannot read") from exc

    def _count(self, idx: _Index) -> int:
        searcher = self._searcher(idx)
        try:
            return int(searcher.doc_count())
        except Exception as exc:
            raise self._failure(idx, exc, "cannot read") from exc

    # -- lifetime ----------------------------------------------------------------------------

    def close(self) -> None:
        """Release searchers and indexes; calling it again does nothing."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for idx in (self._chunks, self._items):
                idx.close_searcher()
                if idx.ix is not None:
                    with contextlib.suppress(Exception):
                        idx.ix.close()
                    idx.ix = None
                if isinstance(idx.storage, PrivateRamStorage):
                    idx.storage.remove_tempdir()

    def __enter__(self) -> SearchIndexManager:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        where = "memory" if self.index_dir is None else str(self.index_dir)
        return f"{type(self).__name__}({where!r})"


def _over_cap(found: Iterable[dict[str, Any]], cap: int) -> bool:
    """Whether more than ``cap`` of these stored documents belong to one item."""
    counts = Counter(str(fields_["item_id"]) for fields_ in found)
    return bool(counts) and max(counts.values()) > cap


def verify_keyword_folder(index_dir: Path, *, full: bool = True) -> list[Damage]:
    """:meth:`SearchIndexManager.verify` of the indexes in ``index_dir``, without opening
    them (for one that cannot be opened)."""
    found = []
    path = index_dir / STATE_FILE
    legacy = False
    try:
        legacy = read_state(path).legacy
    except FileNotFoundError:
        pass
    except Exception as exc:
        found.append(Damage(str(path), str(exc)))
    for name in ("chunks", "items"):
        found.extend(verify_index(index_dir / name, WHOOSH_INDEX_NAME, full=full, legacy=legacy))
    return found
