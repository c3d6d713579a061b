"""BM25F over chunks and items: the keyword index of the PostgreSQL backend.

The same scores as the local Whoosh index (:class:`~knowledge_agent.backends.local.keyword.
index.SearchIndexManager`), computed from the tables of :mod:`.postings`:

* a query is a bag of analysed terms (or term → weight); each (term, field) with a field
  boost above 0 is a clause of weight ``boost × count``;
* a clause scores ``idf × tf·(K1+1) / (tf + K1·(1 − B + B·fl/avgfl)) × weight`` with
  ``K1 = 1.2``, ``B = 0.75``, Lucene's idf ``log(1 + (N − df + 0.5)/(df + 0.5))``, ``fl`` the
  field length as Whoosh stores it (its length byte) and ``avgfl`` the total field length
  over ``N``; idf and the average lengths come from the statistics tables (no scan), the
  score of every matching document from its postings, summed in clause order as Whoosh sums
  them;
* filters restrict the documents inside the query, before ranking; ties are ranked by
  document number (indexing order); ``per_item`` keeps at most that many chunks of one item;
* a search's statistics and postings are those of one generation of the tables
  (:mod:`.statistics`), even while writers commit.

The scores are computed in this process from the query terms' postings, read as arrays once
per generation (:mod:`.client_rank`); a query whose terms have very many postings is ranked
by one SQL statement instead (:func:`_score_sql`), with the same scores.

Statistics count live documents only. The local index counts documents deleted since its
segments were last merged until they are, so after deletions the two can differ slightly
until the local index merges; freshly built indexes agree.

Writes are transactions (:class:`~.postings.PostingsWriter`): there is no journal to
replay, so ``applied_seq`` is always 0 (:class:`~.indexes.PostingsIndex`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from knowledge_agent.analysis import TextAnalyzer
from knowledge_agent.backends.postgres.client_rank import bm25_scores, client_sized, ranked_here
from knowledge_agent.backends.postgres.filters import filter_condition
from knowledge_agent.backends.postgres.indexes import PostingsIndex
from knowledge_agent.backends.postgres.postings import (
    CHUNK_LEVEL,
    ITEM_LEVEL,
    Pair,
    PostingsWriter,
)
from knowledge_agent.backends.postgres.ranked import ranked_hits, ranked_sql
from knowledge_agent.backends.postgres.statistics import Statistics, StatsState
from knowledge_agent.errors import ConfigError, QueryError, SearchIndexError
from knowledge_agent.search.analysed_batch import AnalysedBatch, grouped
from knowledge_agent.search.config import KeywordIndexConfig, TfidfConfig
from knowledge_agent.search.filters import SearchFilters
from knowledge_agent.search.hits import ChunkHit, ItemHit
from knowledge_agent.search.query_terms import analysed, term_weights

if TYPE_CHECKING:
    import psycopg

__all__ = ["DEFAULT_FIELD_BOOSTS", "PostgresKeywordIndex"]

DEFAULT_FIELD_BOOSTS: Mapping[str, float] = {"title": 0.0, "heading": 0.0, "content": 1.0}
K1 = 1.2
B = 0.75
_ATTEMPTS = 5  # rankings run again when a write changed the statistics under them


def lucene_idf(n: int, df: int) -> float:
    return math.log(1.0 + (n - df + 0.5) / (df + 0.5))


# The head field is the chunk's heading, the item's title; both precede content, as in the
# local index's clause order.
_HEAD_FIELD = {CHUNK_LEVEL: "heading", ITEM_LEVEL: "title"}

_CLAUSE = "q.idf{s} * ((p.tf{s} * %(k1p)s) / (p.tf{s} + %(k1)s * (%(omb)s + %(b)s * p.norm_len{s} / %(avg{s})s))) * q.boost{s}"  # noqa: E501


def _score_sql(head: bool, content: bool, condition: str, per_item: bool) -> str:
    """The scoring query for the active fields, a filter condition on ``d`` and a cap
    (:func:`.ranked.ranked_sql`)."""
    parts, matched = [], []
    if head:
        parts.append(f"CASE WHEN p.tf_head > 0 THEN {_CLAUSE.format(s='_head')} ELSE 0 END")
        matched.append("p.tf_head > 0")
    if content:
        parts.append(f"CASE WHEN p.tf > 0 THEN {_CLAUSE.format(s='')} ELSE 0 END")
        matched.append("p.tf > 0")
    join = "JOIN kw_documents d ON d.kb = p.kb AND d.doc = p.doc" if condition else ""
    where = f"({' OR '.join(matched)})" + (f" AND {condition}" if condition else "")
    ctes = f"""
        q AS (
            SELECT * FROM unnest(%(terms)s::text[], %(ord)s::int4[], %(idf)s::float8[],
                %(boost)s::float8[], %(idf_head)s::float8[], %(boost_head)s::float8[])
                AS q(term, ord, idf, boost, idf_head, boost_head)
        ),
        scored AS MATERIALIZED (
            SELECT p.kb, p.doc, sum({" + ".join(parts)} ORDER BY q.ord) AS score
            FROM q JOIN kw_posting_rows p ON p.level = %(level)s AND p.term = q.term
            {join}
            WHERE {where}
            GROUP BY p.doc, p.kb
        )"""
    return ranked_sql(ctes, "", per_item)


class PostgresKeywordIndex(PostingsIndex):
    """The keyword (BM25F) index over chunks and items in a PostgreSQL database.

    ``source``: a database URL, a callable returning a connection, or a connection
    (:class:`~.indexes.PostingsIndex`). ``tfidf`` is how the shared postings weigh TF-IDF
    vectors when this index writes them.
    """

    _label = "keyword index"

    #: Items per batch a rebuild writes (all batches commit together).
    rebuild_commit_every: int = 5_000

    def __init__(
        self,
        source: str | psycopg.Connection | Callable[[], psycopg.Connection],
        analyzer: TextAnalyzer | None = None,
        config: KeywordIndexConfig | None = None,
        *,
        tfidf: TfidfConfig | None = None,
        statistics: Statistics | None = None,
    ) -> None:
        config = config if config is not None else KeywordIndexConfig()
        boosts = dict(DEFAULT_FIELD_BOOSTS)
        if config.field_boosts:
            unknown = set(config.field_boosts) - set(DEFAULT_FIELD_BOOSTS)
            if unknown:
                raise ConfigError(f"field_boosts: unknown fields {sorted(unknown)}")
            boosts.update({name: float(value) for name, value in config.field_boosts.items()})
        if any(value < 0 for value in boosts.values()):
            raise ConfigError(f"field_boosts must not be negative, got {boosts}")
        self.field_boosts: dict[str, float] = boosts
        analyzer = analyzer if analyzer is not None else TextAnalyzer()
        super().__init__(source, PostingsWriter(analyzer, tfidf=tfidf), statistics=statistics)

    def rebuild(self, pairs: Iterable[Pair | AnalysedBatch]) -> int:
        """Replace everything with ``pairs`` in one transaction; the number of chunks."""
        with self._db.transaction("rebuild the keyword index") as conn:
            self.writer.clear(conn)
            for group in grouped(pairs, self.rebuild_commit_every):
                self.writer.replace(conn, group)
        return self.chunk_count()

    # -- reading -----------------------------------------------------------------------------

    def search_chunks(
        self,
        terms: Sequence[str] | Mapping[str, float],
        limit: int,
        filters: SearchFilters | None = None,
        *,
        per_item: int | None = None,
    ) -> list[ChunkHit]:
        """The best ``limit`` chunks for analysed ``terms`` (or term → weight, or the query
        text, analysed here as the engine does) among those ``filters`` allow; at most
        ``per_item`` of one item when it is given."""
        return [
            ChunkHit(chunk_id=key, item_id=item_id, chunk_index=int(index), score=float(score))
            for key, item_id, index, score in self._search(
                CHUNK_LEVEL, terms, limit, filters, per_item
            )
        ]

    def search_items(
        self, terms: Sequence[str], limit: int, filters: SearchFilters | None = None
    ) -> list[ItemHit]:
        """The best ``limit`` items (whole-document BM25F) for analysed ``terms``."""
        return [
            ItemHit(item_id=key, score=float(score))
            for key, _, _, score in self._search(ITEM_LEVEL, terms, limit, filters, None)
        ]

    def _search(
        self,
        level: int,
        terms: Sequence[str] | Mapping[str, float],
        limit: int,
        filters: SearchFilters | None,
        per_item: int | None,
    ) -> list[tuple[str, str, int, float]]:
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise QueryError(f"limit must be an integer, got {limit!r}")
        weights = term_weights(analysed(terms, self.analyzer))
        if filters is not None and not isinstance(filters, SearchFilters):
            raise QueryError(f"filters must be SearchFilters, got {type(filters).__name__}")
        head_boost = self.field_boosts[_HEAD_FIELD[level]]
        content_boost = self.field_boosts["content"]
        if not weights or limit < 1 or (head_boost <= 0 and content_boost <= 0):
            return []
        names = list(weights)
        # The statistics come from the cache (:mod:`.statistics`); the ranking statement says
        # whether the postings it read are of their generation, else it runs again (a write
        # committed in between); the last attempt reads both in one snapshot.
        for attempt in range(_ATTEMPTS):
            last = attempt == _ATTEMPTS - 1
            reading = self._db.snapshot if last else self._db.cursor
            with reading("search the keyword index") as cur:
                state = self.statistics.read(cur, names, fresh=last)
                stats = state.level(level)
                if stats.docs == 0:
                    return []
                found = filter_condition(cur, filters, level)
                if found is None:
                    return []
                condition, filter_params = found
                params = self._params(state, level, weights, head_boost, content_boost)
                head, content = head_boost > 0, content_boost > 0
                if client_sized(state, level, names):
                    hits = ranked_here(
                        cur,
                        self.statistics,
                        state,
                        level,
                        names,
                        functools.partial(bm25_scores, params=params, head=head, content=content),
                        limit,
                        per_item,
                        found,
                        head=head,
                    )
                else:
                    params.update(limit=limit, cap=per_item, **filter_params)
                    sql = _score_sql(head, content, condition, per_item is not None)
                    hits = ranked_hits(cur, sql, params, self.statistics, state)
                if hits is not None:
                    return hits
        raise SearchIndexError("the keyword index changed within one snapshot")  # never

    def _params(
        self,
        state: StatsState,
        level: int,
        weights: Mapping[str, float],
        head_boost: float,
        content_boost: float,
    ) -> dict[str, Any]:
        """The scoring query's parameters (but the limit, cap and filters) from ``state``."""
        stats = state.level(level)
        n = stats.docs
        names = list(weights)
        df = [state.frequencies(term, level) for term in names]
        return {
            "terms": names,
            "ord": list(range(len(names))),
            "idf": [lucene_idf(n, found[0]) for found in df],
            "boost": [content_boost * weights[t] for t in names],
            "idf_head": [lucene_idf(n, found[1]) for found in df],
            "boost_head": [head_boost * weights[t] for t in names],
            "level": level,
            "k1": K1,
            "k1p": K1 + 1,
            "b": B,
            "omb": 1 - B,
            "avg": (stats.length / n) or 1,
            "avg_head": (stats.length_head / n) or 1,
        }

    def idf(self, terms: Iterable[str], *, items: bool = False) -> dict[str, float]:
        """The BM25 idf of each term over the chunks' (or items') ``content``; a term no text
        has gets the idf of frequency zero, the highest."""
        names = list(dict.fromkeys(t for t in terms if isinstance(t, str)))
        level = ITEM_LEVEL if items else CHUNK_LEVEL
        with self._db.cursor("read the keyword index") as cur:
            state = self.statistics.read(cur, names)
        n = state.level(level).docs
        return {term: lucene_idf(n, state.frequencies(term, level)[0]) for term in names}

    def unseen(self, terms: Iterable[str], *, items: bool = False) -> set[str]:
        """The terms no chunk (or item) holds in any of its text fields."""
        names = list({t for t in terms if isinstance(t, str)})
        if not names:
            return set()
        level = ITEM_LEVEL if items else CHUNK_LEVEL
        with self._db.cursor("read the keyword index") as cur:
            state = self.statistics.read(cur, names)
        return {term for term in names if sum(state.frequencies(term, level)[:2]) == 0}

    def best_possible_score(self, terms: Sequence[str], idf: Mapping[str, float]) -> float:
        """The BM25 a text would score if it held every term as often as counts can help."""
        saturated = K1 + 1
        boost = self.field_boosts["content"]
        return sum(count * idf.get(term, 0.0) for term, count in term_weights(terms).items()) * (
            saturated * boost
        )

    # -- status ------------------------------------------------------------------------------

    def has_chunk_index(self) -> bool:
        """True when the index holds at least one chunk."""
        return self.chunk_count() > 0

    def has_item_index(self) -> bool:
        """True when the index holds at least one item."""
        return self.item_count() > 0
