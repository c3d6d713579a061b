"""The seams between the search engine and a backend: storage, keyword index, vector index.

:class:`~knowledge_agent.search.search_engine_impl.SearchEngineImpl` talks to these protocols
only, so a backend is whatever provides them: the local data folder (SQLite, Whoosh, the
TF-IDF and dense segment stores) is one, a database server another. What a backend must keep
is stated here, once:

* :class:`Storage` is the truth: items, chunks, the journal of changes the indexes replay, and
  small settings. Everything an index holds can be rebuilt from it.
* An index (:class:`KeywordIndex`, :class:`VectorIndex`) is derived: it applies the journal up
  to :attr:`IndexState.applied_seq`, and its counts can be compared with the storage's.
* Searches take analysed terms (the shared :class:`~knowledge_agent.analysis.TextAnalyzer`,
  so every backend stems and splits alike) or, for a dense index, the query text; they
  return plain hits restricted by the filters *before* ranking.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol, TypeVar, runtime_checkable

if TYPE_CHECKING:
    from knowledge_agent.analysis import TextAnalyzer
    from knowledge_agent.embeddings import Embedder
    from knowledge_agent.models import ItemSummary, KnowledgeChunk, KnowledgeItem
    from knowledge_agent.models.status import IndexDamage
    from knowledge_agent.search.analysed_batch import AnalysedBatch, Pair
    from knowledge_agent.search.filters import SearchFilters
    from knowledge_agent.search.hits import ChunkHit, ItemHit
    from knowledge_agent.search.search_engine_impl import SearchEngineImpl
    from knowledge_agent.storage.doc_sources import DocPage, DocSource
    from knowledge_agent.storage.sources import KnowledgeBaseInfo, SourceRecord, SourceRoot
    from knowledge_agent.storage.sqlite_storage import ItemFacts

__all__ = [
    "Backend",
    "DenseVectorIndex",
    "DocSources",
    "EngineFactory",
    "IndexState",
    "KeywordIndex",
    "Refit",
    "Sources",
    "Storage",
    "VectorIndex",
]

Query = TypeVar("Query", contravariant=True)
_T = TypeVar("_T")


@runtime_checkable
class Sources(Protocol):
    """Knowledge bases, the roots collected into them, and the files tracked under a root."""

    def ensure_kb(self, name: str, description: str | None = None) -> bool: ...
    def kb_names(self) -> list[str]: ...
    def kb_info(self, name: str) -> KnowledgeBaseInfo | None: ...
    def delete_kb(self, name: str) -> list[str]: ...
    def save_root(self, root: SourceRoot) -> None: ...
    def get_roots(self, kb: str | None = None) -> list[SourceRoot]: ...
    def delete_root(self, kb: str, root: str) -> list[str]: ...
    def get_sources(self, kb: str, root: str | None = None) -> dict[str, SourceRecord]: ...
    def get_source(self, kb: str, path: str) -> SourceRecord | None: ...
    def get_sources_by_path(self, kb: str, paths: Iterable[str]) -> dict[str, SourceRecord]: ...
    def sources_at(self, path: str, separator: str = ...) -> list[SourceRecord]: ...
    def save_source(self, record: SourceRecord) -> None: ...
    def save_source_item(
        self, record: SourceRecord, item: KnowledgeItem, chunks: list[KnowledgeChunk]
    ) -> None:
        """The record, the item and its chunks in one transaction."""

    def save_source_items(
        self, entries: Sequence[tuple[SourceRecord, KnowledgeItem, list[KnowledgeChunk]]]
    ) -> None:
        """:meth:`save_source_item` for several files in one transaction: all or none."""

    def delete_source(self, kb: str, path: str) -> str | None: ...


@runtime_checkable
class DocSources(Protocol):
    """Documentation sources crawled from the web, and their pages."""

    def save_doc_source(self, source: DocSource) -> None: ...
    def get_doc_sources(self, kb: str | None = None) -> list[DocSource]: ...
    def get_doc_source(self, kb: str, url: str) -> DocSource | None: ...
    def delete_doc_source(self, kb: str, url: str) -> list[str]: ...
    def get_doc_pages(self, kb: str, source_url: str | None = None) -> dict[str, DocPage]: ...
    def get_doc_page(self, kb: str, key: str) -> DocPage | None: ...
    def save_doc_page(self, page: DocPage) -> None: ...
    def save_doc_page_item(
        self, page: DocPage, item: KnowledgeItem, chunks: list[KnowledgeChunk]
    ) -> None:
        """The page, the item and its chunks in one transaction."""

    def delete_doc_page(self, kb: str, key: str) -> str | None: ...


@runtime_checkable
class Storage(Protocol):
    """The truth: items and chunks, the journal the indexes replay, and small settings.

    Every write of an item or its chunks appends to the journal in the same transaction.
    """

    sources: Sources
    doc_sources: DocSources

    @property
    def read_only(self) -> bool: ...
    @property
    def read_only_reason(self) -> str | None: ...
    def write_group(self, operation: str) -> AbstractContextManager[None]:
        """Writes inside commit together at the end (one transaction)."""

    def close(self) -> None: ...

    # items
    def save_item(self, item: KnowledgeItem) -> None: ...
    def save_item_with_chunks(
        self, item: KnowledgeItem, chunks: Iterable[KnowledgeChunk]
    ) -> None: ...
    def get_item(self, item_id: str) -> KnowledgeItem | None: ...
    def get_items(self, item_ids: Iterable[str]) -> dict[str, KnowledgeItem]: ...
    def get_item_summaries(self, item_ids: Iterable[str]) -> dict[str, ItemSummary]: ...
    def item_facts(self, item_ids: Iterable[str]) -> dict[str, ItemFacts]: ...
    def facet_groups(self, item_ids: Iterable[str]) -> list[tuple[str, str, str, int]]:
        """(kb, doc_type, source_type, documents) of the stored items among ``item_ids``,
        one row per distinct triple: a grouped count."""

    def iter_item_facts(
        self, *, kb: str | None = None, batch_size: int = 500
    ) -> Iterator[ItemFacts]: ...
    def delete_item(self, item_id: str) -> bool: ...
    def items_with_source(
        self, source_uri: str, *, kb: str | None = None
    ) -> list[KnowledgeItem]: ...
    def list_items(
        self,
        *,
        kb: str | None = None,
        source_type: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[KnowledgeItem]: ...
    def iter_items(
        self, *, kb: str | None = None, batch_size: int = 500
    ) -> Iterator[KnowledgeItem]: ...
    def item_ids(self, *, with_chunks: bool = False) -> set[str]: ...
    def count_items(self, *, kb: str | None = None) -> int: ...
    def ids_with_prefix(self, kind: str, prefix: str, limit: int = 2) -> list[str]: ...
    def field_values(self, name: str) -> list[str]: ...

    # chunks
    def save_chunks(self, item_id: str, chunks: Iterable[KnowledgeChunk]) -> None: ...
    def get_chunks_for_item(self, item_id: str) -> list[KnowledgeChunk]: ...
    def get_chunks_for_items(self, item_ids: Iterable[str]) -> dict[str, list[KnowledgeChunk]]:
        """Each item's chunks in chunk_index order; items without chunks are absent."""

    def get_chunk_by_id(self, chunk_id: str) -> KnowledgeChunk | None: ...
    def get_chunks(self, chunk_ids: Iterable[str]) -> dict[str, KnowledgeChunk]: ...
    def get_adjacent_chunks(
        self, item_id: str, chunk_index: int, window: int = 1
    ) -> list[KnowledgeChunk]: ...
    def get_chunks_at(
        self, positions: Iterable[tuple[str, int]]
    ) -> dict[tuple[str, int], KnowledgeChunk]: ...
    def iter_chunks(self, *, batch_size: int = 1000) -> Iterator[KnowledgeChunk]: ...
    def count_chunks(self, *, kb: str | None = None, item_id: str | None = None) -> int: ...
    def chunks_named(self, names: Sequence[str], role: str) -> list[tuple[str, str]]:
        """(chunk id, item id) of the chunks whose ``symbol`` or ``reference`` names hold
        any of ``names`` (whole, or as their last part)."""

    # the journal: (seq, item id, "upsert" | "delete"), oldest first
    def last_journal_seq(self) -> int: ...
    def journal_since(self, seq: int) -> list[tuple[int, str, str]]: ...
    def count_chunks_since(self, seq: int) -> int: ...
    def trim_journal(self, upto_seq: int) -> None: ...

    # settings
    def get_meta(self, key: str, default: str | None = None) -> str | None: ...
    def set_meta(self, key: str, value: str) -> None: ...


