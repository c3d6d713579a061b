"""The end of a bulk write: the planner's statistics and the TF-IDF norms brought up to date
by the writer, rather than by the first searches after it.

A search plans its statements from the tables' statistics (``ANALYZE``). After a bulk
ingest into new or small tables they describe tables far smaller than the ones searched, and
the server's autovacuum refreshes them only up to a minute later: until then, a search's
statements can take ten times longer (scans where an index range would do). The TF-IDF norms
(:mod:`.vectors`) are stale after every write as well, and the first search would refresh
them (one pass over the postings) or compute its candidates' norms.

So when the writes since the last upkeep changed a good share of the documents (as
autovacuum judges: a tenth of them), :meth:`Upkeep.after_writes` merges the postings of
small writes (:mod:`.merges`), analyses the tables searches read and refreshes the norms, at
the end of the batch or collect that wrote them. Smaller writes leave these to the next
bulk write, to autovacuum and to the next search.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from knowledge_agent.backends.postgres.merges import MERGE_AT, SMALL_SEGMENT, merge_small_segments
from knowledge_agent.backends.postgres.vectors import refresh_norms

if TYPE_CHECKING:
    import psycopg

__all__ = ["SEARCH_TABLES", "Upkeep"]

logger = logging.getLogger(__name__)

SEARCH_TABLES = ("kw_postings", "kw_documents", "kw_stats", "knowledge_items", "knowledge_chunks")
"""The tables a search's statements read."""

_ANALYSED = {
    "kw_postings": "kb, level, term, seg, df, df_head, df_vec",
    "kw_documents": "kb, doc, level, key, item_id, chunk_index, source_type, doc_type, language, "
    "path, updated_at, seg, norm",
    "kw_stats": "",
    "knowledge_items": "id, title, kb, source_type, source_uri, content_type, doc_type, "
    "language, created_at, updated_at, changed_at",
    "knowledge_chunks": "id, item_id, chunk_index",
}
"""The columns of :data:`SEARCH_TABLES` that statements filter, join or group on (all of a
table when empty). The texts and posting arrays are left out: no plan depends on them, and
sampling them took most of the time (the postings' arrays three quarters of it);
autovacuum still analyses every column later."""
_ANALYZE = "ANALYZE " + ", ".join(
    f"{table} ({columns})" if columns else table for table, columns in _ANALYSED.items()
)

_CHANGES = """
    SELECT coalesce(sum(changes), 0)::int8, coalesce(sum(docs), 0)::int8 FROM kw_stats
"""


class Upkeep:
    """Counts the documents written since the last upkeep (from ``kw_stats``: whichever
    process wrote them) and runs it after a bulk write."""

    def __init__(self, share: float = 0.1, minimum: int = 200) -> None:
        self.share = share
        """The share of the documents a bulk write changes, at least."""
        self.minimum = minimum
        """The documents a bulk write changes, at least."""
        self.merge_below = SMALL_SEGMENT
        """Documents under which a segment is small (:func:`.merges.merge_small_segments`)."""
        self.merge_at = MERGE_AT
        """Small segments of a knowledge base and level that are merged."""
        self._since: int | None = None
        self.runs = 0
        """Upkeeps run (for tests and profiles)."""

    def before_writes(self, conn: psycopg.Connection) -> None:
        """Before this process's first write: where the count starts."""
        if self._since is None:
            self._since = _changes(conn)[0]

    def after_writes(self, conn: psycopg.Connection) -> bool:
        """After writes (a batch's, a collect's): the upkeep when they were a bulk write;
        whether it ran."""
        if self._since is None:
            return False
        changes, docs = _changes(conn)
        if changes - self._since < max(self.minimum, self.share * docs):
            return False
        # Merged first: the tables analysed are those searches will read.
        merge_small_segments(conn, below=self.merge_below, least=self.merge_at)
        conn.execute(_ANALYZE)
        # Without waiting: a writer holding the statistics leaves the norms to the searches.
        refresh_norms(conn, wait=False)
        self._since = changes
        self.runs += 1
        logger.debug("after %d document changes: tables analysed, norms refreshed", changes)
        return True


def _changes(conn: psycopg.Connection) -> tuple[int, int]:
    """The documents changed since the tables were created, and those there are."""
    row = conn.execute(_CHANGES).fetchone()
    return (int(row[0]), int(row[1])) if row is not None else (0, 0)
