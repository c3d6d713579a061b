"""TF-IDF cosine over chunks and items: the semantic index of the PostgreSQL backend.

The same scores as the local :class:`~knowledge_agent.backends.local.tfidf.index.
SemanticSearcher`, from the postings of :mod:`.postings` (``w_vec``: the float32 tf weight
``1 + log(count)`` of each term of a document's vector)::

    idf    = float32(log((1 + N) / (1 + df)) + 1)     N, df over the level's live documents
    q_t    = tf(query count) · idf_t                    query terms no document holds dropped
    score  = Σ_t q_t · w_dt · idf_t / (‖d‖ · ‖q‖)       clipped to [0, 1]
    ‖d‖    = sqrt(Σ_t (w_dt² · idf_t²))                 over every term of the document

Norms depend on the idf of every term of a document, which every write changes. They are
stored in ``kw_documents.norm`` by :meth:`PostgresTfidfIndex.refresh_norms` (one pass over
the postings, recording the statistics' change counts it reflects, at the end of a bulk
write); a search reads them when no write came since. A search that finds them stale
computes them from the documents' vectors this process keeps (:mod:`.vector_mirror`); one
ranked in SQL refreshes them first, unless a writer holds the statistics (it never waits for
one) or the database is a standby: it then computes its candidates' norms from their
postings, exact but slow (a pass over every posting of every document holding a query
term). Either way the scores are those of the statistics the search's snapshot sees.
``min_similarity`` and the filters apply before the top-k; ties are ranked by document
number, ``per_item`` caps the chunks of one item.

The cosines are computed in this process from the query terms' postings and every
document's norm, both read once per generation (:mod:`.client_rank`); queries of very many
postings, and bases too large to keep their vectors while the norms are stale, are ranked in
SQL.

Differences from the local index, both below the scores' float32 precision in practice: the
local index hashes terms into ``n_features`` columns, so two terms sharing a column count as
one there (here terms are never merged), and its norms are summed in float32.
"""

from __future__ import annotations

import functools
import logging
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from knowledge_agent.analysis import TextAnalyzer
from knowledge_agent.backends.postgres.client_rank import (
    MAX_CLIENT_NORMS,
    Ranked,
    client_sized,
    cosine_scores,
    ranked_here,
    stored_norms,
)
from knowledge_agent.backends.postgres.filters import filter_condition
from knowledge_agent.backends.postgres.indexes import PostingsIndex, load_psycopg
from knowledge_agent.backends.postgres.postings import (
    BATCH_SPAN,
    CHUNK_LEVEL,
    ITEM_LEVEL,
    Pair,
    PostingsWriter,
)
from knowledge_agent.backends.postgres.ranked import ranked_hits, ranked_sql
from knowledge_agent.backends.postgres.statistics import Statistics, StatsState
from knowledge_agent.backends.postgres.term_postings import TermPostings
from knowledge_agent.backends.postgres.vector_mirror import VectorMirror
from knowledge_agent.errors import SearchIndexError
from knowledge_agent.search.analysed_batch import AnalysedBatch
from knowledge_agent.search.config import TfidfConfig
from knowledge_agent.search.filters import SearchFilters
from knowledge_agent.search.hits import ChunkHit, ItemHit
from knowledge_agent.search.query_terms import analysed

if TYPE_CHECKING:
    import psycopg

__all__ = ["PostgresTfidfIndex", "TfidfRefit", "refresh_norms"]

logger = logging.getLogger(__name__)

_ATTEMPTS = 5  # rankings run again when a write changed the statistics under them


_STORED_NORMS = """
    dots AS (
        SELECT p.doc, p.kb, sum(p.w_vec::float8 * q.coef) AS dot
        FROM unnest(%(terms)s::text[], %(coefs)s::float8[]) AS q(term, coef)
        JOIN kw_posting_rows p ON p.level = %(level)s AND p.term = q.term
        {join}
        WHERE {where}
        GROUP BY p.doc, p.kb
    ),
    scored AS (
        SELECT c.kb, c.doc,
            least(greatest(c.dot / (n.norm * %(qnorm)s), 0.0::float8), 1.0::float8) AS score
        FROM dots c JOIN kw_documents n ON n.kb = c.kb AND n.doc = c.doc
    )
"""

