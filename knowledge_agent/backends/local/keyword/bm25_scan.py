"""Whoosh's BM25F for a bag of terms, scored a posting block at a time with numpy.

Whoosh scores a query one posting at a time in Python: a 16-term question matching 16K of
100K chunks costs over 100 ms, nearly all of it matcher traversal. Here each posting block is
decoded as a whole and scored as an array, with the same formula, the same statistics (idf
and average length from the top-level searcher, lengths decoded from the same length byte)
and float64 arithmetic, so scores equal Whoosh's up to the order in which its matcher tree
adds the clauses (a few ulps). The tests compare both on random corpora.

Postings and lengths are read by :mod:`~knowledge_agent.backends.local.keyword.internals` — whole
blocks on a tested Whoosh version, posting by posting through the public matcher otherwise —
and scored by ``whoosh.scoring.bm25`` itself, applied to arrays.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from whoosh.reading import SegmentReader
from whoosh.scoring import BM25F, bm25
from whoosh.searching import Searcher

from knowledge_agent.backends.local.keyword.internals import field_b, field_lengths, postings
from knowledge_agent.search.topk import best_rows

__all__ = ["Clause", "ScanCache", "scored_docs", "top_docs"]


@dataclass(frozen=True)
class Clause:
    """One ``Term`` of the query: field, analysed term and query-time boost."""

    field: str
    text: str
    boost: float


@dataclass
class ScanCache:
    """What one searcher's segments need decoded once: field lengths and deleted docnums.

    Keyed by segment position; valid as long as the searcher it was filled for.
    """

    _lengths: dict[tuple[int, str], np.ndarray] = field(default_factory=dict)
    _deleted: dict[int, np.ndarray] = field(default_factory=dict)

    def lengths(self, position: int, reader: SegmentReader, fieldname: str) -> np.ndarray:
        key = (position, fieldname)
        found = self._lengths.get(key)
        if found is None:
            found = self._lengths[key] = field_lengths(reader, fieldname)
        return found

    def deleted(self, position: int, reader: SegmentReader) -> np.ndarray:
        found = self._deleted.get(position)
        if found is None:
            docs = reader.deleted_docs_set if reader.has_deletions() else frozenset()
            found = self._deleted[position] = np.fromiter(docs, np.int64, len(docs))
        return found

    def clear(self) -> None:
        self._lengths.clear()
        self._deleted.clear()


def top_docs(
    searcher: Searcher,
    cache: ScanCache,
    clauses: Sequence[Clause],
    limit: int,
    allow: np.ndarray | None = None,
) -> list[tuple[float, int]]:
    """The best ``limit`` (score, docnum) for the OR of ``clauses``, best first.

    Equal scores are ordered by docnum, as Whoosh's collector orders them. ``allow`` is a
    boolean mask over the searcher's docnums (None: every document).
    """
    rows, scores = scored_docs(searcher, cache, clauses, allow)
    rows, best = best_rows(rows, scores, limit)
    return list(zip(best.tolist(), rows.tolist(), strict=True))


def scored_docs(
    searcher: Searcher,
    cache: ScanCache,
    clauses: Sequence[Clause],
    allow: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(docnums ascending, scores) of every live document the OR of ``clauses`` matches."""
    weighting = searcher.weighting
    if not isinstance(weighting, BM25F):
        raise TypeError(f"BM25F weighting required, got {type(weighting).__name__}")
    total = searcher.doc_count_all()
    scores = np.zeros(total)
    matched = np.zeros(total, bool)
    params = []
    for c in clauses:
        if c.boost == 0:
            continue
        b = field_b(weighting, c.field)
        avgfl = searcher.avg_field_length(c.field) or 1
        try:
            btext = searcher.schema[c.field].to_bytes(c.text)
        except ValueError:  # e.g. a lone surrogate: no indexed term can equal it
            continue
        params.append((c, btext, b, avgfl))
    k1 = weighting.K1
    for position, (leaf, offset) in enumerate(searcher.leaf_searchers()):
        reader = leaf.reader()
        for c, btext, b, avgfl in params:
            if (c.field, btext) not in reader:
                continue
            ids, tf = postings(reader, c.field, btext)
            fl = cache.lengths(position, reader, c.field)[ids]
            s = bm25(searcher.idf(c.field, btext), tf, fl, avgfl, b, k1)  # on whole arrays
            if c.boost != 1.0:
                s = s * c.boost
            scores[ids + offset] += s
            matched[ids + offset] = True
        matched[cache.deleted(position, reader) + offset] = False
    if allow is not None:
        matched &= allow
    rows = np.flatnonzero(matched)
    return rows, scores[rows]
