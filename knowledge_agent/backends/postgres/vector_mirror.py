"""Every document's TF-IDF vector of one level, kept in this process: norms without a refresh.

A document's norm depends on the idf of each of its terms, which every write changes; the
stored norms (:mod:`.vectors`) are refreshed by one pass over all the postings in the
database (seconds at 100,000 chunks, holding the writers' locks). The local index keeps its
vectors in memory and recomputes the norms with one sparse product after a change; this is
the same for the database: the vectors (document, term, weight) are read once, brought up to
date at each new generation of the tables by reading only the documents added since (their
postings, found through their terms) and dropping those removed, and the norms computed from
them under that generation's statistics — exact, whichever process wrote.

A document's number never names another document (a changed item's documents get new ones)
and a merge moves postings without renumbering, so the set of a level's document numbers is
all that says what changed. The statements of an update name their generation; an update
whose statements saw different ones is dropped (the next search tries again).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import numpy as np

from knowledge_agent.backends.postgres.postings import BATCH_SPAN
from knowledge_agent.backends.postgres.statistics import (
    GENERATION_SQL,
    Generation,
    StatsState,
    generation_of,
)
from knowledge_agent.backends.postgres.term_postings import array_sizes, flat_array

if TYPE_CHECKING:
    import psycopg

__all__ = ["MAX_MIRRORED_POSTINGS", "VectorMirror"]

MAX_MIRRORED_POSTINGS = 12_000_000
"""Vector entries a mirror keeps at most (12 bytes each); a larger level is not mirrored."""

_READ_DOCUMENTS = f"""
    WITH {GENERATION_SQL}
    SELECT g.changes, g.norms_at, g.rows, d.docs, d.kbs, d.segs
    FROM generation g LEFT JOIN (
        SELECT array_send(array_agg(doc)) AS docs, array_agg(kb) AS kbs,
            array_send(array_agg(coalesce(seg, doc / {BATCH_SPAN}))) AS segs
        FROM kw_documents WHERE level = %(level)s
    ) d ON true
"""

_READ_ALL = f"""
    WITH {GENERATION_SQL}
    SELECT g.changes, g.norms_at, g.rows, p.term, array_send(p.doc), array_send(p.w_vec)
    FROM generation g LEFT JOIN kw_postings p ON p.level = %(level)s AND p.df_vec > 0
"""

# The rows holding the added documents' postings: each document's terms, in its segment.
_READ_ADDED = f"""
    WITH {GENERATION_SQL},
    rows AS (
        SELECT DISTINCT a.kb, a.seg, t.term
        FROM unnest(%(kbs)s::text[], %(docs)s::int8[], %(segs)s::int8[]) AS a(kb, doc, seg)
        JOIN kw_documents d ON d.kb = a.kb AND d.doc = a.doc
        CROSS JOIN LATERAL unnest(string_to_array(d.terms, ' ')) AS t(term)
    )
    SELECT g.changes, g.norms_at, g.rows, p.term, array_send(p.doc), array_send(p.w_vec)
    FROM generation g LEFT JOIN (
        SELECT p.* FROM rows r JOIN kw_postings p
            ON p.level = %(level)s AND p.term = r.term AND p.kb = r.kb AND p.seg = r.seg
        WHERE p.df_vec > 0
    ) p ON true
