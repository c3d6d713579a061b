"""SearchEngineImpl: two-stage hybrid search over chunks, with an item-level fallback (R5).

Stage one ranks chunks with each engine (Whoosh BM25F, TF-IDF cosine, and dense vectors
when an embedder is set), each restricted by the filters before ranking, fuses the rankings
and re-scores the best chunks by their best line and their document. Stage two groups the
chunks per item (an item scores as its best chunk, R5.2, times its document and recency
boosts), loads the neighbouring chunks as context (R5.3) and hydrates everything from SQLite,
dropping hits whose rows are gone.

The engine also keeps every index in step with SQLite: every storage write appends to the
journal, and :meth:`SearchEngineImpl.sync` replays what the indexes have not applied yet.
"""

from __future__ import annotations

import copy
import functools
import logging
import math
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from knowledge_agent.analysis import TextAnalyzer, detect_language, highlight, highlight_terms
from knowledge_agent.errors import (
    DamagedIndexError,
    EmbeddingError,
    NotFoundError,
    QueryError,
    SearchIndexError,
)
from knowledge_agent.faults import Faults
from knowledge_agent.models import (
    KnowledgeChunk,
    KnowledgeItem,
    MatchedChunk,
    ResultItem,
    ScoreExplanation,
    SearchFacets,
    SearchResult,
)
from knowledge_agent.models.evidence import evidence_ref, lines_label
from knowledge_agent.search.analysed_batch import AnalysedBatch, grouped
from knowledge_agent.search.config import SearchConfig
from knowledge_agent.search.facets import count_facets
from knowledge_agent.search.filters import SearchFilters
from knowledge_agent.search.hits import ChunkHit, ItemHit
from knowledge_agent.search.ranking.analysed import TextAnalyses
from knowledge_agent.search.ranking.boosts import age_days, mmr_order, time_boost
from knowledge_agent.search.ranking.expansion import expanded_query
from knowledge_agent.search.ranking.explain import FieldMatches
from knowledge_agent.search.ranking.fusion import fuse
from knowledge_agent.search.ranking.locate import heading_only, locate
from knowledge_agent.search.ranking.passages import (
    PassageEvidence,
    confidence,
    passage_evidence,
    unseen_share,
)

if TYPE_CHECKING:
    from knowledge_agent.embeddings import Reranker
    from knowledge_agent.protocols import (
        DenseVectorIndex,
        IndexState,
        KeywordIndex,
        Storage,
        VectorIndex,
    )

__all__ = ["LEVELS", "MODES", "SearchConfig", "SearchEngineImpl"]

logger = logging.getLogger(__name__)

LEVELS = ("auto", "chunk", "item")
MODES = ("hybrid", "keyword", "semantic", "dense")

_TRIMMED_KEY = "journal_trimmed_upto"
_SYNC_BATCH = 2000  # items per index update while replaying the journal …
_SYNC_CHARS = 32_000_000  # … or fewer, once their text reaches this many characters
_SYNC_READ = 200  # items read from SQLite at a time


@dataclass
class _Candidate:
    """An item in the chunk stage: its best chunks (fused score, chunk id), best first."""

    item_id: str
    chunks: list[tuple[float, str]] = field(default_factory=list)

    @property
    def score(self) -> float:
        return self.chunks[0][0]


@dataclass
class _ChunkQuery:
    """One query's chunk stage: what every stage reads, and what they learn on the way."""

    query: str
    terms: list[str]
    limit: int
    filters: SearchFilters
    mode: str
    count: int  # chunks each engine ranks
    cap: int  # of which at most this many of one item
    idf: dict[str, float]
    best_possible: float
    unknown: float
    analyses: TextAnalyses  # each chunk text analysed once for this query
    located: dict[str, tuple[str, int]] = field(default_factory=dict)  # chunk -> item, index
    loaded: dict[str, KnowledgeChunk] = field(default_factory=dict)  # read for this query


@dataclass
class _RankedChunks:
    """Stage one's outcome: the rankings, the fused scores with the evidence, and the query
    as asked (``as_asked``, ``first_keyword``) when it was widened."""

    rankings: _Rankings
    fused: dict[str, float]
    evidence: dict[str, PassageEvidence]
    documents: dict[str, float]
    as_asked: dict[str, float]
    first_keyword: dict[str, float]


@dataclass
class _Grouped:
    """Stage two's outcome: the items best first, their boosts, and the order of an item's
    chunks."""

    items: list[_Candidate]
    boosts: dict[str, Boost]
    order: Callable[[tuple[float, str]], tuple[float, float, int]]


@dataclass
class _Rankings:
    """Both engines' scores for one query, keyed by chunk id (or item id), and their fusion."""

    keyword: dict[str, float]
    semantic: dict[str, float]
    fused: dict[str, float]
    details: dict[str, Any]
    dense: dict[str, float] = field(default_factory=dict)

    def explain(
        self,
        key: str,
        terms: dict[str, int],
        *,
        fused: float | None = None,
        boost: Boost | None = None,
        **details: Any,
    ) -> ScoreExplanation:
        """Why ``key`` scored as it did; ``fused`` is its fused score with the evidence the
        re-scoring added (the fusion alone when not given), ``boost`` its document's."""
        boost = boost or NO_BOOST
        return ScoreExplanation(
            matched_terms=list(terms),
            term_frequencies=terms,
            keyword_score=self.keyword.get(key, 0.0),
            semantic_score=self.semantic.get(key, 0.0),
            fused_score=self.fused[key] if fused is None else fused,
            document_boost=boost.document,
            recency_boost=boost.time,
            keyword_rank=_rank(self.keyword, key),
            semantic_rank=_rank(self.semantic, key),
            dense_score=self.dense.get(key, 0.0) if "dense" in self.details else None,
            dense_rank=_rank(self.dense, key),
            details={"rank_fusion": self.fused[key], **details, **self.details},
        )


@dataclass(frozen=True)
class Boost:
    """What an item's doc type and age multiply its scores by (its document and recency
    boosts)."""

    document: float = 1.0
    time: float = 1.0

    @property
    def factor(self) -> float:
        return self.document * self.time


NO_BOOST = Boost()
# MMR reorders this many times the results asked for: enough to bring a distinct one up.
_MMR_POOL = 3
_MMR_POOL_MAX = 100


