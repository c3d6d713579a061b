"""The terms and postings of a Whoosh 3 segment, read as arrays in a few passes.

A merge needs a whole segment's postings. Read term by term through matchers that is a few
Python calls per term and per block — tens of seconds for the 80,000 documents of a merged
tier. Here the terms table is read from its record index, and the postings of a range of
terms are parsed with numpy, all their blocks at once: block chains in step (one pass per
block of the longest list), the pickled tuples element by element across every block (one
pass per posting of the longest block).

The parser reads the pickles :mod:`~knowledge_agent.backends.local.keyword.bulk_terms` writes (any
integer opcode, weights as ``None``, one float or a ``MARK``-delimited tuple of ints or
floats) and Whoosh's own where they agree. A segment holding anything else — inlined
postings, blocks pickled differently — gives ``None``, and the caller reads it through
Whoosh.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass
from typing import Any

import numpy as np

from knowledge_agent.backends.local.keyword.bulk_terms import TERM_INFO
from knowledge_agent.search.analysed_batch import gather
from knowledge_agent.search.distinct import distinct

__all__ = ["SegmentTerms", "read_terms"]

logger = logging.getLogger(__name__)

_PROTO, _MARK, _TUPLE, _STOP, _PUT = 0x80, ord("("), ord("t"), ord("."), ord("q")
_NONE, _FLOAT = ord("N"), ord("G")
_INT1, _INT2, _INT4 = ord("K"), ord("M"), ord("J")
_MAGIC = np.frombuffer(b"W3Bl", np.uint8)
_INFO = TERM_INFO
_WIDTH = np.full(256, -1, np.int64)  # payload bytes of an integer opcode; -1: not an integer
_WIDTH[[_INT1, _INT2, _INT4]] = [1, 2, 4]


class _Unreadable(Exception):
    """A layout this parser does not read."""


@dataclass(eq=False)
class SegmentTerms:
    """Every term of a segment, in key order (``fields[f]`` is field f's ``(first, end)``
    range), and its postings read a range of terms at a time."""

    fields: dict[str, tuple[int, int]]
    terms: list[bytes]
    info: np.ndarray  # the term infos: doc frequency, postings offset and length, ...
    postfile: Any

    def postings(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """(term of each posting, docnums, weights) of terms ``lo`` to ``hi``, ordered by term
        then docnum, deleted documents included; None when this parser cannot read them."""
        if hi <= lo:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
        info = self.info[lo:hi]
        offsets = info["offset"].astype(np.int64)
        start = int(offsets.min())
        end = int((offsets + info["length"]).max())
        try:
            buf = np.frombuffer(self.postfile.get(start, end - start), np.uint8)
            term_of, docs, weights = _parse(buf, offsets - start)
        except (_Unreadable, IndexError, ValueError) as exc:
            logger.debug("segment postings not read as arrays: %r", exc)
            return None
        if (np.bincount(term_of, minlength=hi - lo) != info["df"]).any():
            return None
        return term_of + lo, docs, weights


def _u32(buf: np.ndarray, pos: np.ndarray) -> np.ndarray:
    raw = buf[pos[:, None] + np.arange(4)]
    return raw.view(">u4").ravel().astype(np.int64)


def _ints(buf: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(values, positions after) of the pickled ints at ``pos``."""
    width = _WIDTH[buf[pos]]
    if (width < 0).any():
        raise _Unreadable
    values = np.zeros(pos.size, np.int64)
    for w, dtype in ((1, "<u1"), (2, "<u2"), (4, "<i4")):
        at = pos[width == w]
        if at.size:
            raw = np.ascontiguousarray(buf[at[:, None] + 1 + np.arange(w)])
            values[width == w] = raw.view(dtype).ravel()
    return values, pos + 1 + width


