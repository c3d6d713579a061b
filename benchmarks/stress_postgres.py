"""The stress scenarios on a PostgreSQL database (``benchmarks/stress.py --backend
postgresql``): writer and reader processes on one database, and kill -9 of a writer, each
checked by :func:`~benchmarks.stress_checks.verify` and by :func:`rows_whole`, which reads the
tables themselves: every item has its chunks, every chunk and item its keyword document, every
document its postings, and no document outlives its item."""

from __future__ import annotations

from typing import Any

# A count of each is a problem; the queries read the tables of the postgresql backend.
_WHOLE_CHECKS = {
    "items with text but without chunks": """
        SELECT count(*) FROM knowledge_items i
        WHERE btrim(i.content) <> ''
          AND NOT EXISTS (SELECT 1 FROM knowledge_chunks c WHERE c.item_id = i.id)""",
    "chunks without their keyword document": """
        SELECT count(*) FROM knowledge_chunks c
        WHERE NOT EXISTS (SELECT 1 FROM kw_documents d
                          WHERE d.item_id = c.item_id AND d.level = 0
                            AND d.chunk_index = c.chunk_index)""",
    "items without their keyword document": """
        SELECT count(*) FROM knowledge_items i
        WHERE NOT EXISTS (SELECT 1 FROM kw_documents d WHERE d.item_id = i.id AND d.level = 1)""",
    "keyword documents of items not stored": """
        SELECT count(*) FROM kw_documents d
        WHERE NOT EXISTS (SELECT 1 FROM knowledge_items i WHERE i.id = d.item_id)""",
    "keyword documents without postings": """
        SELECT count(*) FROM kw_documents d
        LEFT JOIN (SELECT DISTINCT kb, level, doc FROM kw_posting_rows) p USING (kb, level, doc)
        WHERE p.doc IS NULL AND d.len > 0""",
    "postings of no document": """
        SELECT count(*) FROM (SELECT DISTINCT kb, level, doc FROM kw_posting_rows) p
        LEFT JOIN kw_documents d USING (kb, level, doc) WHERE d.doc IS NULL""",
    "levels whose document count is not their documents'": """
        SELECT count(*) FROM kw_stats s
        WHERE s.docs <> (SELECT count(*) FROM kw_documents d
                         WHERE d.kb = s.kb AND d.level = s.level)""",
}


def is_url(target: str) -> bool:
    """Whether ``target`` names a PostgreSQL database rather than a data folder."""
    return target.startswith(("postgresql://", "postgres://"))


def rows_whole(url: str) -> list[str]:
    """What is not whole in the database at ``url`` (empty: every row has its rows)."""
    import psycopg

    problems = []
    with psycopg.connect(url) as conn, conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")  # one snapshot
        for label, query in _WHOLE_CHECKS.items():
            row: Any = conn.execute(query).fetchone()
            if row and row[0]:
                problems.append(f"{row[0]} {label}")
    return problems