# Every step is a lookup by key or a pass over its input, whatever the planner estimates:
# the query's weights and the candidates' idf² are JSON maps, not joins.
_QUERY_TIME_NORMS = """
    cand AS MATERIALIZED (
        SELECT DISTINCT p.doc, p.kb FROM kw_posting_rows p
        {join}
        WHERE p.level = %(level)s AND p.term = ANY(%(terms)s::text[]) AND {where}
    ),
    held AS MATERIALIZED (
        SELECT p.kb, p.doc, p.term, p.w_vec
        FROM cand c
        JOIN kw_documents e ON e.kb = c.kb AND e.doc = c.doc
        CROSS JOIN LATERAL unnest(string_to_array(e.terms, ' ')) AS t(term)
        JOIN kw_posting_rows p
            ON p.level = %(level)s AND p.term = t.term AND p.kb = c.kb
            AND p.seg = coalesce(e.seg, c.doc / {span}) AND p.doc = c.doc
        WHERE p.w_vec > 0
    ),
    weights AS MATERIALIZED (
        SELECT jsonb_object_agg(term, idf * idf) AS idf2 FROM (
            SELECT t.term, ((ln((1.0::float8 + %(n)s::float8)
                / (1.0::float8 + sum(t.df_vec)::float8)) + 1.0::float8)::real)::float8 AS idf
            FROM kw_postings t
            WHERE t.level = %(level)s AND t.term IN (SELECT DISTINCT term FROM held)
            GROUP BY t.term
        ) x
    ),
    scored AS (
        SELECT h.kb, h.doc, least(greatest(
            sum(h.w_vec::float8 * coalesce((%(coef)s::jsonb ->> h.term)::float8, 0.0))
            / (sqrt(sum((h.w_vec * h.w_vec)::float8 * (w.idf2 ->> h.term)::float8))
               * %(qnorm)s),
            0.0::float8), 1.0::float8) AS score
        FROM held h CROSS JOIN weights w
        GROUP BY h.doc, h.kb
    )
"""

# Every document's norm under the statistics the statement sees, and the change counts
# they reflect recorded in the same statement (one snapshot: a write committed meanwhile
# leaves its counts ahead, so the norms read as stale).
_REFRESH_NORMS = """
    WITH n AS (SELECT level, sum(docs) AS n FROM kw_stats GROUP BY level),
    idf AS (
        SELECT t.level, t.term, ((ln((1.0::float8 + n.n::float8)
            / (1.0::float8 + sum(t.df_vec)::float8)) + 1.0::float8)::real)::float8 AS idf
        FROM kw_postings t JOIN n ON n.level = t.level
        GROUP BY t.level, t.term, n.n
    ),
    norms AS (
        -- Each row of postings meets its term's idf once, then unnests two of its arrays.
        SELECT p.kb, u.doc, sqrt(sum((u.w * u.w)::float8 * (i.idf * i.idf))) AS norm
        FROM kw_postings p JOIN idf i ON i.level = p.level AND i.term = p.term
        CROSS JOIN LATERAL unnest(p.doc, p.w_vec) AS u(doc, w)
        WHERE u.w > 0
        GROUP BY p.kb, u.doc
    ),
    written AS (
        UPDATE kw_documents d SET norm = norms.norm FROM norms
        WHERE d.kb = norms.kb AND d.doc = norms.doc
    )
    UPDATE kw_stats SET norms_at = changes
"""


def _cosine_sql(condition: str, per_item: bool, stored_norms: bool) -> str:
    join = "JOIN kw_documents d ON d.kb = p.kb AND d.doc = p.doc" if condition else ""
    where = "p.w_vec > 0" + (f" AND {condition}" if condition else "")
    scoring = (_STORED_NORMS if stored_norms else _QUERY_TIME_NORMS).format(
        join=join, where=where, span=BATCH_SPAN
    )
    return ranked_sql(scoring, "score > 0 AND score >= %(min)s", per_item)


class TfidfRefit:
    """A rebuild of the postings tables in one transaction, fed batch by batch and committed
    by :meth:`finish`; the index's connection is held (other calls wait) until then."""

    def __init__(self, index: PostgresTfidfIndex) -> None:
        self._index = index
        self._db = index._db
        # This connection to the end: another one would not be in the transaction.
        self._conn = self._db.live("rebuild the TF-IDF index")
        self._db.lock.acquire()
        self._tx: Any = None
        try:
            self._tx = self._conn.transaction()
            self._tx.__enter__()
            self._run("rebuild the TF-IDF index", lambda: index.writer.clear(self._conn))
        except BaseException:
            self.cancel()
            raise

    def _run(self, doing: str, step: Callable[[], None]) -> None:
        if self._tx is None:
            raise SearchIndexError("the rebuild is over")
        try:
            step()
        except self._db.error as exc:
            self.cancel()
            raise SearchIndexError(f"cannot {doing}: {exc}") from exc

    def add(self, upserts: Sequence[Pair] | AnalysedBatch) -> None:
        self._run(
            "rebuild the TF-IDF index", lambda: self._index.writer.replace(self._conn, upserts)
        )

    def finish(self) -> int:
        """Commit the new rows; the number of chunks."""
        self._run("rebuild the TF-IDF index", lambda: self._tx.__exit__(None, None, None))
        self._tx = None
        self._db.lock.release()
        return self._index.chunk_count()

    def cancel(self) -> None:
        """Leave the index as it was (if :meth:`finish` has not committed); idempotent."""
        if self._tx is None:
            return
        tx, self._tx = self._tx, None
        try:
            rollback = self._db.rollback
            tx.__exit__(rollback, rollback(), None)
        finally:
            self._db.lock.release()