def _numbers(buf: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(values, positions after) of the pickled ints or floats at ``pos``."""
    is_float = buf[pos] == _FLOAT
    values = np.zeros(pos.size)
    after = pos + 9
    if is_float.any():
        values[is_float] = _floats(buf, pos[is_float])
    if not is_float.all():
        values[~is_float], after[~is_float] = _ints(buf, pos[~is_float])
    return values, after


def _floats(buf: np.ndarray, pos: np.ndarray) -> np.ndarray:
    if (buf[pos] != _FLOAT).any():
        raise _Unreadable
    raw = np.ascontiguousarray(buf[pos[:, None] + 1 + np.arange(8)])
    return raw.view(">f8").ravel().astype(np.float64)


def _expect(buf: np.ndarray, pos: np.ndarray, opcode: int) -> np.ndarray:
    if (buf[pos] != opcode).any():
        raise _Unreadable
    return pos + 1


def _opening(buf: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Past ``PROTO 2, MARK``: the start of a pickled tuple of many."""
    return _expect(buf, _expect(buf, pos, _PROTO) + 1, _MARK)


def _skip_put(buf: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Past a memo BINPUT (Whoosh's pickles have them, ours do not)."""
    return pos + 2 * (buf[pos] == _PUT)


def _terms(tindex: Any) -> tuple[dict[str, tuple[int, int]], list[bytes], np.ndarray]:
    """(field term ranges, term bytes, term infos) from an ``OrderedHashReader``."""
    dbfile = tindex.dbfile
    indextype = tindex.extras["indextype"]
    n = int(tindex.indexlen)
    where = np.frombuffer(dbfile.get(tindex.indexbase, n * tindex.indexsize), ">" + indextype)
    start, end = tindex.startofdata, tindex.endofdata
    buf = np.frombuffer(dbfile.get(start, end - start), np.uint8)
    pos = where.astype(np.int64) - start
    key_len = _u32(buf, pos)
    value_len = _u32(buf, pos + 4)
    if n and (value_len != _INFO.itemsize).any():
        raise _Unreadable  # inlined postings
    # A key is the field number (2 bytes) then the term.
    numbers = buf[pos + 8].astype(np.int64) << 8 | buf[pos + 9]
    blob = buf[gather(pos + 10, key_len - 2)].tobytes()
    bounds = np.concatenate([[0], np.cumsum(key_len - 2)]).tolist()
    terms = [blob[a:b] for a, b in itertools.pairwise(bounds)]
    infos = np.ascontiguousarray(buf[(pos + 8 + key_len)[:, None] + np.arange(_INFO.itemsize)])
    info = infos.view(_INFO).ravel()
    if (info["flags"] != 0).any():
        raise _Unreadable
    names = {number: name for name, number in tindex.extras["fieldmap"].items()}
    fields: dict[str, tuple[int, int]] = {}
    for number in distinct(numbers).tolist():
        found = np.flatnonzero(numbers == number)
        fields[names[number]] = (int(found[0]), int(found[-1]) + 1)
    return fields, terms, info


def _blocks(buf: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(term, position, byte length) of every posting block, in term then file order."""
    if buf.size < 4 or (buf[offsets[:, None] + np.arange(4)] != _MAGIC).any():
        raise _Unreadable
    terms, places, sizes = [], [], []
    term = np.arange(offsets.size)
    pos = offsets + 4
    while term.size:
        length = _u32(buf, pos).astype(np.uint32).view(np.int32).astype(np.int64)
        terms.append(term)
        places.append(pos)
        sizes.append(np.abs(length))
        more = length > 0
        term, pos = term[more], (pos + 4 + np.abs(length))[more]
    term, place, size = (np.concatenate(parts) for parts in (terms, places, sizes))
    order = np.lexsort((place, term))
    return term[order], place[order], size[order]


def _parse(buf: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(term of each posting, docnums, weights) of the postings starting at ``offsets``."""
    term, place, size = _blocks(buf, offsets)
    # The info tuple: (count, last id, max weight, compression, min length, max length).
    p = _opening(buf, place + 4)
    count, p = _ints(buf, p)
    _, p = _ints(buf, p)
    _floats(buf, p)
    compression, p = _ints(buf, p + 9)
    if compression.any():
        raise _Unreadable
    for _ in range(2):
        _, p = _ints(buf, p)
    p = _expect(buf, _skip_put(buf, _expect(buf, p, _TUPLE)), _STOP)
    # The data tuple: (ids as deltas, weights, values).
    p = _opening(buf, p)
    first = np.cumsum(count) - count
    deltas = np.zeros(int(count.sum()), np.int64)
    # Blocks with the most postings first: those still being read are a prefix.
    order = np.argsort(-count, kind="stable")
    sorted_count, at = count[order], p[order]
    for k in range(int(sorted_count[0]) if count.size else 0):
        live = int(np.searchsorted(-sorted_count, -k, side="left"))
        values, at[:live] = _ints(buf, at[:live])
        deltas[first[order[:live]] + k] = values
    p = np.empty_like(p)
    p[order] = at
    p = _skip_put(buf, _expect(buf, p, _TUPLE))
    weights = np.ones(deltas.size)
    posting_block = np.repeat(np.arange(count.size), count)
    mode = buf[p]
    single = mode == _FLOAT
    if single.any():
        weights[single[posting_block]] = np.repeat(_floats(buf, p[single]), count[single])
    listed = np.flatnonzero(mode == _MARK)
    if listed.size:
        # Ints or floats, any mix: element by element, like the ids.
        order = listed[np.argsort(-count[listed], kind="stable")]
        sorted_count, at = count[order], p[order] + 1
        for k in range(int(sorted_count[0])):
            live = int(np.searchsorted(-sorted_count, -k, side="left"))
            values, at[:live] = _numbers(buf, at[:live])
            weights[first[order[:live]] + k] = values
        _expect(buf, at, _TUPLE)
    if not np.isin(mode, (_FLOAT, _MARK, _NONE)).all():
        raise _Unreadable
    _expect(buf, place + 4 + size - 1, _STOP)
    prefix = np.cumsum(deltas)
    docs = prefix - np.repeat(prefix[first] - deltas[first], count)
    return np.repeat(term, count), docs, weights


def read_terms(terms_reader: Any) -> SegmentTerms | None:
    """The terms of the segment ``terms_reader`` (a ``W3TermsReader``) reads, whose postings
    can be read as arrays; None when its terms table holds what this reader does not read."""
    try:
        fields, terms, info = _terms(terms_reader._tindex)
    except (_Unreadable, IndexError, ValueError) as exc:
        logger.debug("segment terms not read as arrays: %r", exc)
        return None
    return SegmentTerms(fields, terms, info, terms_reader._postfile)
