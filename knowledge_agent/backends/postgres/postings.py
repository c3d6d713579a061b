"""The keyword and TF-IDF indexes' tables in PostgreSQL, and the writer that fills them.

One set of tables serves BM25F (:mod:`.keyword`) and TF-IDF cosine (:mod:`.vectors`), at two
levels: chunks (level 0) and whole items (level 1). The terms are the shared
:class:`~knowledge_agent.analysis.TextAnalyzer`'s, counted from an
:class:`~knowledge_agent.search.analysed_batch.AnalysedBatch`, so each document holds exactly
the terms the local Whoosh and TF-IDF indexes hold for it:

``kw_documents``
    one row per chunk or item: ``doc`` (its number, in indexing order: ties are ranked by
    it, as Whoosh ranks them by docnum; see ``BATCH_SPAN``), ``key`` (chunk or item id),
    ``item_id``, ``chunk_index``, the filter columns (``source_type``, ``doc_type``,
    ``language``, ``path``, ``updated_at`` in POSIX seconds), the field lengths in terms:
    ``len`` (the ``content`` field) and ``len_head`` (``heading`` for a chunk, ``title`` for
    an item), ``terms`` (its distinct terms, space-separated: where its postings are, so
    the postings need no second index by document), ``norm`` (its TF-IDF vector's norm as
    of the last refresh, :mod:`.vectors`) and ``seg`` (the segment holding its postings once
    small writes were merged, :mod:`.merges`; NULL before: ``doc // BATCH_SPAN``).
``kw_postings``
    one row per term, knowledge base and segment (``seg``: the write's number, its documents'
    ``doc // BATCH_SPAN``, or a merge's), keyed by term: a write of many documents stores a
    term's postings
    once, as arrays in document order — ``doc``; ``tf`` in ``content``; ``tf_head`` in the
    heading / title field; ``w_vec`` the term's TF-IDF weight in the document's vector
    (float4, as the local index keeps it; 0 when the vector lacks the term); the document's
    two field lengths as Whoosh scores them (``norm_len``, ``norm_len_head``: quantised to
    Whoosh's length byte), so scoring reads no other table — and how many of them hold the
    term in each field (``df``, ``df_head``) and in their vectors (``df_vec``). A removal
    rewrites the rows of its documents' terms without them. The view ``kw_posting_rows``
    reads them a posting (document, term) a row.
``kw_terms``
    a view: per term the number of documents holding it in each field and in its vector,
    the sums of its posting rows' counts. A term's document frequency is read from its
    posting rows (an index range), not kept in a table of its own: a write of many documents
    would otherwise update a row per distinct term.
``kw_stats``
    per level: the number of documents and the total length of each field (the average
    field length of BM25F); ``changes`` counts the documents written and removed, and
    ``norms_at`` is what it counted when the TF-IDF norms were last computed.

The postings and ``kw_stats`` change in the same transaction (the writer runs inside the
storage's write transaction), so a search never scans the corpus for statistics and a
killed writer leaves none half-counted. Statistics are kept per knowledge base and summed at
query time, because the local index ranks over every knowledge base at once.

**Distribution.** Every table has a ``kb`` column that is part of its primary key, and every
join between them includes it, so each table can be distributed by knowledge base (Citus:
``create_distributed_table(..., 'kb')``, co-located) without changing a statement's meaning;
the per-kb posting rows and ``kw_stats`` rows are what would let such a cluster answer
from each shard's own statistics.

**Writers.** Every write first locks the ``kw_stats`` rows of the knowledge bases it touches,
in key order: writers of one knowledge base take turns (they would contend on these counters
anyway), writers of different knowledge bases touch disjoint rows, and no two can deadlock.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from knowledge_agent.analysis import TextAnalyzer
from knowledge_agent.backends.postgres.binary_copy import TextTable, binary_array_copy
from knowledge_agent.errors import ConfigError, SearchIndexError
from knowledge_agent.models.knowledge_chunk import KnowledgeChunk
from knowledge_agent.models.knowledge_item import KnowledgeItem
from knowledge_agent.search.analysed_batch import AnalysedBatch
from knowledge_agent.search.config import TfidfConfig
from knowledge_agent.search.distinct import distinct, distinct_counts
from knowledge_agent.search.documents import HEADING_WEIGHT
from knowledge_agent.search.filters import to_epoch

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "BATCH_SPAN",
    "CHUNK_LEVEL",
    "COMPONENT",
    "ITEM_LEVEL",
    "MIGRATIONS",
    "PostingsWriter",
    "install",
    "whoosh_length",
]

logger = logging.getLogger(__name__)

CHUNK_LEVEL = 0
ITEM_LEVEL = 1
COMPONENT = "keyword"

BATCH_SPAN = 1 << 24
"""Document numbers are (write number) × this + position in the write: one sequence call per
write, in indexing order, disjoint between concurrent writers. A write's postings of one term
are one row, keyed by its write number (``seg``)."""

_POSTING_ARRAYS = ("doc", "tf", "tf_head", "w_vec", "norm_len", "norm_len_head")
# A row's documents holding its term in each field and in its vector, from its postings.
_COUNTS = (
    "count(*) FILTER (WHERE tf > 0), count(*) FILTER (WHERE tf_head > 0),"
    " count(*) FILTER (WHERE w_vec > 0)"
)

MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        "CREATE SEQUENCE kw_documents_doc_seq",
        """
        CREATE TABLE kw_documents (
            kb text COLLATE "C" NOT NULL,
            doc bigint NOT NULL,
            level smallint NOT NULL,
            key text NOT NULL,
            item_id text NOT NULL,
            chunk_index integer NOT NULL,
            source_type text NOT NULL,
            doc_type text NOT NULL,
            language text NOT NULL,
            path text COLLATE "C" NOT NULL,
            updated_at double precision NOT NULL,
            len integer NOT NULL,
            len_head integer NOT NULL,
            terms text NOT NULL,
            norm double precision,
            PRIMARY KEY (kb, doc)
        )
        """,
        "CREATE INDEX kw_documents_item ON kw_documents (item_id, level)",
        "CREATE INDEX kw_documents_path ON kw_documents (level, path)",
        """
        CREATE TABLE kw_postings (
            kb text COLLATE "C" NOT NULL,
            level smallint NOT NULL,
            term text COLLATE "C" NOT NULL,
            doc bigint NOT NULL,
            tf integer NOT NULL,
            tf_head integer NOT NULL,
            w_vec real NOT NULL,
            norm_len integer NOT NULL,
            norm_len_head integer NOT NULL,
            PRIMARY KEY (level, term, kb, doc)
        )
        """,
        """
        CREATE TABLE kw_terms (
            kb text COLLATE "C" NOT NULL,
            level smallint NOT NULL,
            term text COLLATE "C" NOT NULL,
            df bigint NOT NULL,
            df_head bigint NOT NULL,
            df_vec bigint NOT NULL,
            PRIMARY KEY (level, term, kb)
        )
        """,
        """
        CREATE TABLE kw_stats (
            kb text COLLATE "C" NOT NULL,
            level smallint NOT NULL,
            docs bigint NOT NULL DEFAULT 0,
            len bigint NOT NULL DEFAULT 0,
            len_head bigint NOT NULL DEFAULT 0,
            changes bigint NOT NULL DEFAULT 0,
            norms_at bigint NOT NULL DEFAULT 0,
            PRIMARY KEY (kb, level)
        )
        """,
    ),
    # Version 2: a write's postings of one term in one row of arrays (about a quarter of the
    # rows, each the index entry of a term's documents in one write); the views read them a
    # posting a row, as version 1 stored them, and as document frequencies.
    (
        "ALTER TABLE kw_postings RENAME TO kw_postings_v1",
        "ALTER INDEX kw_postings_pkey RENAME TO kw_postings_v1_pkey",
        """
        CREATE TABLE kw_postings (
            kb text COLLATE "C" NOT NULL,
            level smallint NOT NULL,
            term text COLLATE "C" NOT NULL,
            seg bigint NOT NULL,
            df integer NOT NULL,
            df_head integer NOT NULL,
            df_vec integer NOT NULL,
            doc bigint[] NOT NULL,
            tf integer[] NOT NULL,
            tf_head integer[] NOT NULL,
            w_vec real[] NOT NULL,
            norm_len integer[] NOT NULL,
            norm_len_head integer[] NOT NULL,
            PRIMARY KEY (level, term, kb, seg)
        )
        """,
        f"""
        INSERT INTO kw_postings (kb, level, term, seg, df, df_head, df_vec,
            {", ".join(_POSTING_ARRAYS)})
        SELECT kb, level, term, doc / {BATCH_SPAN}, {_COUNTS},
            {", ".join(f"array_agg({c} ORDER BY doc)" for c in _POSTING_ARRAYS)}
        FROM kw_postings_v1 GROUP BY level, term, kb, doc / {BATCH_SPAN}
        """,
        "DROP TABLE kw_postings_v1",
        "DROP TABLE kw_terms",
        """
        CREATE VIEW kw_terms AS
        SELECT kb, level, term,
            sum(df)::bigint AS df, sum(df_head)::bigint AS df_head, sum(df_vec)::bigint AS df_vec
        FROM kw_postings GROUP BY level, term, kb
        """,
        f"""
        CREATE VIEW kw_posting_rows AS
        SELECT p.kb, p.level, p.term, p.seg, u.*
        FROM kw_postings p
        CROSS JOIN LATERAL unnest({", ".join("p." + c for c in _POSTING_ARRAYS)})
            AS u({", ".join(_POSTING_ARRAYS)})
        """,
    ),
    # Version 3: where a document's postings are once small writes are merged (:mod:`.merges`);
    # NULL where they were written (``doc // BATCH_SPAN``), so no row is rewritten.
    ("ALTER TABLE kw_documents ADD COLUMN seg bigint",),
)
"""The keyword component's schema: migration ``n`` is the statements that take it from
version ``n - 1`` to ``n`` (``schema.migrate``)."""

TABLES = ("kw_postings", "kw_documents", "kw_stats")

Pair = tuple[KnowledgeItem, Sequence[KnowledgeChunk]]


def install(conn: psycopg.Connection) -> None:
    """Create or upgrade the tables (on a hot standby, which the primary's migrations reach
    by replication, only check that they are this release's)."""
    from knowledge_agent.backends.postgres import schema

    schema.migrate(conn, COMPONENT, MIGRATIONS)


# --------------------------------------------------------------------------- documents


def _length_table() -> np.ndarray:
    from whoosh.util.numeric import byte_to_length

    return np.array([byte_to_length(b) for b in range(256)], np.int64)


_LENGTHS = _length_table()


def whoosh_length(lengths: np.ndarray) -> np.ndarray:
    """Each field length as Whoosh scores it: the length its length byte decodes to (the
    smallest of Whoosh's 256 lengths at or above it), so BM25 here equals the local index's."""
    byte = np.minimum(np.searchsorted(_LENGTHS, lengths, side="left"), 255)
    return _LENGTHS[byte]


def _text(value: object) -> str:
    """A value PostgreSQL can store as text: None is "", NUL and lone surrogates replaced."""
    if value is None:
        return ""
    text = value if isinstance(value, str) else str(value)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return text.replace("\x00", "\ufffd") if "\x00" in text else text


@dataclass(eq=False)
class _Level:
    """One level's new rows: documents (per row of the batch) and postings."""

    level: int
    keys: list[str]
    owner: np.ndarray  # item position of each document
    chunk_index: list[int]
    length: np.ndarray
    length_head: np.ndarray
    row: np.ndarray  # per posting: its document
    term: np.ndarray  # per posting: vocabulary id
    tf: np.ndarray
    tf_head: np.ndarray
    w_vec: np.ndarray  # float32


def _counted(ids: np.ndarray, rows: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    return distinct_counts(rows.astype(np.int64) * size + ids)


def _level(
    batch: AnalysedBatch,
    level: int,
    documents: tuple[list[str], np.ndarray, list[int]],
    content: tuple[np.ndarray, np.ndarray],
    head: tuple[np.ndarray, np.ndarray],
    vec: tuple[np.ndarray, np.ndarray] | None,
    sublinear: bool,
) -> _Level:
    """One level's rows from its documents (keys, item positions, chunk indexes) and the
    (term ids, row) of each field; a ``vec`` of None is the content itself (an item's
    vector is its content)."""
    n_rows = len(documents[0])
    size = max(len(batch.vocab), 1)
    kc, cc = _counted(*content, size)
    kh, ch = _counted(*head, size)
    kv, cv = (kc, cc) if vec is None else _counted(*vec, size)
    keys = distinct(np.concatenate([kc, kh, kv]))
    tf = np.zeros(keys.size, np.int64)
    tf_head = np.zeros(keys.size, np.int64)
    counts_vec = np.zeros(keys.size, np.float32)
    tf[np.searchsorted(keys, kc)] = cc
    tf_head[np.searchsorted(keys, kh)] = ch
    counts_vec[np.searchsorted(keys, kv)] = cv
    w_vec = np.zeros(keys.size, np.float32)
    present = counts_vec > 0
    # The local TF-IDF index's tf weights, in float32 as it keeps them.
    w_vec[present] = (
        np.log(counts_vec[present], dtype=np.float32) + np.float32(1.0)
        if sublinear
        else counts_vec[present]
    )
    row, term = np.divmod(keys, size)
    # In the primary key's order (term bytes, then document): the index grows page by page.
    _, rank = batch.vocab_bytes()
    order = np.lexsort((row, rank[term])) if term.size else np.zeros(0, np.int64)
    return _Level(
        level,
        *documents,
        length=np.bincount(content[1], minlength=n_rows).astype(np.int64),
        length_head=np.bincount(head[1], minlength=n_rows).astype(np.int64),
        row=row[order],
        term=term[order],
        tf=tf[order],
        tf_head=tf_head[order],
        w_vec=w_vec[order],
    )


def _chunk_level(batch: AnalysedBatch, tfidf: TfidfConfig) -> _Level:
    """The chunk documents of :func:`~knowledge_agent.backends.local.keyword.blocks.chunk_block`
    (content: title unless the heading path starts with it, heading path and code symbol
    ``HEADING_WEIGHT`` times each, body; heading: the heading path) and the TF-IDF chunk
    rows (title if ``include_title``, heading path if ``include_heading``, body)."""
    owner = batch.chunk_items()
    title = batch.title[owner]
    title_end = np.where(batch.title_in_heading, title[:, 0], title[:, 1])
    heading = (batch.heading[:, 0], batch.heading[:, 1])
    body = (batch.body[:, 0], batch.body[:, 1])
    parts = [(title[:, 0], title_end), *[heading] * HEADING_WEIGHT]
    parts += [(batch.symbol[:, 0], batch.symbol[:, 1])] * HEADING_WEIGHT
    empty = np.zeros(owner.size, np.int64)
    vec_parts = [
        (title[:, 0], title[:, 1]) if tfidf.include_title else (empty, empty),
        heading if tfidf.include_heading else (empty, empty),
        body,
    ]
    chunks = [chunk for _, item_chunks in batch.pairs for chunk in item_chunks]
    documents = ([c.id for c in chunks], owner, [int(c.chunk_index) for c in chunks])
    return _level(
        batch,
        CHUNK_LEVEL,
        documents,
        batch.rows([*parts, body]),
        batch.rows([heading]),
        batch.rows(vec_parts),
        tfidf.sublinear_tf,
    )


def _item_level(batch: AnalysedBatch, tfidf: TfidfConfig) -> _Level:
    """The item documents (title; content: the title then the item-level text) — the TF-IDF
    item row is the same content."""
    every = np.arange(batch.n_items)
    documents = ([item.id for item, _ in batch.pairs], every, [0] * batch.n_items)
    return _level(
        batch,
        ITEM_LEVEL,
        documents,
        batch.item_rows(every),
        batch.rows([(batch.title[:, 0], batch.title[:, 1])]),
        None,
        tfidf.sublinear_tf,
    )


# --------------------------------------------------------------------------- the writer


def _quoted(values: Sequence[str]) -> np.ndarray:
    """Each string as a quoted element of an array literal."""
    quoted = ['"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"' for v in values]
    return np.array(quoted, dtype=object)


def _document_terms(vocab: np.ndarray, level: _Level, n: int) -> list[str]:
    """Each document's distinct terms, space-separated (a term never holds whitespace)."""
    order = np.argsort(level.row, kind="stable")
    terms = vocab[level.term[order]].tolist()
    ends = np.cumsum(np.bincount(level.row, minlength=n)).tolist()
    return [" ".join(terms[start:end]) for start, end in zip([0, *ends[:-1]], ends, strict=True)]


def _plain(batch: AnalysedBatch) -> np.ndarray:
    """The batch's terms as PostgreSQL stores them (by vocabulary id)."""
    return np.array([_text(term) for term in batch.vocab] or [""], dtype=object)


def _array(values: np.ndarray | Sequence[Any]) -> str:
    """An array literal of numbers or of :func:`_quoted` strings."""
    items = values.tolist() if isinstance(values, np.ndarray) else values
    return "{" + ",".join(map(str, items)) + "}"


_LOCK_STATS = """
    INSERT INTO kw_stats (kb, level)
    SELECT kb, level FROM unnest(%(kbs)s::text[]) AS k(kb), (VALUES (0), (1)) AS l(level)
    ORDER BY kb, level
    ON CONFLICT (kb, level) DO NOTHING
"""
_LOCK_STATS_ROWS = """
    SELECT 1 FROM kw_stats WHERE kb = ANY(%(kbs)s::text[]) ORDER BY kb, level FOR UPDATE
"""
# The same for a replacement: the items' knowledge bases and those of their old documents.
_ITEMS_KBS = """
    SELECT kb FROM kw_documents WHERE item_id = ANY(%(ids)s::text[])
    UNION SELECT unnest(%(kbs)s::text[])
"""
_LOCK_ITEMS_STATS = f"""
    INSERT INTO kw_stats (kb, level)
    SELECT kb, level FROM ({_ITEMS_KBS}) AS k(kb), (VALUES (0), (1)) AS l(level)
    ORDER BY kb, level
    ON CONFLICT (kb, level) DO NOTHING
"""
_LOCK_ITEMS_STATS_ROWS = f"""
    SELECT 1 FROM kw_stats WHERE kb IN ({_ITEMS_KBS}) ORDER BY kb, level FOR UPDATE
"""

_REMOVE = (
    """
    WITH gone AS (
        DELETE FROM kw_documents WHERE item_id = ANY(%(ids)s::text[])
        RETURNING kb, doc, level, len, len_head, terms, coalesce(seg, doc / SPAN) AS seg
    ),
    hit AS (
        SELECT kb, level, term, seg, array_agg(doc) AS docs
        FROM gone CROSS JOIN LATERAL unnest(string_to_array(terms, ' ')) AS t(term)
        GROUP BY kb, level, term, seg
    ),
    held AS MATERIALIZED (
        SELECT h.kb, h.level, h.term, h.seg, u.doc = ANY(h.docs) AS removed, u.*
        FROM hit h
        JOIN kw_postings p
            ON p.level = h.level AND p.term = h.term AND p.kb = h.kb AND p.seg = h.seg
        CROSS JOIN LATERAL unnest(COLUMNS) WITH ORDINALITY AS u(NAMES, n)
    ),
    kept AS (
        SELECT kb, level, term, seg, count(*) FILTER (WHERE tf > 0) AS df,
            count(*) FILTER (WHERE tf_head > 0) AS df_head,
            count(*) FILTER (WHERE w_vec > 0) AS df_vec, AGGREGATES
        FROM held WHERE NOT removed GROUP BY kb, level, term, seg
    ),
    shrunk AS (
        UPDATE kw_postings p SET df = k.df, df_head = k.df_head, df_vec = k.df_vec, SETS
        FROM kept k
        WHERE p.level = k.level AND p.term = k.term AND p.kb = k.kb AND p.seg = k.seg
    ),
    emptied AS (
        DELETE FROM kw_postings p USING hit h
        WHERE p.level = h.level AND p.term = h.term AND p.kb = h.kb AND p.seg = h.seg
            AND NOT EXISTS (
                SELECT 1 FROM kept k
                WHERE k.level = h.level AND k.term = h.term AND k.kb = h.kb AND k.seg = h.seg
            )
    ),
    stats AS (
        UPDATE kw_stats s
        SET docs = s.docs - x.docs, len = s.len - x.len, len_head = s.len_head - x.len_head,
            changes = s.changes + x.docs
        FROM (
            SELECT kb, level, count(*) AS docs, sum(len) AS len, sum(len_head) AS len_head
            FROM gone GROUP BY kb, level
        ) x
        WHERE s.kb = x.kb AND s.level = x.level
    )
    SELECT count(*) FROM gone
""".replace("SPAN", str(BATCH_SPAN))
    .replace("COLUMNS", ", ".join(f"p.{c}" for c in _POSTING_ARRAYS))
    .replace("NAMES", ", ".join(_POSTING_ARRAYS))
    .replace("AGGREGATES", ", ".join(f"array_agg({c} ORDER BY n) AS {c}" for c in _POSTING_ARRAYS))
    .replace("SETS", ", ".join(f"{c} = k.{c}" for c in _POSTING_ARRAYS))
)

_INSERT_DOCUMENTS = """
    INSERT INTO kw_documents (kb, doc, level, key, item_id, chunk_index, source_type,
        doc_type, language, path, updated_at, len, len_head, terms)
    SELECT kb, currval('kw_documents_doc_seq') * SPAN + position, %s, key, item_id, chunk_index,
        source_type, doc_type, language, path, updated_at, len, len_head, terms
    FROM unnest(%s::text[], %s::int8[], %s::text[], %s::text[], %s::int4[], %s::text[],
        %s::text[], %s::text[], %s::text[], %s::float8[], %s::int4[], %s::int4[], %s::text[])
        AS x(kb, position, key, item_id, chunk_index, source_type, doc_type, language, path,
            updated_at, len, len_head, terms)
""".replace("SPAN", str(BATCH_SPAN))

_COPY_POSTINGS = f"""
    COPY kw_postings (level, seg, df, df_head, df_vec, {", ".join(_POSTING_ARRAYS)}, kb, term)
    FROM STDIN (FORMAT BINARY)
"""

_ADD_STATS = """
    UPDATE kw_stats s
    SET docs = s.docs + x.docs, len = s.len + x.len, len_head = s.len_head + x.len_head,
        changes = s.changes + x.docs
    FROM unnest(%s::text[], %s::int2[], %s::int8[], %s::int8[], %s::int8[])
        AS x(kb, level, docs, len, len_head)
    WHERE s.kb = x.kb AND s.level = x.level
"""


class PostingsWriter:
    """Writes items and their chunks into the keyword tables, inside the caller's transaction.

    The storage calls :meth:`replace` and :meth:`remove` within its write transaction (they
    never commit), so an item, its chunks and its postings become visible together.
    ``tfidf`` fixes how the TF-IDF vectors are weighted (a change needs a rebuild, as for the
    local index).
    """

    def __init__(self, analyzer: TextAnalyzer, *, tfidf: TfidfConfig | None = None) -> None:
        if not isinstance(analyzer, TextAnalyzer):
            raise ConfigError(f"analyzer must be a TextAnalyzer, got {type(analyzer).__name__}")
        self.analyzer = analyzer
        self.tfidf = tfidf if tfidf is not None else TfidfConfig()

    def analysed(self, pairs: Sequence[Pair] | AnalysedBatch) -> AnalysedBatch:
        if isinstance(pairs, AnalysedBatch):
            return pairs if pairs.matches(self.analyzer) else self.analysed(pairs.pairs)
        return AnalysedBatch.build(self.analyzer, pairs)

    def replace(self, conn: psycopg.Connection, pairs: Sequence[Pair] | AnalysedBatch) -> None:
        """(Re)index these items and their chunks: their previous rows go, in the same
        transaction. Two round trips: the locks, the removal and the new documents in one
        pipeline (the rows built while the server runs the first statements), then the
        postings' ``COPY``."""
        batch = self.analysed(pairs)
        if batch.n_items == 0:
            return
        items = [item for item, _ in batch.pairs]
        ids = [item.id for item in items]
        with conn.cursor() as cur, conn.cursor() as sequence:
            with conn.pipeline():
                # The knowledge bases of the items' old documents and of the items, locked.
                kbs = {"ids": ids, "kbs": sorted({_text(item.kb) for item in items})}
                cur.execute(_LOCK_ITEMS_STATS, kbs)
                cur.execute(_LOCK_ITEMS_STATS_ROWS, kbs)
                cur.execute(_REMOVE, {"ids": ids})
                sequence.execute("SELECT nextval('kw_documents_doc_seq')")
                levels = [_chunk_level(batch, self.tfidf), _item_level(batch, self.tfidf)]
                total = sum(len(level.keys) for level in levels)
                if total >= BATCH_SPAN:
                    raise SearchIndexError(
                        f"a write of {total} documents is over {BATCH_SPAN}: split it"
                    )
                self._documents(cur, batch, items, levels)
            row = sequence.fetchone()
            assert row is not None
            self._postings(cur, batch, items, levels, int(row[0]))

    def remove(self, conn: psycopg.Connection, item_ids: Sequence[str]) -> None:
        """Drop every row of these items."""
        ids = [item_ids] if isinstance(item_ids, str) else list(dict.fromkeys(item_ids))
        if not ids:
            return
        with conn.cursor() as cur:
            cur.execute(
                "SELECT DISTINCT kb FROM kw_documents WHERE item_id = ANY(%s::text[])", (ids,)
            )
            kbs = {row[0] for row in cur.fetchall()}
            if not kbs:
                return
            self._lock(cur, kbs)
            cur.execute(_REMOVE, {"ids": ids})

    def clear(self, conn: psycopg.Connection) -> None:
        """Drop every document and posting (a rebuild's start). ``DELETE``, not
        ``TRUNCATE``: readers keep answering from the old rows until the rebuild commits.
        The statistics rows stay, zeroed, their ``changes`` counting the clear: the tables'
        generation (:mod:`.statistics`) never comes back to an earlier value."""
        with conn.cursor() as cur:
            cur.execute("SELECT kb FROM kw_stats ORDER BY kb, level FOR UPDATE")
            for table in TABLES:
                if table != "kw_stats":
                    cur.execute(f"DELETE FROM {table}")
            cur.execute(
                "UPDATE kw_stats SET changes = changes + docs + 1, docs = 0, len = 0, len_head = 0"
            )

    @staticmethod
    def _lock(cur: psycopg.Cursor[Any], kbs: set[str]) -> None:
        names = sorted(kbs)
        cur.execute(_LOCK_STATS, {"kbs": names})
        cur.execute(_LOCK_STATS_ROWS, {"kbs": names})

    def _documents(
        self,
        cur: psycopg.Cursor[Any],
        batch: AnalysedBatch,
        items: list[KnowledgeItem],
        levels: list[_Level],
    ) -> None:
        """Insert the new documents (numbered by the write's ``nextval``, just sent: its
        ``currval``) and add them to the statistics. Their arrays are sent as array literals
        built here (psycopg dumps a list element by element in Python)."""
        item_kb = [_text(item.kb) for item in items]
        kb_of_item = _quoted(item_kb)
        meta = [
            _quoted([_text(getattr(item, name)) for item in items])
            for name in ("source_type", "doc_type", "language", "source_uri")
        ]
        item_ids = _quoted([item.id for item in items])
        updated = np.array([repr(to_epoch(item.updated_at)) for item in items], dtype=object)
        plain = _plain(batch)
        stats: dict[tuple[str, int], list[int]] = {}
        start = 0
        for level in levels:
            n = len(level.keys)
            if n == 0:
                continue
            position = np.arange(start, start + n, dtype=np.int64)
            start += n
            owner = level.owner
            cur.execute(
                _INSERT_DOCUMENTS,
                (
                    level.level,
                    _array(kb_of_item[owner]),
                    _array(position),
                    _array(_quoted(level.keys)),
                    _array(item_ids[owner]),
                    _array(level.chunk_index),
                    *(_array(values[owner]) for values in meta),
                    _array(updated[owner]),
                    _array(level.length),
                    _array(level.length_head),
                    _array(_quoted(_document_terms(plain, level, n))),
                ),
            )
            names = np.array([item_kb[i] for i in owner.tolist()], dtype=object)
            for name in sorted(set(names.tolist())):
                mask = names == name
                found = stats.setdefault((name, level.level), [0, 0, 0])
                found[0] += int(mask.sum())
                found[1] += int(level.length[mask].sum())
                found[2] += int(level.length_head[mask].sum())
        keys = sorted(stats)
        cur.execute(
            _ADD_STATS,
            (
                [k for k, _ in keys],
                [level for _, level in keys],
                *([stats[key][i] for key in keys] for i in range(3)),
            ),
        )

    def _postings(
        self,
        cur: psycopg.Cursor[Any],
        batch: AnalysedBatch,
        items: list[KnowledgeItem],
        levels: list[_Level],
        seg: int,
    ) -> None:
        """The postings of every level in one binary ``COPY`` built from the arrays: a row
        per (term, knowledge base), its postings in document order."""
        item_kb = [_text(item.kb) for item in items]
        plain = _plain(batch)
        vocab_table = TextTable([term.encode("utf-8") for term in plain.tolist()])
        kb_values, kb_code = np.unique(np.array(item_kb, dtype=object), return_inverse=True)
        kb_table = TextTable([name.encode("utf-8") for name in kb_values.tolist()])
        _, rank = batch.vocab_bytes()
        blocks: list[bytes] = []
        start = 0
        for level in levels:
            n = len(level.keys)
            if n == 0:
                continue
            doc = seg * BATCH_SPAN + np.arange(start, start + n, dtype=np.int64)
            start += n
            # One row per (term, kb): the postings are in term order, documents ascending.
            posting_kb = kb_code[level.owner][level.row]
            order = np.lexsort((level.row, posting_kb, rank[level.term]))
            term, posting_kb, row = level.term[order], posting_kb[order], level.row[order]
            key = term.astype(np.int64) * len(kb_values) + posting_kb
            starts = np.flatnonzero(np.diff(key, prepend=-1)) if key.size else key
            if starts.size == 0:
                continue  # no terms: documents with empty fields
            tf, tf_head, w_vec = level.tf[order], level.tf_head[order], level.w_vec[order]
            # Per row, its documents holding its term in each field and in their vectors.
            counts = [
                np.add.reduceat((v > 0).astype(np.int64), starts) for v in (tf, tf_head, w_vec)
            ]
            stream = list(
                binary_array_copy(
                    [
                        (np.full(starts.size, level.level), ">i2"),
                        (np.full(starts.size, seg), ">i8"),
                        *((values, ">i4") for values in counts),
                    ],
                    [
                        (doc[row], ">i8"),
                        (tf, ">i4"),
                        (tf_head, ">i4"),
                        (w_vec, ">f4"),
                        (whoosh_length(level.length)[row], ">i4"),
                        (whoosh_length(level.length_head)[row], ">i4"),
                    ],
                    [(posting_kb[starts], kb_table), (term[starts], vocab_table)],
                    starts,
                )
            )
            # One stream for every level: a signature, every level's rows, a trailer.
            head, *rows, end = stream
            blocks = blocks or [head, end]
            blocks[-1:-1] = rows
        if not blocks:
            return
        with cur.copy(_COPY_POSTINGS) as copy:
            for block in blocks:
                copy.write(block)
