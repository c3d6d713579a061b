"""The last part of a ranking statement: the best documents of the CTE ``scored`` (``kb``,
``doc``, ``score``), at most ``cap`` of one item, with their keys and the generation of the
statement's snapshot (:mod:`.statistics`).

Capping needs each scored document's item, a join and a window over every match (thousands
of rows for a query of common words). The best ``depth`` documents decide the result when
their capped list still holds ``limit`` of them (whether a document is kept depends only on
the documents of its item ranked above it, all among those ``depth``), or when they are all
the matches; the statement says whether that held (its ``exact`` column), and when it did
not, its caller runs it again without a depth (``%(depth)s`` NULL: ``LIMIT ALL``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from knowledge_agent.backends.postgres.statistics import GENERATION_SQL, Statistics, StatsState

if TYPE_CHECKING:
    import psycopg

__all__ = ["DEPTH_PER_RESULT", "ranked_hits", "ranked_rows", "ranked_sql"]

DEPTH_PER_RESULT = 4
"""The depth of a capped ranking: this many documents per result asked for."""


def ranked_sql(ctes: str, keep: str, per_item: bool) -> str:
    """The statement: ``ctes`` (defining ``scored``), the documents passing ``keep`` (a
    condition on ``scored``, or "") best first; its columns ``changes, norms_at, rows`` (the
    generation), ``exact``, then ``key, item_id, chunk_index, score`` (NULL in the one row
    when nothing is found). Parameters: ``limit``, and ``cap`` and ``depth`` with
    ``per_item``."""
    kept = "SELECT kb, doc, score FROM scored" + (f" WHERE {keep}" if keep else "")
    if per_item:
        ctes += f""",
        deepest AS MATERIALIZED ({kept} ORDER BY score DESC, doc LIMIT %(depth)s),
        ranked AS MATERIALIZED (
            SELECT kb, doc, score FROM (
                SELECT t.kb, t.doc, t.score, row_number() OVER (
                    PARTITION BY d.item_id ORDER BY t.score DESC, t.doc) AS rank
                FROM deepest t JOIN kw_documents d ON d.kb = t.kb AND d.doc = t.doc
            ) r WHERE r.rank <= %(cap)s ORDER BY score DESC, doc LIMIT %(limit)s
        )"""
        exact = (
            "(SELECT count(*) FROM deepest) < %(depth)s"
            " OR (SELECT count(*) FROM ranked) >= %(limit)s"
        )
    else:
        ctes += f""",
        ranked AS ({kept} ORDER BY score DESC, doc LIMIT %(limit)s)"""
        exact = "true"
    return f"""
        WITH {GENERATION_SQL}, {ctes}
        SELECT g.changes, g.norms_at, g.rows, coalesce({exact}, true) AS exact,
            r.key, r.item_id, r.chunk_index, r.score
        FROM generation g LEFT JOIN (
            SELECT d.key, d.item_id, d.chunk_index, t.score, t.doc
            FROM ranked t JOIN kw_documents d ON d.kb = t.kb AND d.doc = t.doc
        ) r ON true
        ORDER BY r.score DESC, r.doc
    """


def ranked_rows(cur: psycopg.Cursor[Any], sql: str, params: dict[str, Any]) -> list[Any]:
    """The rows of a :func:`ranked_sql` statement: at a depth first, then (rarely) again
    without one when that depth did not decide the result."""
    if params.get("cap") is not None:
        params["depth"] = DEPTH_PER_RESULT * int(params["limit"])
    cur.execute(sql, params)
    rows = cur.fetchall()
    if rows[0][3] or params.get("cap") is None:
        return rows
    params["depth"] = None
    cur.execute(sql, params)
    return cur.fetchall()


def ranked_hits(
    cur: psycopg.Cursor[Any],
    sql: str,
    params: dict[str, Any],
    statistics: Statistics,
    state: StatsState,
) -> list[tuple[str, str, int, float]] | None:
    """The (key, item id, chunk index, score) hits of a :func:`ranked_sql` statement, or
    None when a write moved the generation since ``state`` was read (rank again)."""
    rows = ranked_rows(cur, sql, params)
    if not statistics.current(state, rows[0][:3]):
        return None
    return [(str(k), str(i), int(c), float(s)) for _, _, _, _, k, i, c, s in rows if k is not None]