class Refit(Protocol):
    """A rebuild of an index from batches, swapped in at :meth:`finish` (None of it before)."""

    def add(self, upserts: Sequence[Pair] | AnalysedBatch) -> None: ...
    def finish(self) -> int:
        """Swap the new rows in; the number of chunks."""

    def cancel(self) -> None: ...


@runtime_checkable
class IndexState(Protocol):
    """What every index derived from the storage keeps: how far it applied the journal,
    its counts (compared with the storage's), and the batch updates that keep it in step."""

    @property
    def applied_seq(self) -> int: ...
    def set_applied_seq(self, seq: int) -> None: ...
    def update(
        self, upserts: Sequence[Pair] | AnalysedBatch = (), deletes: Iterable[str] = ()
    ) -> None:
        """Replace the rows of ``upserts``' items and remove those of ``deletes``."""

    def chunk_count(self) -> int: ...
    def item_count(self) -> int: ...
    def indexed_item_ids(self, *, chunks: bool = False) -> set[str]:
        """Ids of the items it holds a row for (with ``chunks``: a chunk row)."""

    def close(self) -> None: ...


@runtime_checkable
class KeywordIndex(IndexState, Protocol):
    """BM25F over chunks and over whole items, with the statistics the confidence needs."""

    analyzer: TextAnalyzer
    rebuild_commit_every: int  # items per batch a rebuild is fed in

    def rebuild(self, pairs: Iterable[Pair | AnalysedBatch]) -> int:
        """Replace everything with ``pairs``; the number of chunks."""

    def search_chunks(
        self,
        terms: Sequence[str] | Mapping[str, float],
        limit: int,
        filters: SearchFilters | None = None,
        *,
        per_item: int | None = None,
    ) -> list[ChunkHit]:
        """The best ``limit`` chunks for analysed ``terms`` (or term -> weight), at most
        ``per_item`` of one item when given."""

    def search_items(
        self, terms: Sequence[str], limit: int, filters: SearchFilters | None = None
    ) -> list[ItemHit]: ...
    def idf(self, terms: Iterable[str], *, items: bool = False) -> dict[str, float]:
        """BM25 idf of each term over the chunks (or items); an unknown term gets the
        highest."""

    def unseen(self, terms: Iterable[str], *, items: bool = False) -> set[str]:
        """The terms no chunk (or item) holds in any field."""

    def best_possible_score(self, terms: Sequence[str], idf: Mapping[str, float]) -> float:
        """What a text holding every term as often as counts help would score."""

    def has_chunk_index(self) -> bool: ...
    def has_item_index(self) -> bool: ...


