"""Every read of Whoosh's private attributes on the query path, behind one version check.

Reading posting blocks, length columns and numeric columns as whole arrays needs
``W3LeafMatcher``'s block attributes, ``W3PerDocReader``'s column cache and
``NumericColumn.Reader``'s layout: private parts of whoosh-reloaded that this package was
written and tested against (:data:`TESTED_VERSIONS`). On any other installed version,
:data:`FAST_PATHS` is False and every function here reads through Whoosh's public interface
instead — the matcher posting by posting, ``doc_field_length`` and column indexing — which
gives the same values, only slower. The tests run the score-equivalence checks both ways.

The codec, storage and posting-pool classes of
:mod:`~knowledge_agent.backends.local.keyword.parts` and
:mod:`~knowledge_agent.backends.local.keyword.safe` subclass Whoosh's and are checked by their
own tests;
:func:`in_place_reading` and :func:`compact_posting_pool` say whether their speed-ups apply.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import whoosh
from whoosh.codec.whoosh3 import LENGTHS_COLUMN, W3LeafMatcher, _lenfield
from whoosh.matching import Matcher, WrappingMatcher
from whoosh.reading import SegmentReader
from whoosh.scoring import BM25F
from whoosh.util.numeric import byte_to_length

__all__ = [
    "FAST_PATHS",
    "LENGTH_OF_BYTE",
    "TESTED_VERSIONS",
    "WHOOSH_VERSION",
    "bulk_writing",
    "column_values",
    "compact_posting_pool",
    "field_b",
    "field_lengths",
    "in_place_reading",
    "postings",
]

logger = logging.getLogger(__name__)

WHOOSH_VERSION: tuple[int, ...] = tuple(whoosh.__version__[:3])
TESTED_VERSIONS: frozenset[tuple[int, ...]] = frozenset({(2, 7, 5)})

FAST_PATHS: bool = WHOOSH_VERSION in TESTED_VERSIONS
"""Whether Whoosh's private attributes are read directly (only on a tested version)."""

if not FAST_PATHS:
    logger.warning(
        "whoosh %s is not a version knowledge_agent was tested with (%s): keyword search "
        "reads postings through Whoosh's public interface, which is slower",
        whoosh.versionstring(),
        ", ".join(".".join(map(str, v)) for v in sorted(TESTED_VERSIONS)),
    )

LENGTH_OF_BYTE: list[int | None] = [None, *(byte_to_length(b) for b in range(1, 256))]
"""Whoosh's field length for each length byte; byte 0 (no term in the field) reads as None."""

# Byte 0 is a document without the field, which no posting of the field can point at.
_LENGTH_ARRAY = np.array([1.0 if n is None else float(n) for n in LENGTH_OF_BYTE])


def in_place_reading() -> bool:
    """Whether segment files may be read in place from the memory map."""
    return FAST_PATHS


def bulk_writing() -> bool:
    """Whether writers may be :class:`~.bulk.BulkSegmentWriter` (which sets up a
    ``SegmentWriter`` itself and writes Whoosh 3's segment files directly)."""
    return FAST_PATHS


def compact_posting_pool() -> bool:
    """Whether writers may pool postings in a :class:`~.parts.PostingTable`."""
    return FAST_PATHS


def field_b(weighting: BM25F, fieldname: str) -> float:
    """BM25F's length normalisation ``B`` for one field (its per-field override, if any)."""
    per_field = getattr(weighting, "_field_B", {})  # where every version keeps ``{field}_B``
    return float(per_field.get(fieldname, weighting.B))


def column_values(column: Any, n: int, dtype: np.dtype[Any] | str) -> np.ndarray:
    """The ``n`` values of a fixed-size numeric column reader (``NumericColumn``'s), in one read.

    Whoosh writes such a column up to its last non-default value, so the rest is the
    column's default. ``dtype`` is the column's packed type (``">f8"`` for ``"d"``, ``"u1"``
    for ``"B"``). Readers of another kind, or any reader without :data:`FAST_PATHS`, are
    read value by value.
    """
    dtype = np.dtype(dtype)
    dbfile = getattr(column, "_dbfile", None) if FAST_PATHS else None
    if dbfile is None or getattr(column, "_fixedlen", None) != dtype.itemsize:
        return np.fromiter((column[d] for d in range(n)), dtype, n)
    count = min(int(column._count), n)
    out = np.full(n, column._default, dtype)
    if count:
        out[:count] = np.frombuffer(dbfile.get(column._basepos, count * dtype.itemsize), dtype)
    return out


def field_lengths(reader: SegmentReader, fieldname: str) -> np.ndarray:
    """Every document's length of ``fieldname`` in one segment, as Whoosh scores with it
    (decoded from the same length byte)."""
    n = reader.doc_count_all()
    perdoc = getattr(reader, "_perdoc", None) if FAST_PATHS else None
    if perdoc is None or not hasattr(perdoc, "_cached_reader"):
        return np.fromiter(
            (reader.doc_field_length(d, fieldname, 1) for d in range(n)), np.float64, n
        )
    column = perdoc._cached_reader(_lenfield(fieldname), LENGTHS_COLUMN)
    if column is None:  # no document has this field: every length is the default
        return np.ones(n)
    return _LENGTH_ARRAY[column_values(column, n, "u1")]


def postings(reader: SegmentReader, fieldname: str, btext: bytes) -> tuple[np.ndarray, np.ndarray]:
    """(docnums, term frequencies) of one term in one segment, deleted documents included."""
    m: Matcher = reader.postings(fieldname, btext)
    while isinstance(m, WrappingMatcher):  # the deleted-documents filter: applied by the caller
        m = m.child
    if FAST_PATHS and isinstance(m, W3LeafMatcher) and not m._byteids:
        return _block_postings(m)
    ids: list[int] = []
    weights: list[float] = []
    while m.is_active():
        ids.append(m.id())
        weights.append(m.weight())
        m.next()
    return np.array(ids, np.int64), np.array(weights, np.float64)


def _block_postings(m: W3LeafMatcher) -> tuple[np.ndarray, np.ndarray]:
    """A leaf matcher's postings decoded a whole block at a time."""
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