"""

_EMPTY_I8 = np.zeros(0, np.int64)


class VectorMirror:
    """One level's document vectors: document numbers (ascending) and, grouped by document
    in that order, each entry's term (an id into :attr:`terms`) and weight. Thread-safe."""

    def __init__(self, level: int) -> None:
        self.level = level
        self.generation: Generation | None = None
        self.known = _EMPTY_I8  # every document of the level, ascending
        self.docs = _EMPTY_I8  # those with a vector, ascending
        self.counts = _EMPTY_I8  # entries of each
        self.term = np.zeros(0, np.int32)
        self.weight = np.zeros(0, np.float32)
        self.terms: dict[str, int] = {}
        self._norms: tuple[np.ndarray, np.ndarray] | None = None
        self._lock = threading.Lock()
        self.too_large = False
        """Whether the level held too many entries to mirror (then it is not tried again)."""
        self.added = 0
        """Documents the last update read (every one, when it read them all)."""

    def norms(
        self, cur: psycopg.Cursor[Any], state: StatsState
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """Every document's norm under ``state``'s statistics (documents ascending, norms);
        None when the tables were not at ``state``'s generation, or hold more vector entries
        than :data:`MAX_MIRRORED_POSTINGS`."""
        with self._lock:
            if self.generation != state.generation and not self._update(cur, state):
                return None
            if self._norms is None:
                self._norms = (self.docs, self._computed(state))
            return self._norms

    def _update(self, cur: psycopg.Cursor[Any], state: StatsState) -> bool:
        cur.execute(_READ_DOCUMENTS, {"level": self.level}, binary=True)
        row = cur.fetchone()
        if generation_of(row) != state.generation:
            return False
        current = flat_array([row[3]], ">i8") if row[3] is not None else _EMPTY_I8
        kbs = np.array(row[4] or [], dtype=object)
        segs = flat_array([row[5]], ">i8") if row[5] is not None else _EMPTY_I8
        added = ~np.isin(current, self.known, assume_unique=True)
        if self.generation is None or added.sum() > max(1_000, current.size // 10):
            cur.execute(_READ_ALL, {"level": self.level}, binary=True)
            fresh = True
        else:
            cur.execute(
                _READ_ADDED,
                {
                    "level": self.level,
                    "kbs": kbs[added].tolist(),
                    "docs": current[added].tolist(),
                    "segs": segs[added].tolist(),
                },
                binary=True,
            )
            fresh = False
        rows = cur.fetchall()
        if generation_of(rows[0]) != state.generation:
            return False
        read = [r for r in rows if r[3] is not None]
        sizes = array_sizes([r[4] for r in read], ">i8")
        if int(sizes.sum()) + (0 if fresh else self.weight.size) > MAX_MIRRORED_POSTINGS:
            self.too_large = True
            return False
        ids = np.array([self.terms.setdefault(r[3], len(self.terms)) for r in read], np.int32)
        doc = flat_array([r[4] for r in read], ">i8") if read else _EMPTY_I8
        weight = flat_array([r[5] for r in read], ">f4") if read else np.zeros(0, np.float32)
        term = np.repeat(ids, sizes)
        keep = weight > 0
        if not fresh:
            keep &= np.isin(doc, current[added])
            self._drop(current)
        self._add(doc[keep], term[keep], weight[keep], replace=fresh)
        self.known = np.sort(current)
        self.added = int(current.size if fresh else added.sum())
        self.generation = state.generation
        self._norms = None
        return True

    def _drop(self, current: np.ndarray) -> None:
        """Forget the documents not in ``current``."""
        kept = np.isin(self.docs, current, assume_unique=True)
        if kept.all():
            return
        entries = np.repeat(kept, self.counts)
        self.docs, self.counts = self.docs[kept], self.counts[kept]
        self.term, self.weight = self.term[entries], self.weight[entries]

    def _add(self, doc: np.ndarray, term: np.ndarray, weight: np.ndarray, replace: bool) -> None:
        # A document's entries by term: equal vectors sum in the same order to equal norms,
        # so their ties rank by document number as the local index ranks them.
        order = np.lexsort((term, doc))
        doc, term, weight = doc[order], term[order].astype(np.int32), weight[order]
        docs, counts = np.unique(doc, return_counts=True)
        if replace or self.docs.size == 0:
            self.docs, self.counts, self.term, self.weight = docs, counts, term, weight
        elif docs.size == 0 or docs[0] > self.docs[-1]:  # the usual case: numbers grow
            self.docs = np.concatenate([self.docs, docs])
            self.counts = np.concatenate([self.counts, counts])
            self.term = np.concatenate([self.term, term])
            self.weight = np.concatenate([self.weight, weight])
        else:
            every = np.concatenate([np.repeat(self.docs, self.counts), doc])
            self._add(
                every,
                np.concatenate([self.term, term]),
                np.concatenate([self.weight, weight]),
                replace=True,
            )

    def _computed(self, state: StatsState) -> np.ndarray:
        """The norms of :attr:`docs`: sqrt(Σ (w·idf)²), idf as the stored norms have it."""
        if self.docs.size == 0:
            return np.zeros(0, np.float64)
        df = np.bincount(self.term, minlength=len(self.terms)).astype(np.float64)
        n = float(state.level(self.level).docs)
        idf = (np.log((1.0 + n) / (1.0 + df)) + 1.0).astype(np.float32).astype(np.float64)
        squares = (self.weight * self.weight).astype(np.float64) * (idf * idf)[self.term]
        starts = np.concatenate([[0], np.cumsum(self.counts)[:-1]])
        return np.sqrt(np.add.reduceat(squares, starts))