@runtime_checkable
class VectorIndex(IndexState, Protocol[Query]):
    """Cosine similarity over chunk and item vectors: TF-IDF (``Query`` is the analysed
    terms) or dense (``Query`` is the query text, embedded by the index); the query is
    passed by position."""

    def refit(self) -> Refit: ...
    def search_chunks(
        self,
        query: Query,
        /,
        top_k: int,
        min_similarity: float = 0.0,
        filters: SearchFilters | None = None,
        *,
        per_item: int | None = None,
    ) -> list[ChunkHit]: ...
    def search_items(
        self,
        query: Query,
        /,
        top_k: int,
        min_similarity: float = 0.0,
        filters: SearchFilters | None = None,
    ) -> list[ItemHit]: ...
    def has_chunks(self) -> bool: ...


@runtime_checkable
class DenseVectorIndex(VectorIndex[str], Protocol):
    """A vector index of an embedder's vectors, which can keep the vectors it has."""

    embedder: Embedder

    @property
    def embedder_name(self) -> str: ...
    def refit(self, *, reuse: bool = False) -> Refit:
        """With ``reuse``, rows whose text it holds keep their vector."""

    def fit_chunks(self, pairs: Iterable[Pair | AnalysedBatch]) -> int:
        """Embed every pair into an empty index; the number of chunks."""


@runtime_checkable
class Backend(Protocol):
    """A knowledge base as :class:`~knowledge_agent.KnowledgeAgentCore` holds it: the storage,
    the engine over its indexes, and when writes become searchable.

    The local backend (a data folder) indexes writes behind, from the storage's journal, and
    shares the folder between processes; a server backend indexes in the write's transaction,
    so most of these are immediate there.
    """

    storage: Storage
    engine: SearchEngineImpl
    lock: threading.RLock  # one reader or writer of this object at a time (a watcher's thread)
    lock_timeout: float | None  # seconds a write waits for another process's (None: no limit)

    def open(self) -> None:
        """Check what is there, and repair what needs it when that is allowed."""

    def writing(self) -> AbstractContextManager[None]:
        """Around every write: the right to write (another process's writes first)."""

    def defer(self, chars: int = 0) -> None:
        """Inside :meth:`writing`: a change to make searchable before the next search."""

    def flush(self, progress: Callable[[int, int], None] | None = None) -> None:
        """Make every write so far searchable now."""

    def before_reading(self) -> None:
        """Before a query, outside :attr:`lock`: this process's writes made searchable."""

    def reading(self) -> None:
        """Before a query, under :attr:`lock`: other processes' writes picked up."""

    def answer(self, run: Callable[[], _T], mode: str = "hybrid") -> _T:
        """``run()``, a query in ``mode``, with damage repaired or reported, never around."""

    def damage(self, *, full: bool = True) -> list[IndexDamage]: ...
    def repair(self, damaged: Collection[str]) -> None:
        """Rebuild the indexes named (``keyword``, ``semantic``, ``dense``)."""

    def rebuild(self, *, reuse_vectors: bool = False) -> int: ...
    def close(self) -> None: ...


EngineFactory = Callable[
    [Storage, KeywordIndex, "VectorIndex[Sequence[str]]", "DenseVectorIndex | None"],
    "SearchEngineImpl",
]
"""What the core gives a backend to put its engine together: (storage, keyword index, TF-IDF
index, dense index or None) -> the engine. The backend owns its indexes; the core, above both,
owns how a query runs over them."""
