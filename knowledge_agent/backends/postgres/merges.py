"""Merging the postings of small writes, as Lucene merges small segments.

Every write stores a term's postings in one row of its own (its segment, :mod:`.postings`).
Documents added one at a time, thousands of them (``add_text`` in a loop), leave thousands of
rows per common term holding one posting each: a search then reads each of those rows (a
row's header and six array headers per posting) and the tables grow several times larger
than the same documents written at once.

:func:`merge_small_segments` rewrites the rows of a knowledge base's small segments (under
``below`` documents each, once there are ``least`` of them at one level) as one segment: one
row per term, its postings in document order. Document numbers do not change (ties still
rank by them), nor do the statistics or the generation (:mod:`.statistics`): a search
before and after reads the same postings. ``kw_documents.seg`` records the new segment, where
a removal and the TF-IDF norms computed at query time find a document's postings. It runs in
one transaction that holds the statistics' locks, as a writer does; it gives up, merging
nothing, when a writer holds them.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from knowledge_agent.backends.postgres.postings import BATCH_SPAN

if TYPE_CHECKING:
    import psycopg

__all__ = ["MERGE_AT", "SMALL_SEGMENT", "merge_small_segments"]

logger = logging.getLogger(__name__)

SMALL_SEGMENT = 128
"""Documents of one level under which a segment is merged with the other small ones."""

MERGE_AT = 8
"""Small segments of one knowledge base and level that are merged."""

_ARRAYS = ("tf", "tf_head", "w_vec", "norm_len", "norm_len_head")

# Each knowledge base and level with enough small segments gets a new segment number (from
# the documents' sequence: no write has it, nor another merge).
_MERGE = f"""
    WITH sizes AS (
        SELECT kb, level, coalesce(seg, doc / {BATCH_SPAN}) AS seg, count(*) AS docs
        FROM kw_documents GROUP BY 1, 2, 3
    ),
    small AS MATERIALIZED (
        SELECT kb, level, array_agg(seg) AS segs, nextval('kw_documents_doc_seq') AS target
        FROM sizes WHERE docs < %(below)s
        GROUP BY kb, level HAVING count(*) >= %(least)s
    ),
    merging AS MATERIALIZED (
        SELECT kb, level, unnest(segs) AS seg, target FROM small
    ),
    moved AS (
        DELETE FROM kw_postings p USING merging m
        WHERE p.kb = m.kb AND p.level = m.level AND p.seg = m.seg
        RETURNING p.*, m.target
    ),
    merged AS (
        INSERT INTO kw_postings (kb, level, term, seg, df, df_head, df_vec, doc,
            {", ".join(_ARRAYS)})
        SELECT m.kb, m.level, m.term, m.target, count(*) FILTER (WHERE u.tf > 0),
            count(*) FILTER (WHERE u.tf_head > 0), count(*) FILTER (WHERE u.w_vec > 0),
            array_agg(u.doc ORDER BY u.doc),
            {", ".join(f"array_agg(u.{c} ORDER BY u.doc)" for c in _ARRAYS)}
        FROM moved m
        CROSS JOIN LATERAL unnest(m.doc, {", ".join("m." + c for c in _ARRAYS)})
            AS u(doc, {", ".join(_ARRAYS)})
        GROUP BY m.kb, m.level, m.term, m.target
        RETURNING 1
    ),
    placed AS (
        UPDATE kw_documents d SET seg = m.target FROM merging m
        WHERE d.kb = m.kb AND d.level = m.level
            AND coalesce(d.seg, d.doc / {BATCH_SPAN}) = m.seg
        RETURNING 1
    )
    SELECT (SELECT count(*) FROM moved), (SELECT count(*) FROM merged),
        (SELECT count(*) FROM placed)
"""


def merge_small_segments(
    conn: psycopg.Connection, *, below: int = SMALL_SEGMENT, least: int = MERGE_AT
) -> int:
    """Merge the small segments (see the module) on ``conn`` (in autocommit mode); the
    postings rows merged into fewer (0: nothing to merge, or a writer holds the
    statistics)."""
    import psycopg

    try:
        with conn.transaction():
            conn.execute("SELECT 1 FROM kw_stats ORDER BY kb, level FOR UPDATE NOWAIT")
            # The segments' rows are found by one pass over each table: a nested loop (what
            # the planner picks for the few merging segments it expects, the tables not yet
            # analysed) scans them once per segment, seconds for a few hundred segments.
            conn.execute("SET LOCAL enable_nestloop = off")
            row = conn.execute(_MERGE, {"below": below, "least": least}).fetchone()
    except (psycopg.errors.LockNotAvailable, psycopg.errors.ReadOnlySqlTransaction):
        logger.debug("small segments not merged: the statistics are busy or read-only")
        return 0
    moved, merged, documents = (int(value) for value in row) if row is not None else (0, 0, 0)
    if moved:
        logger.debug("merged %d postings rows into %d (%d documents)", moved, merged, documents)
    return moved