def _path(item: KnowledgeItem) -> str:
    """Where an item's text comes from, for citations: its path or URL, else its title."""
    return item.source_uri or item.title or item.id


_RERANK_CHARS = 4000


def _rank(scores: dict[str, float], key: str) -> int | None:
    """1-based position of ``key`` in an engine's ranking (dicts keep the engine's order)."""
    for rank, candidate in enumerate(scores, start=1):
        if candidate == key:
            return rank
    return None


class SearchEngineImpl:
    """Answers queries over the chunk index and keeps the indexes in step with SQLite."""

    def __init__(
        self,
        storage: Storage,
        keyword_index: KeywordIndex,
        semantic_searcher: VectorIndex[Sequence[str]],
        analyzer: TextAnalyzer | None = None,
        config: SearchConfig | None = None,
        dense_index: DenseVectorIndex | None = None,
        *,
        faults: Faults | None = None,
    ) -> None:
        self.storage = storage
        self._faults = faults or Faults()  # a testing hook: where this process kills itself
        self.keyword_index = keyword_index
        self.semantic_searcher = semantic_searcher
        self.dense_index = dense_index
        self.analyzer = analyzer or TextAnalyzer()
        self.config = config or SearchConfig()

    # -- index maintenance ---------------------------------------------------------------

    def sync(self, progress: Callable[[int, int], None] | None = None) -> int:
        """Replay the storage journal into both indexes; returns how many items changed.

        Rebuilds instead when the journal no longer reaches back to what an index applied
        (it was trimmed, or the database was replaced). ``progress(done, total)`` is called
        after each index update, in chunks.
        """
        trimmed = int(self.storage.get_meta(_TRIMMED_KEY) or 0)
        self._fit_dense_if_new(trimmed, progress)
        seqs = [index.applied_seq for _, index in self._derived()]
        applied, newest = min(seqs), max(seqs)
        if applied < trimmed or newest > self.storage.last_journal_seq():
            logger.info("search indexes are out of reach of the journal; rebuilding")
            self.rebuild(reuse_vectors=True)
            return self.storage.count_items()
        entries = self.storage.journal_since(applied)
        if not entries:
            return 0
        self._faults.reached("before-index")
        latest: dict[str, str] = {}
        for _, item_id, op in entries:
            latest.pop(item_id, None)  # keep the order of each item's last change
            latest[item_id] = op
        item_ids = list(latest)
        total = self.storage.count_chunks_since(applied) if progress is not None else 0
        upserts: list[tuple[KnowledgeItem, list[KnowledgeChunk]]] = []
        deletes: list[str] = []
        loaded = 0  # characters of item text held for the next index update
        chunks_done = 0
        for start in range(0, len(item_ids), _SYNC_READ):
            batch = item_ids[start : start + _SYNC_READ]
            upsert_ids = [item_id for item_id in batch if latest[item_id] == "upsert"]
            items = self.storage.get_items(upsert_ids)
            chunks = self.storage.get_chunks_for_items(
                item_id for item_id in upsert_ids if item_id in items
            )
            for item_id in upsert_ids:
                if item_id in items:
                    upserts.append((items[item_id], chunks.get(item_id, [])))
                    loaded += len(items[item_id].content)
                    chunks_done += len(upserts[-1][1])
            deletes.extend(item_id for item_id in batch if item_id not in items)
            done = start + len(batch)
            # Few large index updates: each one is a whoosh commit and a segment to merge
            # later (tldr: 37 s with 500 items an update, 28 s with 2,000 — and less memory).
            full = len(upserts) + len(deletes) >= _SYNC_BATCH or loaded >= _SYNC_CHARS
            if full or done == len(item_ids):
                self._update(upserts, deletes)
                upserts, deletes, loaded = [], [], 0
                if progress is not None:
                    progress(chunks_done, max(total, chunks_done))
        self._faults.reached("before-applied")
        self._mark_applied(entries[-1][0])
        return len(item_ids)

    def rebuild(self, *, reuse_vectors: bool = False) -> int:
        """Rebuild every index from SQLite (R4.5); returns the number of chunks indexed.

        One pass: each batch of stored items is analysed once and fed to every engine (the
        keyword index commits as it goes, the TF-IDF and dense indexes swap their rows in at
        the end). With ``reuse_vectors``, the dense index keeps the vector of every row whose
        text it holds already, and embeds only the others (a rebuild for the other indexes'
        sake); otherwise it embeds every row again.
        """
        seq = self.storage.last_journal_seq()
        analyzer = self.keyword_index.analyzer
        refits = [self.semantic_searcher.refit()]
        if self.dense_index is not None:
            refits.append(self.dense_index.refit(reuse=reuse_vectors))

        def batches() -> Iterator[AnalysedBatch]:
            size = self.keyword_index.rebuild_commit_every
            for group in grouped(self._stored_pairs(), size):
                batch = AnalysedBatch.build(analyzer, group)  # type: ignore[arg-type]
                for refit in refits:
                    refit.add(batch)
                yield batch
                self._faults.reached("mid-rebuild")

        try:
            count = self.keyword_index.rebuild(batches())
            for refit in refits:
                refit.finish()
        except BaseException:
            for refit in refits:
                refit.cancel()
            raise
        self._mark_applied(seq)
        logger.info("rebuilt the search indexes: %d chunks", count)
        return count

    rebuild_chunk_index = rebuild

    def _fit_dense_if_new(
        self, trimmed: int, progress: Callable[[int, int], None] | None = None
    ) -> None:
        """Embed every stored chunk into a dense index that is new (an embedder set for
        the first time, or changed): only it is built, the other indexes are current.
        ``progress(done, total)`` counts chunks."""
        dense = self.dense_index
        if dense is None or dense.applied_seq >= trimmed or dense.has_chunks():
            return
        if not self.storage.count_items():
            return
        seq = self.storage.last_journal_seq()
        total = self.storage.count_chunks()
        logger.info("embedding %d chunks with %s", total, dense.embedder_name)

        def counted() -> Iterator[tuple[KnowledgeItem, list[KnowledgeChunk]]]:
            done = 0
            for item, chunks in self._stored_pairs():
                yield item, chunks
                done += len(chunks)
                if progress is not None:
                    progress(done, total)

        count = dense.fit_chunks(counted())
        dense.set_applied_seq(seq)
        logger.info("embedded %d chunks", count)

    def _derived(self) -> list[tuple[str, IndexState]]:
        """The indexes derived from the storage, by name: keyword, semantic, and dense if
        any."""
        found: list[tuple[str, IndexState]] = [
            ("keyword", self.keyword_index),
            ("semantic", self.semantic_searcher),
        ]
        if self.dense_index is not None:
            found.append(("dense", self.dense_index))
        return found

    def reconcile(self) -> int:
        """Make an index whose item or chunk count disagrees with SQLite hold exactly what
        SQLite holds.

        A cheap check (counts) first; only a disagreeing index has its item ids compared
        (those of its item rows, or of its chunk rows), and only the difference is indexed
        or removed. Returns how many items were fixed.
        """
        items, chunks = self.storage.count_items(), self.storage.count_chunks()
        fixed = 0
        for name, index in self._derived():
            if (index.item_count(), index.chunk_count()) == (items, chunks):
                continue
            stored = self.storage.item_ids()
            held = index.indexed_item_ids()
            missing, extra = stored - held, held - stored
            if index.chunk_count() != chunks:
                with_chunks = self.storage.item_ids(with_chunks=True)
                held_chunks = index.indexed_item_ids(chunks=True)
                missing |= with_chunks - held_chunks
                extra |= held_chunks - stored
            logger.warning(
                "the %s index disagrees with the database: %d items to index, %d to remove",
                name, len(missing), len(extra),
            )  # fmt: skip
            missing, extra = sorted(missing), sorted(extra)
            for start in range(0, len(missing), _SYNC_READ):
                read = self.storage.get_items(missing[start : start + _SYNC_READ])
                index.update(
                    [(item, self.storage.get_chunks_for_item(item.id)) for item in read.values()]
                )
            if extra:
                index.update(deletes=extra)
            fixed += len(missing) + len(extra)
        return fixed

    def update_chunk_index(self, item_id: str, chunks: Sequence[KnowledgeChunk]) -> None:
        """Replace the indexed chunks of a stored item with ``chunks`` (R4.3)."""
        item = self.storage.get_item(item_id)
        if item is None:
            raise NotFoundError(f"item {item_id!r} does not exist")
        self._update([(item, chunks)], [])

    def remove_chunks_from_index(self, item_id: str) -> None:
        """Remove every indexed chunk of an item (R4.4)."""
        self._update([], [item_id])

    def has_chunk_index(self) -> bool:
        """Whether a chunk index holds anything to search."""
        return self.keyword_index.has_chunk_index() or self.semantic_searcher.has_chunks()

    def _update(
        self, upserts: Sequence[tuple[KnowledgeItem, Sequence[KnowledgeChunk]]], deletes: list[str]
    ) -> None:
        # Analysed once, read by every engine.
        batch = AnalysedBatch.build(self.keyword_index.analyzer, upserts)
        for name, index in self._derived():
            index.update(batch, deletes)
            if name == "keyword":
                self._faults.reached("between-indexes")

    def _mark_applied(self, seq: int) -> None:
        for _, index in self._derived():
            index.set_applied_seq(seq)
        self.storage.trim_journal(seq)
        self.storage.set_meta(_TRIMMED_KEY, str(seq))

    def _stored_pairs(self) -> Iterator[tuple[KnowledgeItem, list[KnowledgeChunk]]]:
        for item in self.storage.iter_items():
            yield item, self.storage.get_chunks_for_item(item.id)

    # -- search --------------------------------------------------------------------------

    def search(
        self,
        query: str,
        *,
        limit: int = 10,
        context_window: int = 1,
        filters: SearchFilters | None = None,
        level: str = "auto",
        mode: str = "hybrid",
        min_score: float | None = None,
        min_confidence: float | None = None,
        config: SearchConfig | None = None,
        reranker: Reranker | None = None,
    ) -> list[SearchResult]:
        """The best items for ``query``, each with its best chunks and their context.

        ``level`` is ``"auto"`` (chunks, or items when no chunk index exists), ``"chunk"``
        or ``"item"``; ``mode`` picks the engines: ``"hybrid"`` (all there are), ``"keyword"``,
        ``"semantic"`` or ``"dense"`` (with an embedder). Any query text is accepted: text
        with no searchable terms gives [].
        ``min_score`` cuts on the ranking score, ``min_confidence`` on
        :attr:`SearchResult.confidence` (an empty list then means nothing matches well).
        ``config`` replaces the engine's for this query; ``reranker`` re-scores the best
        ``rerank_depth`` results (:meth:`rerank`).
        """
        request: dict[str, Any] = {
            "context_window": context_window,
            "filters": filters,
            "level": level,
            "mode": mode,
            "min_score": min_score,
            "min_confidence": min_confidence,
        }
        if config is not None and config != self.config:
            engine = copy.copy(self)  # shares the indexes; only the settings differ
            engine.config = config
            return engine.search(query, limit=limit, reranker=reranker, **request)
        if reranker is not None:
            deeper = max(limit, self.config.rerank_depth)
            results = self.search(query, limit=deeper, **request)
            return self.rerank(query, results, reranker)[:limit]
        _check_request(query, limit, context_window, level, mode)
        if mode == "dense" and self.dense_index is None:
            raise QueryError("mode 'dense' needs an embedder: KnowledgeAgentCore(embedder=…)")
        if min_confidence is not None and not 0 <= min_confidence <= 1:
            raise QueryError(f"min_confidence must be within 0 and 1, got {min_confidence!r}")
        terms = self.analyzer.terms(query)[: self.config.max_query_terms]
        if not terms or limit == 0:
            return []
        filters = filters or SearchFilters()
        if filters.names_unresolved:
            filters = self._resolve_names(filters)
            if not filters.chunk_ids:
                return []
        if level != "item":
            try:
                if level == "chunk" or self.has_chunk_index():
                    return self._chunk_search(
                        query,
                        terms,
                        limit,
                        context_window,
                        filters,
                        mode,
                        min_score,
                        min_confidence,
                    )
            except DamagedIndexError:
                raise  # never answered around: rebuilt, or the search fails
            except SearchIndexError:
                if level == "chunk":
                    raise
                logger.warning("chunk index unavailable; searching items", exc_info=True)
        return self._item_search(query, terms, limit, filters, mode, min_score, min_confidence)

    def _resolve_names(self, filters: SearchFilters) -> SearchFilters:
        """The ``symbol`` / ``references`` filters as the chunks they select (both: the
        chunks selected by each)."""
        chosen: set[tuple[str, str]] | None = None
        for role, names in (("symbol", filters.symbol), ("reference", filters.references)):
            if names:
                found = set(self.storage.chunks_named(names, role))
                chosen = found if chosen is None else chosen & found
        return filters.resolved(sorted(chosen or ()))

    def facets(self, query: str, filters: SearchFilters | None = None) -> SearchFacets:
        """How many documents match ``query`` under ``filters`` per knowledge base, doc type
        and source type, before any limit: those holding one of its terms
        (:mod:`~knowledge_agent.search.facets`), whatever engines a search would rank with."""
        if not isinstance(query, str):
            raise QueryError(f"query must be a string, got {type(query).__name__}")
        terms = self.analyzer.terms(query)[: self.config.max_query_terms]
        filters = filters or SearchFilters()
        if filters.names_unresolved:
            filters = self._resolve_names(filters)
            if not filters.chunk_ids:
                return SearchFacets.count([])
        return count_facets(self.storage, self.keyword_index, terms, filters)

    def _candidate_count(self, limit: int) -> int:
        return max(self.config.candidates, limit * self.config.max_chunks_per_item * 2)

    def _rankings(
        self,
        keyword_hits: Callable[[], Sequence[ChunkHit | ItemHit]],
        semantic_hits: Callable[[], Sequence[ChunkHit | ItemHit]],
        key: Callable[[Any], str],
        mode: str,
        dense_hits: Callable[[], Sequence[ChunkHit | ItemHit]] | None = None,
    ) -> _Rankings:
        """Run the engines ``mode`` selects and fuse their scores."""
        config = self.config
        keyword_weight = config.keyword_weight if mode in ("hybrid", "keyword") else 0.0
        semantic_weight = config.semantic_weight if mode in ("hybrid", "semantic") else 0.0
        dense_on = dense_hits is not None and mode in ("hybrid", "dense")
        dense_weight = config.dense_weight if dense_on else 0.0
        keyword = {key(hit): hit.score for hit in keyword_hits()} if keyword_weight else {}
        semantic = {key(hit): hit.score for hit in semantic_hits()} if semantic_weight else {}
        dense = {key(hit): hit.score for hit in dense_hits()} if dense_hits and dense_weight else {}
        fused = fuse(
            config.fusion,
            [keyword, semantic, dense],
            [keyword_weight, semantic_weight, dense_weight],
            config.rrf_k,
        )
        details: dict[str, Any] = {"fusion": config.fusion, "mode": mode}
        if dense_on:
            details["dense"] = self.dense_index.embedder_name if self.dense_index else ""
        return _Rankings(keyword, semantic, fused, details, dense)

    def _dense(
        self, query: str, mode: str, search: Callable[[], Sequence[ChunkHit | ItemHit]]
    ) -> Callable[[], Sequence[ChunkHit | ItemHit]] | None:
        """The dense ranking, when there is a dense index and (in hybrid mode) the embedder
        knows the query's language; an embedder that fails (an HTTP service down) leaves it
        empty rather than failing the search."""
        if self.dense_index is None:
            return None
        languages = getattr(self.dense_index.embedder, "languages", None)
        if mode == "hybrid" and languages and detect_language(query) not in languages:
            return None

        def hits() -> Sequence[ChunkHit | ItemHit]:
            try:
                return search()
            except EmbeddingError as exc:
                logger.warning("dense ranking left out: %s", exc)
                return []

        return functools.cache(hits)

    def _chunk_search(
        self,
        query: str,
        terms: list[str],
        limit: int,
        context_window: int,
        filters: SearchFilters,
        mode: str,
        min_score: float | None,
        min_confidence: float | None,
    ) -> list[SearchResult]:
        """The chunk stage: rank chunks, group them per item, hydrate the best items."""
        ask = self._chunk_query(query, terms, limit, filters, mode)
        ranked = self._rank_chunks(ask)
        grouped = self._group(ask, ranked, min_score)
        results = self._hydrate(ask, ranked, grouped, context_window, min_confidence)
        if self.config.mmr_lambda == 0:
            # The documents' scores may have grown with the evidence of more of their chunks.
            results.sort(key=lambda result: -result.relevance_score)
        return results

    def _chunk_query(
        self, query: str, terms: list[str], limit: int, filters: SearchFilters, mode: str
    ) -> _ChunkQuery:
        count = self._candidate_count(limit)
        idf = self.keyword_index.idf(terms)
        return _ChunkQuery(
            query=query,
            terms=terms,
            limit=limit,
            filters=filters,
            mode=mode,
            count=count,
            # One document, one slot: no document holds more than its share of the pool, so
            # a changelog with thousands of matching sections leaves room for `limit` others.
            cap=max(self.config.max_chunks_per_item, count // max(limit, 1)),
            idf=idf,
            best_possible=self.keyword_index.best_possible_score(terms, idf),
            unknown=unseen_share(terms, idf, self.keyword_index.unseen(terms)),
            analyses=TextAnalyses(self.analyzer),
        )

    def _rank_chunks(self, ask: _ChunkQuery) -> _RankedChunks:
        """Stage one: each engine's best chunks, fused, re-scored by the passage, document
        and dense evidence; the query widened (RM3) when nothing matched with confidence."""
        terms, count, filters, cap = ask.terms, ask.count, ask.filters, ask.cap

        def chunk_key(hit: ChunkHit) -> str:
            ask.located[hit.chunk_id] = (hit.item_id, hit.chunk_index)
            return hit.chunk_id

        # The semantic engine does not see a widened query: it runs once.
        semantic = functools.cache(
            lambda: self.semantic_searcher.search_chunks(terms, count, 0.0, filters, per_item=cap)
        )
        keyword = functools.cache(
            lambda: self.keyword_index.search_chunks(terms, count, filters, per_item=cap)
        )
        dense = self._dense(
            ask.query,
            ask.mode,
            lambda: self.dense_index.search_chunks(ask.query, count, 0.0, filters, per_item=cap),  # type: ignore[union-attr]
        )
        known_item = ask.mode == "hybrid" and self._known_item(keyword(), ask.best_possible)
        rankings = self._rankings(
            keyword, semantic, chunk_key, "keyword" if known_item else ask.mode, dense
        )
        if known_item:
            rankings.details.update(mode=ask.mode, known_item=True)
        fused, evidence = self._with_passage_evidence(rankings.fused, terms, ask)
        # Confidence is judged on the query as asked, even when it is widened below, and so
        # is which of a document's chunks answer.
        first_keyword = rankings.keyword
        as_asked: dict[str, float] = {}
        widened = self._widened(
            ask.query,
            terms,
            rankings,
            fused,
            evidence,
            ask.idf,
            ask.best_possible,
            ask.unknown,
            ask.loaded,
            ask.analyses,
        )
        if widened is not None:
            as_asked = fused
            rankings = self._rankings(
                lambda: self.keyword_index.search_chunks(widened, count, filters, per_item=cap),
                semantic,
                chunk_key,
                ask.mode,
                dense,
            )  # a widened query is not a known item: it found no confident match
            rankings.details["expanded_with"] = [t for t in widened if t not in terms]
            fused, evidence = self._with_passage_evidence(rankings.fused, terms, ask)
        documents = (
            self._document_shares(terms, count, filters)
            if ask.mode in ("hybrid", "keyword")
            else {}
        )
        fused = self._with_document_evidence(fused, documents, ask.located)
        fused = self._with_dense_evidence(fused, rankings.dense)
        return _RankedChunks(rankings, fused, evidence, documents, as_asked, first_keyword)

    def _group(self, ask: _ChunkQuery, ranked: _RankedChunks, min_score: float | None) -> _Grouped:
        """Stage two: the chunks per item, an item scoring as its best chunk (R5.2) times
        its document and recency boosts; the items best first."""
        candidates: dict[str, _Candidate] = {}
        for chunk_id, score in ranked.fused.items():
            item_id = ask.located[chunk_id][0]
            candidates.setdefault(item_id, _Candidate(item_id)).chunks.append((score, chunk_id))
        boosts = self.item_boosts(candidates)
        for item_id, candidate in candidates.items():
            factor = boosts[item_id].factor if item_id in boosts else 1.0
            if factor != 1.0:
                candidate.chunks[:] = [(score * factor, chunk) for score, chunk in candidate.chunks]
        document_score = {item_id: max(c.chunks)[0] for item_id, c in candidates.items()}

        def order(entry: tuple[float, str]) -> tuple[float, float, int]:
            return (-ranked.as_asked.get(entry[1], 0.0), -entry[0], ask.located[entry[1]][1])

        weighed = max(self.config.max_chunks_per_item, self.config.passage_candidates)
        for candidate in candidates.values():
            candidate.chunks.sort(key=order)
            del candidate.chunks[weighed:]
        # A stable sort on the score alone: ties keep the engines' order, which follows the
        # index order, so the same corpus and query give the same results every run.
        items = sorted(candidates.values(), key=lambda c: -document_score[c.item_id])
        if min_score is not None:
            items = [candidate for candidate in items if candidate.score >= min_score]
        if self.config.mmr_lambda > 0:
            items = self._diversified(items, ask.limit, ask.loaded)
        return _Grouped(items, boosts, order)

    def _hydrate(
        self,
        ask: _ChunkQuery,
        ranked: _RankedChunks,
        grouped: _Grouped,
        context_window: int,
        min_confidence: float | None,
    ) -> list[SearchResult]:
        """The results, read from the storage a page at a time: a hit whose item or chunk
        is gone is dropped, and so is one below ``min_confidence``."""
        results: list[SearchResult] = []
        marked = highlight_terms(ask.terms, self.analyzer)  # once, not once per chunk
        limit = ask.limit
        for start in range(0, len(grouped.items), limit):
            page = grouped.items[start : start + limit]
            summaries = self.storage.get_item_summaries(candidate.item_id for candidate in page)
            chunks = self._read_chunks(
                [chunk_id for candidate in page for _, chunk_id in candidate.chunks], ask.loaded
            )
            near = self._neighbours(page, chunks, context_window)
            for candidate in page:
                summary = summaries.get(candidate.item_id)
                if summary is None:
                    continue
                # The item's text is read from the storage only if a caller asks for it.
                item = ResultItem.lazy(summary, self.storage.get_item)
                result = self._chunk_result(
                    ask, ranked, grouped, item, candidate, chunks, marked, context_window, near
                )
                if result is None:
                    continue
                if min_confidence is not None and result.confidence < min_confidence:
                    continue
                results.append(result)
                if len(results) == limit:
                    return results
        return results

    def _chunk_result(
        self,
        ask: _ChunkQuery,
        ranked: _RankedChunks,
        grouped: _Grouped,
        item: KnowledgeItem,
        candidate: _Candidate,
        chunks: dict[str, KnowledgeChunk],
        marked: frozenset[str],
        context_window: int,
        near: dict[tuple[str, int], KnowledgeChunk],
    ) -> SearchResult | None:
        """One item's result: its best chunks weighed, explained and with their context."""
        terms, idf, evidence, fused = ask.terms, ask.idf, ranked.evidence, ranked.fused
        factor = grouped.boosts[item.id].factor if item.id in grouped.boosts else 1.0
        analyses = ask.analyses
        matched = self._weighed(
            [(score, chunk_id) for score, chunk_id in candidate.chunks if chunk_id in chunks],
            grouped.order,
            factor,
            terms,
            idf,
            evidence,
            fused,
            chunks,
            analyses,
        )
        if not matched:
            return None

        def sure_of(chunk: KnowledgeChunk) -> float:
            return self._confidence(
                ranked.first_keyword,
                chunk.id,
                chunk.content,
                terms,
                idf,
                ask.best_possible,
                evidence,
                ask.unknown,
                analyses,
            )

        best_score, best = matched[0]
        sure = sure_of(best)
        boost = grouped.boosts.get(item.id, NO_BOOST)
        found = FieldMatches(
            self.analyzer,
            terms,
            {"title": item.title, "heading": best.heading, "content": best.content},
            {"content": analyses(best.content).terms},
        )
        rankings = ranked.rankings
        views = [
            self._matched_view(
                chunk,
                score,
                item,
                rankings.explain(
                    chunk.id,
                    (
                        found
                        if chunk is best
                        else FieldMatches(
                            self.analyzer,
                            terms,
                            {"heading": chunk.heading, "content": chunk.content},
                            {"content": analyses(chunk.content).terms},
                        )
                    ).terms("heading", "content"),
                    fused=fused[chunk.id],
                    boost=boost,
                    chunk_id=chunk.id,
                    **self._evidence_details(
                        evidence.get(chunk.id),
                        ranked.documents.get(item.id, 0.0),
                        rankings.dense.get(chunk.id, 0.0),
                        sure if chunk is best else sure_of(chunk),
                    ),
                ),
                evidence.get(chunk.id),
                near if context_window else None,
            )
            for score, chunk in matched
        ]
        return SearchResult(
            item=item,
            relevance_score=best_score,
            confidence=sure,
            matched_fields=found.fields(),
            highlights=[
                highlight(c.content, marked, self.analyzer, spans=analyses(c.content).spans)
                for _, c in matched
            ],
            matched_chunks=views,
            context_chunks=self._context(item, matched, context_window, near),
            explanation=views[0].explanation,
            search_mode="chunk",
        )

    def _weighed(
        self,
        entries: list[tuple[float, str]],
        order: Callable[[tuple[float, str]], tuple[float, float, int]],
        factor: float,
        terms: list[str],
        idf: dict[str, float],
        evidence: dict[str, PassageEvidence],
        fused: dict[str, float],
        chunks: dict[str, KnowledgeChunk],
        analyses: TextAnalyses,
    ) -> list[tuple[float, KnowledgeChunk]]:
        """A shown document's best chunks, each with its passage evidence (the best
        ``passage_depth`` of the whole query have theirs already; ``evidence`` and
        ``fused`` gain the others'), best first, the best ``max_chunks_per_item`` kept."""
        config = self.config
        rescored = []
        for score, chunk_id in entries:
            if (config.coverage_weight or config.proximity_weight) and chunk_id not in evidence:
                content = chunks[chunk_id].content
                found = passage_evidence(terms, content, idf, self.analyzer, analyses(content))
                evidence[chunk_id] = found
                bonus = found.score(config.coverage_weight, config.proximity_weight)
                fused[chunk_id] += bonus
                score += bonus * factor
            rescored.append((score, chunk_id))
        rescored.sort(key=order)
        return [
            (score, chunks[chunk_id]) for score, chunk_id in rescored[: config.max_chunks_per_item]
        ]

    def item_boosts(self, item_ids: Iterable[str]) -> dict[str, Boost]:
        """The document and time boosts of the items that have any (read without text)."""
        config = self.config
        weights = config.doc_type_weights
        timed = config.recency_weight > 0 or config.decay_half_life > 0
        if not weights and not timed:
            return {}
        now = datetime.now(timezone.utc)
        boosts: dict[str, Boost] = {}
        for item_id, facts in self.storage.item_facts(item_ids).items():
            document = float(weights.get(facts.doc_type, 1.0)) if facts.doc_type else 1.0
            age = time_boost(
                age_days(facts.changed_at, now),
                config.recency_weight,
                config.recency_days,
                config.decay_half_life,
            ) if timed else 1.0  # fmt: skip
            if document != 1.0 or age != 1.0:
                boosts[item_id] = Boost(document, age)
        return boosts

    def _diversified(
        self, ranked: list[_Candidate], limit: int, loaded: dict[str, KnowledgeChunk]
    ) -> list[_Candidate]:
        """``ranked`` with its head reordered by maximal marginal relevance of best chunks."""
        head = ranked[: min(limit * _MMR_POOL, _MMR_POOL_MAX)]
        texts = self._read_chunks([candidate.chunks[0][1] for candidate in head], loaded)
        vectors = [
            Counter(self.analyzer.terms(texts[c.chunks[0][1]].content))
            if c.chunks[0][1] in texts
            else Counter()
            for c in head
        ]
        order = mmr_order([c.score for c in head], vectors, self.config.mmr_lambda, len(head))
        return [head[index] for index in order] + ranked[len(head) :]

    def rerank(
        self, query: str, results: list[SearchResult], reranker: Reranker
    ) -> list[SearchResult]:
        """The best ``rerank_depth`` results re-scored by ``reranker``, best first again.

        Each gets ``rerank_weight`` × the best score × its rerank score scaled to 0–1 among
        them (the rerank delta, in its explanation with its rank before and after). A
        reranker that fails leaves the order as it was: logged, and said in each head
        result's explanation (``details["rerank_error"]``).
        """
        head = results[: self.config.rerank_depth]
        if len(head) < 2:
            return results
        texts = self._rerank_texts(head)
        try:
            scores = [float(score) for score in reranker.rerank(query, texts)]
        except Exception as exc:  # a reranker service down must not fail the search
            return _not_reranked(results, head, f"reranking failed: {exc}")
        if len(scores) != len(head) or not all(map(math.isfinite, scores)):
            return _not_reranked(
                results,
                head,
                f"the reranker gave {len(scores)} finite scores for {len(head)} texts",
            )
        low, high = min(scores), max(scores)
        scale = self.config.rerank_weight * max(result.relevance_score for result in head)
        for rank, (result, score) in enumerate(zip(head, scores, strict=True), start=1):
            delta = scale * (score - low) / (high - low) if high > low else 0.0
            result.relevance_score += delta
            explained = result.explanation or ScoreExplanation()
            explained.rerank_delta = delta
            explained.rank_before_rerank = rank
            explained.details["rerank_score"] = score
            result.explanation = explained
            if result.matched_chunks:
                result.matched_chunks[0].score += delta
        head.sort(key=lambda result: -result.relevance_score)
        for rank, result in enumerate(head, start=1):
            if result.explanation is not None:
                result.explanation.rank_after_rerank = rank
        return head + results[len(head) :]

    def _rerank_texts(self, results: list[SearchResult]) -> list[str]:
        """What a reranker reads of each result: its best chunk under its heading, else
        (item level) the start of its document."""
        whole = self.storage.get_items(r.item.id for r in results if not r.matched_chunks)
        texts = []
        for result in results:
            if result.matched_chunks:
                best = result.matched_chunks[0]
                texts.append(f"{best.heading}\n{best.content}" if best.heading else best.content)
            else:
                item = whole.get(result.item.id)
                body = item.content[:_RERANK_CHARS] if item else ""
                texts.append(f"{result.item.title}\n{body}")
        return texts

    def _matched_view(
        self,
        chunk: KnowledgeChunk,
        score: float,
        item: KnowledgeItem,
        explained: ScoreExplanation,
        evidence: PassageEvidence | None,
        near: dict[tuple[str, int], KnowledgeChunk] | None = None,
    ) -> MatchedChunk:
        """A matched chunk with its passage, its evidence reference and its explanation."""
        view = MatchedChunk.from_chunk(chunk, score)
        path = _path(item)
        view.evidence_ref = evidence_ref(chunk.id, path, chunk.metadata, chunk.content)
        found = evidence is not None and evidence.coverage > 0
        unit = (evidence.start, evidence.end) if found and evidence else None
        passage = locate(chunk, unit, path, title=item.title)
        if passage.end_position >= chunk.end_position and heading_only(passage.text):
            # A heading whose body went to the next chunk: the body is the passage.
            following = (item.id, chunk.chunk_index + 1)
            if near is not None:  # the neighbours read for the context hold the next chunk
                body = [near[following]] if following in near else []
            else:
                after = self.storage.get_adjacent_chunks(item.id, chunk.chunk_index, 1)
                body = [c for c in after if c.chunk_index == following[1]]
            if body:
                passage = locate(body[0], (0, 1), path, title=item.title)
        view.passage = passage
        explained.path = path
        explained.lines = lines_label(chunk.metadata)
        page = chunk.metadata.get("page")
        explained.page = page if isinstance(page, int) else None
        view.explanation = explained
        return view

    def _known_item(self, hits: Sequence[ChunkHit], best_possible: float) -> bool:
        """Whether the best keyword chunk holds the query nearly as a whole (a known-item
        query): it is then ranked by keywords alone, as cosine similarity over the same
        words only adds the near-duplicates of the page sought."""
        gate = self.config.known_item_share
        return bool(gate and hits and best_possible > 0 and hits[0].score / best_possible >= gate)

    def _confidence(
        self,
        keyword: dict[str, float],
        chunk_id: str,
        content: str,
        terms: list[str],
        idf: dict[str, float],
        best_possible: float,
        evidence: dict[str, PassageEvidence],
        unknown: float,
        analyses: TextAnalyses,
    ) -> float:
        share = keyword.get(chunk_id, 0.0) / best_possible if keyword and best_possible else None
        found = evidence.get(chunk_id) or passage_evidence(
            terms, content, idf, self.analyzer, analyses(content)
        )
        return confidence(share, found, unknown)

    def _widened(
        self,
        query: str,
        terms: list[str],
        rankings: _Rankings,
        fused: dict[str, float],
        evidence: dict[str, PassageEvidence],
        idf: dict[str, float],
        best_possible: float,
        unknown: float,
        loaded: dict[str, KnowledgeChunk],
        analyses: TextAnalyses,
    ) -> dict[str, float] | None:
        """The query widened by its first hits' words (RM3), when it is on, the keyword
        engine ran, and the first pass found no confident match; else None."""
        config = self.config
        if not config.expansion_terms or not rankings.keyword or not fused:
            return None
        if len(set(terms)) < config.expansion_min_terms:
            return None
        languages = config.expansion_languages
        if languages and detect_language(query) not in languages:
            return None
        feedback_ids = list(rankings.keyword)[: config.feedback_chunks]
        first = next(iter(fused))
        chunks = self._read_chunks([*feedback_ids, first], loaded)
        top = chunks.get(first)
        if top is None:
            return None
        sure = self._confidence(
            rankings.keyword,
            top.id,
            top.content,
            terms,
            idf,
            best_possible,
            evidence,
            unknown,
            analyses,
        )
        if sure >= config.expansion_gate:
            return None
        feedback = [
            (rankings.keyword[chunk_id], analyses(chunks[chunk_id].content).terms)
            for chunk_id in feedback_ids
            if chunk_id in chunks
        ]
        return expanded_query(
            terms, feedback, config.expansion_terms, config.expansion_original_weight
        )

    def _read_chunks(
        self, chunk_ids: list[str], loaded: dict[str, KnowledgeChunk]
    ) -> dict[str, KnowledgeChunk]:
        """These chunks by id (those gone from SQLite absent), each read once per query."""
        missing = [chunk_id for chunk_id in chunk_ids if chunk_id not in loaded]
        if missing:
            loaded.update(self.storage.get_chunks(missing))
        return {chunk_id: loaded[chunk_id] for chunk_id in chunk_ids if chunk_id in loaded}

    def _with_passage_evidence(
        self, fused: dict[str, float], terms: list[str], ask: _ChunkQuery
    ) -> tuple[dict[str, float], dict[str, PassageEvidence]]:
        """``fused`` with the best chunks' passage evidence added (best first again), and
        that evidence by chunk id."""
        config = self.config
        if not fused or not (config.coverage_weight or config.proximity_weight):
            return fused, {}
        top = list(fused)[: config.passage_depth]
        evidence = {
            chunk_id: passage_evidence(
                terms, chunk.content, ask.idf, self.analyzer, ask.analyses(chunk.content)
            )
            for chunk_id, chunk in self._read_chunks(top, ask.loaded).items()
        }
        scores = dict(fused)
        for chunk_id, found in evidence.items():
            scores[chunk_id] += found.score(config.coverage_weight, config.proximity_weight)
        return dict(sorted(scores.items(), key=lambda entry: -entry[1])), evidence

    def _document_shares(
        self, terms: list[str], count: int, filters: SearchFilters
    ) -> dict[str, float]:
        """Each best item's whole-document BM25 over the best one's (when it is weighed)."""
        if not self.config.document_weight or not self.keyword_index.has_item_index():
            return {}
        hits = self.keyword_index.search_items(terms, count, filters)
        if not hits or hits[0].score <= 0:
            return {}
        return {hit.item_id: hit.score / hits[0].score for hit in hits}

    def _with_document_evidence(
        self,
        fused: dict[str, float],
        documents: dict[str, float],
        located: dict[str, tuple[str, int]],
    ) -> dict[str, float]:
        """``fused`` plus document_weight × the chunk's document share: the answer is
        usually in the document that matches the whole query best."""
        weight = self.config.document_weight
        if not fused or not documents:
            return fused
        scores = {
            chunk_id: score + weight * documents.get(located[chunk_id][0], 0.0)
            for chunk_id, score in fused.items()
        }
        return dict(sorted(scores.items(), key=lambda entry: -entry[1]))

    def _with_dense_evidence(
        self, fused: dict[str, float], dense: dict[str, float]
    ) -> dict[str, float]:
        """``fused`` plus dense_passage_weight × each chunk's embedding cosine to the query."""
        weight = self.config.dense_passage_weight
        if not fused or not dense or not weight:
            return fused
        scores = {chunk_id: s + weight * dense.get(chunk_id, 0.0) for chunk_id, s in fused.items()}
        return dict(sorted(scores.items(), key=lambda entry: -entry[1]))

    def _evidence_details(
        self,
        evidence: PassageEvidence | None,
        document_share: float,
        dense: float,
        sure: float | None,
    ) -> dict[str, Any]:
        """What the re-scoring added to the fusion (before the boosts)."""
        config = self.config
        passage = 0.0
        if evidence is not None:
            passage = evidence.score(config.coverage_weight, config.proximity_weight)
        details: dict[str, Any] = {
            "passage_bonus": passage,
            "document_bonus": config.document_weight * document_share,
        }
        if config.dense_passage_weight and dense:
            details["dense_bonus"] = config.dense_passage_weight * dense
        if sure is not None:
            details["confidence"] = sure
        if evidence is not None:
            details["passage_coverage"] = evidence.coverage
            details["passage_proximity"] = evidence.proximity
            details["passage_span"] = [evidence.start, evidence.end]  # the best line, in the chunk
        return details

    def _neighbours(
        self, page: list[_Candidate], chunks: dict[str, KnowledgeChunk], window: int
    ) -> dict[tuple[str, int], KnowledgeChunk]:
        """The ±window neighbours of every chunk of a page of candidates, by (item id,
        chunk index): one read for the page, not one per matched chunk."""
        if window <= 0:
            return {}
        positions = [
            (candidate.item_id, chunks[chunk_id].chunk_index + offset)
            for candidate in page
            for _, chunk_id in candidate.chunks
            if chunk_id in chunks
            for offset in range(-window, window + 1)
            if offset
        ]
        return self.storage.get_chunks_at(position for position in positions if position[1] >= 0)

    def _context(
        self,
        item: KnowledgeItem,
        matched: list[tuple[float, KnowledgeChunk]],
        window: int,
        near: dict[tuple[str, int], KnowledgeChunk],
    ) -> list[MatchedChunk]:
        """The ±window neighbours of the matched chunks, same item only, in document order
        (``near``: the neighbours read for the page)."""
        if window == 0:
            return []
        matched_indexes = {chunk.chunk_index for _, chunk in matched}
        neighbours: dict[int, KnowledgeChunk] = {}
        for _, chunk in matched:
            for index in range(chunk.chunk_index - window, chunk.chunk_index + window + 1):
                neighbour = near.get((item.id, index))
                if neighbour is not None and index not in matched_indexes:
                    neighbours[index] = neighbour
        views = []
        for index in sorted(neighbours):
            chunk = neighbours[index]
            view = MatchedChunk.from_chunk(chunk)
            view.evidence_ref = evidence_ref(chunk.id, _path(item), chunk.metadata, chunk.content)
            views.append(view)
        return views

    def _item_search(
        self,
        query: str,
        terms: list[str],
        limit: int,
        filters: SearchFilters,
        mode: str,
        min_score: float | None,
        min_confidence: float | None,
    ) -> list[SearchResult]:
        """The item-level fallback (R5.5): whole documents, no chunk lists (R6.4); the
        confidence is the item's BM25 over the best the query could reach."""
        count = self._candidate_count(limit)
        rankings = self._rankings(
            lambda: self.keyword_index.search_items(terms, count, filters),
            lambda: self.semantic_searcher.search_items(terms, count, 0.0, filters),
            lambda hit: hit.item_id,
            mode,
            self._dense(
                query,
                mode,
                lambda: self.dense_index.search_items(query, count, 0.0, filters),  # type: ignore[union-attr]
            ),
        )
        boosts = self.item_boosts(rankings.fused)
        fused = {
            item_id: score * (boosts[item_id].factor if item_id in boosts else 1.0)
            for item_id, score in rankings.fused.items()
        }
        ranked = sorted(fused.items(), key=lambda entry: -entry[1])
        if min_score is not None:
            ranked = [(item_id, score) for item_id, score in ranked if score >= min_score]
        item_idf = self.keyword_index.idf(terms, items=True)
        best_possible = self.keyword_index.best_possible_score(terms, item_idf)
        unknown = unseen_share(terms, item_idf, self.keyword_index.unseen(terms, items=True))
        results: list[SearchResult] = []
        for start in range(0, len(ranked), limit):
            page = ranked[start : start + limit]
            items = self.storage.get_items(item_id for item_id, _ in page)
            for item_id, score in page:
                item = items.get(item_id)
                if item is None:
                    continue
                sure = confidence(
                    rankings.keyword.get(item_id, 0.0) / best_possible
                    if rankings.keyword and best_possible > 0
                    else None,
                    None,
                    unknown,
                )
                if min_confidence is not None and sure < min_confidence:
                    continue
                found = FieldMatches(
                    self.analyzer, terms, {"title": item.title, "content": item.content}
                )
                explained = rankings.explain(
                    item_id, found.terms("title", "content"), boost=boosts.get(item_id)
                )
                explained.path = _path(item)
                results.append(
                    SearchResult(
                        item=ResultItem.of_item(item),
                        relevance_score=score,
                        confidence=sure,
                        matched_fields=found.fields(),
                        highlights=[highlight(item.content, terms, self.analyzer)],
                        explanation=explained,
                        search_mode="item",
                    )
                )
                if len(results) == limit:
                    return results
        return results


def _not_reranked(
    results: list[SearchResult], head: list[SearchResult], error: str
) -> list[SearchResult]:
    """``results`` as they were, each of the ``head`` saying why no rerank happened."""
    logger.warning("%s; results left in their order", error)
    for result in head:
        if result.explanation is None:
            result.explanation = ScoreExplanation()
        result.explanation.details["rerank_error"] = error
    return results


def _check_request(query: str, limit: int, context_window: int, level: str, mode: str) -> None:
    if not isinstance(query, str):
        raise QueryError(f"query must be a string, got {type(query).__name__}")
    for name, value in (("limit", limit), ("context_window", context_window)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise QueryError(f"{name} must be an integer >= 0, got {value!r}")
    if level not in LEVELS:
        raise QueryError(f"level must be one of {LEVELS}, got {level!r}")
    if mode not in MODES:
        raise QueryError(f"mode must be one of {MODES}, got {mode!r}")
