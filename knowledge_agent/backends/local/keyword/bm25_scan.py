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

A term's scores depend only on the searcher (idf and average length are its statistics), so
each term's live documents and unboosted scores over all segments are kept for the searcher's
lifetime, up to a budget of postings: a common word ("use", "file") then costs one array
addition a query instead of decoding its blocks in every segment again.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
from whoosh.reading import SegmentReader, TermNotFound
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


TermScores = tuple[np.ndarray, np.ndarray]
"""(docnums ascending, unboosted BM25F scores) of one term's live documents in a searcher."""

TERM_BUDGET = 2_000_000
"""Postings a searcher's term cache holds at most (12 bytes each: about 24 MB)."""

_V = TypeVar("_V")

_IDF_KEPT = 100_000  # idf values a searcher's cache holds before it starts again
_STORED_KEPT = 20_000  # documents' stored fields a searcher's cache holds (a few MB)


@dataclass
class ScanCache:
    """What one searcher needs decoded once: field lengths and deleted docnums (keyed by
    segment position) and the scores of recently queried terms (least recently used dropped
    past ``budget`` postings). Valid as long as the searcher it was filled for.
    """

    budget: int = TERM_BUDGET
    _lengths: dict[tuple[int, str], np.ndarray] = field(default_factory=dict)
    _deleted: dict[int, np.ndarray] = field(default_factory=dict)
    _terms: OrderedDict[tuple[str, bytes], TermScores] = field(default_factory=OrderedDict)
    _held: int = 0
    _idf: dict[tuple[str, bytes], float] = field(default_factory=dict)
    _stored: OrderedDict[int, dict[str, Any]] = field(default_factory=OrderedDict)
    _df: dict[tuple[str, bytes], int] = field(default_factory=dict)

    def doc_frequency(self, searcher: Searcher, fieldname: str, btext: bytes) -> int:
        """How many of the searcher's documents hold a term (summed over segments), once."""
        return _kept(
            self._df, (fieldname, btext), lambda: int(searcher.doc_frequency(fieldname, btext))
        )

    def stored(self, searcher: Searcher, docnum: int) -> dict[str, Any]:
        """A document's stored fields (its keys), unpickled once while recently used."""
        found = self._stored.get(docnum)
        if found is None:
            found = self._stored[docnum] = searcher.stored_fields(docnum)
            if len(self._stored) > _STORED_KEPT:
                self._stored.popitem(last=False)
        else:
            self._stored.move_to_end(docnum)
        return found

    def idf(self, searcher: Searcher, fieldname: str, btext: bytes) -> float:
        """The searcher's idf of a term (a doc frequency summed over every segment), once."""
        return _kept(self._idf, (fieldname, btext), lambda: float(searcher.idf(fieldname, btext)))

    def term(self, key: tuple[str, bytes], score: Callable[[], TermScores]) -> TermScores:
        """The scores of term ``key`` (field, bytes): cached, else ``score()`` kept."""
        found = self._terms.get(key)
        if found is not None:
            self._terms.move_to_end(key)
            return found
        found = score()
        size = int(found[0].size)
        if size <= self.budget:
            self._terms[key] = found
            self._held += size
            while self._held > self.budget:
                _, (dropped, _) = self._terms.popitem(last=False)
                self._held -= int(dropped.size)
        return found

    @property
    def held(self) -> int:
        """Postings the term cache holds."""
        return self._held

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
        self._terms.clear()
        self._held = 0
        self._idf.clear()
        self._stored.clear()
        self._df.clear()


def _kept(cache: dict[Any, _V], key: Any, read: Callable[[], _V]) -> _V:
    """``cache[key]``, else ``read()`` kept there (the cache starts again past
    :data:`_IDF_KEPT` entries)."""
    found = cache.get(key)
    if found is None:
        if len(cache) >= _IDF_KEPT:
            cache.clear()
        found = cache[key] = read()
    return found


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
    for c in clauses:
        if c.boost == 0:
            continue
        try:
            btext = searcher.schema[c.field].to_bytes(c.text)
        except ValueError:  # e.g. a lone surrogate: no indexed term can equal it
            continue
        ids, s = cache.term(
            (c.field, btext), lambda c=c, btext=btext: _term_scores(searcher, cache, c.field, btext)
        )
        if c.boost != 1.0:
            s = s * c.boost
        # Adding clause by clause keeps each document's sum in the order Whoosh adds.
        scores[ids] += s
        matched[ids] = True
    if allow is not None:
        matched &= allow
    rows = np.flatnonzero(matched)
    return rows, scores[rows]


def _term_scores(searcher: Searcher, cache: ScanCache, fieldname: str, btext: bytes) -> TermScores:
    """One term's live docnums over all segments and their unboosted BM25F scores."""
    weighting = searcher.weighting
    b = field_b(weighting, fieldname)
    avgfl = searcher.avg_field_length(fieldname) or 1
    idf = cache.idf(searcher, fieldname, btext)
    id_parts: list[np.ndarray] = []
    score_parts: list[np.ndarray] = []
    for position, (leaf, offset) in enumerate(searcher.leaf_searchers()):
        reader = leaf.reader()
        try:
            ids, tf = postings(reader, fieldname, btext)
        except TermNotFound:  # one lookup of the term, not a test and then a lookup
            continue
        fl = cache.lengths(position, reader, fieldname)[ids]
        s = bm25(idf, tf, fl, avgfl, b, weighting.K1)  # on whole arrays
        deleted = cache.deleted(position, reader)
        if deleted.size:
            live = ~np.isin(ids, deleted)
            ids, s = ids[live], s[live]
        id_parts.append(ids + offset)
        score_parts.append(np.asarray(s, np.float64))
    if not id_parts:
        return np.zeros(0, np.int64), np.zeros(0)
    dtype = np.int32 if searcher.doc_count_all() < 2**31 else np.int64
    return np.concatenate(id_parts).astype(dtype), np.concatenate(score_parts)