class PostgresTfidfIndex(PostingsIndex):
    """TF-IDF cosine search over chunk and item vectors in a PostgreSQL database.

    ``source``: a database URL, a callable returning a connection, or a connection
    (:class:`~.indexes.PostingsIndex`). ``config`` fixes the vectors' weighting, as the
    postings hold it; changing it needs a rebuild.
    """

    _label = "TF-IDF index"

    #: Whether a search ranked in SQL that finds the stored norms stale refreshes them
    #: first, if no writer holds the statistics (otherwise it computes its candidates').
    refresh_stale_norms: bool = True

    def __init__(
        self,
        source: str | psycopg.Connection | Callable[[], psycopg.Connection],
        analyzer: TextAnalyzer | None = None,
        config: TfidfConfig | None = None,
        *,
        statistics: Statistics | None = None,
    ) -> None:
        self.config = config if config is not None else TfidfConfig()
        self._mirrors: dict[int, VectorMirror] = {}
        analyzer = analyzer if analyzer is not None else TextAnalyzer()
        super().__init__(source, PostingsWriter(analyzer, tfidf=self.config), statistics=statistics)

    def refit(self) -> TfidfRefit:
        """A rebuild fed batch by batch (see :class:`TfidfRefit`)."""
        return TfidfRefit(self)

    def has_chunks(self) -> bool:
        """True when the index holds at least one chunk."""
        return self.chunk_count() > 0

    def search_chunks(
        self,
        query: Sequence[str],
        /,
        top_k: int,
        min_similarity: float = 0.0,
        filters: SearchFilters | None = None,
        *,
        per_item: int | None = None,
    ) -> list[ChunkHit]:
        """The ``top_k`` chunks most similar to the analysed ``query`` terms (or the query
        text, analysed here as the engine does), best first; at most ``per_item`` of one
        item when it is given."""
        return [
            ChunkHit(chunk_id=key, item_id=item_id, chunk_index=index, score=score)
            for key, item_id, index, score in self._search(
                CHUNK_LEVEL, query, top_k, min_similarity, filters, per_item
            )
        ]

    def search_items(
        self,
        query: Sequence[str],
        /,
        top_k: int,
        min_similarity: float = 0.0,
        filters: SearchFilters | None = None,
    ) -> list[ItemHit]:
        """The ``top_k`` whole items (title + content) most similar to ``query``."""
        return [
            ItemHit(item_id=key, score=score)
            for key, _, _, score in self._search(
                ITEM_LEVEL, query, top_k, min_similarity, filters, None
            )
        ]

    def _search(
        self,
        level: int,
        terms: Sequence[str] | None,
        top_k: int,
        min_similarity: float,
        filters: SearchFilters | None,
        per_item: int | None,
    ) -> list[tuple[str, str, int, float]]:
        if top_k <= 0 or terms is None:
            return []
        terms = analysed(terms, self.analyzer)  # query text is analysed as the engine does
        counts = Counter(term for term in terms if isinstance(term, str) and term)
        if not counts:
            return []
        threshold = float(min_similarity) if min_similarity == min_similarity else 0.0  # NaN
        # As the keyword index reads (:meth:`.keyword.PostgresKeywordIndex._search`): the
        # cached statistics, checked against the ranking statement's generation.
        names = list(counts)
        for attempt in range(_ATTEMPTS):
            last = attempt == _ATTEMPTS - 1
            reading = self._db.snapshot if last else self._db.cursor
            with reading("search the TF-IDF index") as cur:
                state = self.statistics.read(cur, names, fresh=last)
                stats = state.level(level)
                n = stats.docs
                if n == 0:
                    return []
                df = {
                    term: found
                    for term in names
                    if (found := state.frequencies(term, level)[2]) > 0
                }
                if not df:
                    return []
                found_filter = filter_condition(cur, filters, level)
                if found_filter is None:
                    return []
                condition, filter_params = found_filter
                params = self._params(n, df, counts)
                mirror = self._mirrors.setdefault(level, VectorMirror(level))
                here = (
                    n <= MAX_CLIENT_NORMS
                    and client_sized(state, level, params["terms"])
                    and (stats.norms_fresh or not mirror.too_large)
                )
                if (
                    not here
                    and not stats.norms_fresh
                    and self.refresh_stale_norms
                    and not last
                    and self.refresh_norms(wait=False)
                ):
                    continue  # the refresh moved the generation on: rank on its norms
                if here:
                    # Stale stored norms are computed from the vectors kept in this process.
                    norms = (
                        functools.partial(stored_norms, level=level)
                        if stats.norms_fresh
                        else mirror.norms
                    )
                    hits = ranked_here(
                        cur,
                        self.statistics,
                        state,
                        level,
                        params["terms"],
                        functools.partial(self._cosines, cur, state, norms, params, threshold),
                        int(top_k),
                        per_item,
                        found_filter,
                    )
                else:
                    params.update(
                        level=level, min=threshold, limit=int(top_k), cap=per_item, **filter_params
                    )
                    sql = _cosine_sql(condition, per_item is not None, stats.norms_fresh)
                    hits = ranked_hits(cur, sql, params, self.statistics, state)
                if hits is not None:
                    return hits
        raise SearchIndexError("the TF-IDF index changed within one snapshot")  # never

    @staticmethod
    def _cosines(
        cur: psycopg.Cursor[Any],
        state: StatsState,
        norms_of: Callable[[psycopg.Cursor[Any], StatsState], tuple[np.ndarray, np.ndarray] | None],
        params: dict[str, Any],
        minimum: float,
        postings: list[TermPostings],
    ) -> Ranked | None:
        """The ranking of :func:`_cosine_sql` from the query terms' postings and the norms
        ``norms_of`` gives; None when those were of another generation than ``state``'s."""
        norms = norms_of(cur, state)
        if norms is None:
            return None
        return cosine_scores(postings, params["coefs"], params["qnorm"], norms, minimum)

    def _params(self, n: int, df: dict[str, int], counts: Counter[str]) -> dict[str, Any]:
        """The query vector's parameters: its terms that some document holds, their
        coefficients and its norm."""
        from psycopg.types.json import Jsonb

        names = list(df)
        frequency = np.array([counts[t] for t in names], np.float64)
        idf = (
            np.log((1.0 + n) / (1.0 + np.array([df[t] for t in names], np.float64))) + 1.0
        ).astype(np.float32)
        idf64 = idf.astype(np.float64)
        tf = 1.0 + np.log(frequency) if self.config.sublinear_tf else frequency
        query = tf * idf64
        coef = (query * idf64).tolist()
        return {
            "terms": names,
            "coefs": coef,
            "coef": Jsonb(dict(zip(names, coef, strict=True))),
            "qnorm": float(np.sqrt(query @ query)),
            "n": n,
        }

    # -- norms ---------------------------------------------------------------------------

    def _norms_fresh(self) -> bool:
        with self._db.cursor("read the TF-IDF index") as cur:
            return self.statistics.read(cur).norms_fresh

    def refresh_norms(self, *, wait: bool = True) -> bool:
        """Store every document's norm under the current statistics (one pass over the
        postings), so that searches read the norms instead of computing their candidates'.

        It waits for writers (it takes the statistics' locks); without ``wait`` it gives
        up at once, returning False, when a writer holds them or the database is a
        read-only standby.
        """
        with self._db.lock:
            refreshed = refresh_norms(self._db.conn, wait=wait)
        if refreshed:
            self.statistics.forget()  # the norms moved the generation on
        return refreshed


def refresh_norms(conn: psycopg.Connection, *, wait: bool = True) -> bool:
    """:meth:`PostgresTfidfIndex.refresh_norms` on ``conn`` (in autocommit mode)."""
    psycopg = load_psycopg()
    lock = "FOR UPDATE" if wait else "FOR UPDATE NOWAIT"
    try:
        with conn.transaction():
            conn.execute(f"SELECT 1 FROM kw_stats ORDER BY kb, level {lock}")
            # The planner takes the postings unnested for a few rows and sorts them by
            # document (a third of the statement, on disk past work_mem): one hash table of
            # the documents' sums is what it needs (a few MB per 100,000 documents).
            conn.execute("SET LOCAL enable_sort = off")
            conn.execute("SET LOCAL work_mem = '64MB'")
            conn.execute(_REFRESH_NORMS)
    except (psycopg.errors.LockNotAvailable, psycopg.errors.ReadOnlySqlTransaction):
        if wait:
            raise
        logger.debug("TF-IDF norms not refreshed: the statistics are busy or read-only")
        return False
    except psycopg.Error as exc:
        raise SearchIndexError(f"cannot refresh the TF-IDF norms: {exc}") from exc
    return True
