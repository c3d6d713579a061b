"""Whoosh's BM25F for a bag of terms, scored a posting block at a time with numpy.

Whoosh scores a query one posting at a time in Python: a 16-term question matching 16K of
100K chunks costs over 100 ms, nearly all of it matcher traversal. Here each posting block is
decoded as a whole and scored as an array, with the same formula, the same statistics (idf
and average length from the top-level searcher, lengths decoded from the same length byte)
and float64 arithmetic, so scores equal Whoosh's up to the order in which its matcher tree
adds the clauses (a few ulps). The tests compare both on random corpora.

Reading blocks uses ``W3LeafMatcher``'s block attributes (whoosh-reloaded 2.7.x, pinned in
``pyproject.toml``); any other matcher is read posting by posting through the public matcher
interface.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from whoosh.codec.whoosh3 import LENGTHS_COLUMN, W3LeafMatcher, _lenfield
from whoosh.matching import Matcher, WrappingMatcher
from whoosh.reading import SegmentReader
from whoosh.scoring import BM25F
from whoosh.searching import Searcher

from knowledge_agent.search.columns import column_values
from knowledge_agent.search.topk import best_rows
from knowledge_agent.search.whoosh_parts import LENGTH_OF_BYTE

__all__ = ["Clause", "ScanCache", "top_docs"]

# Byte 0 is a document without the field, which no posting of the field can point at.
_LENGTH_OF_BYTE = np.array([1.0 if n is None else float(n) for n in LENGTH_OF_BYTE])


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
            found = self._lengths[key] = _field_lengths(reader, fieldname)
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


def _field_lengths(reader: SegmentReader, fieldname: str) -> np.ndarray:
    n = reader.doc_count_all()
    perdoc = getattr(reader, "_perdoc", None)
    if perdoc is None or not hasattr(perdoc, "_cached_reader"):
        return np.fromiter(
            (reader.doc_field_length(d, fieldname, 1) for d in range(n)), np.float64, n
        )
    column = perdoc._cached_reader(_lenfield(fieldname), LENGTHS_COLUMN)
    if column is None:  # no document has this field: every length is the default
        return np.ones(n)
    return _LENGTH_OF_BYTE[column_values(column, n, "u1")]


def _postings(reader: SegmentReader, fieldname: str, btext: bytes) -> tuple[np.ndarray, np.ndarray]:
    """(docnums, term frequencies) of one term in one segment, deleted documents included."""
    m: Matcher = reader.postings(fieldname, btext)
    while isinstance(m, WrappingMatcher):  # the deleted-documents filter: applied by the caller
        m = m.child
    if isinstance(m, W3LeafMatcher) and not m._byteids:  # the codec's is a subclass
        return _block_postings(m)
    ids: list[int] = []
    weights: list[float] = []
    while m.is_active():
        ids.append(m.id())
        weights.append(m.weight())
        m.next()
    return np.array(ids, np.int64), np.array(weights, np.float64)


def _block_postings(m: W3LeafMatcher) -> tuple[np.ndarray, np.ndarray]:
    id_parts: list[np.ndarray] = []
    weight_parts: list[np.ndarray] = []
    while True:
        if m._data is None:
            m._read_data()
        deltas, weights = m._data[0], m._data[1]
        ids = np.cumsum(np.array(deltas, np.int64))  # block ids are delta-coded from 0
        id_parts.append(ids)
        if weights is None:
            weight_parts.append(np.ones(ids.size))
        elif isinstance(weights, float):
            weight_parts.append(np.full(ids.size, weights))
        else:
            weight_parts.append(np.asarray(weights, np.float64))
        if m._lastblock:
            break
        m._goto(m._nextoffset)
    return np.concatenate(id_parts), np.concatenate(weight_parts)


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
        b = weighting._field_B.get(c.field, weighting.B)
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
            ids, tf = _postings(reader, c.field, btext)
            fl = cache.lengths(position, reader, c.field)[ids]
            idf = searcher.idf(c.field, btext)
            # Whoosh's bm25(), operation for operation, so the floats agree exactly.
            s = idf * ((tf * (k1 + 1)) / (tf + k1 * ((1 - b) + b * fl / avgfl)))
            if c.boost != 1.0:
                s = s * c.boost
            scores[ids + offset] += s
            matched[ids + offset] = True
        matched[cache.deleted(position, reader) + offset] = False
    if allow is not None:
        matched &= allow
    rows = np.flatnonzero(matched)
    rows, best = best_rows(rows, scores[rows], limit)
    return list(zip(best.tolist(), rows.tolist(), strict=True))
