"""A segment read back as a
:class:`~knowledge_agent.backends.local.keyword.bulk_blocks.DocumentBlock`, for merging it
into a bulk writer's new segment.

Whoosh's ``add_reader`` copies a segment document by document and posting by posting; here
each part is read as arrays: the stored-fields column's bytes as they are (no unpickling),
length bytes and numeric columns at once, each field's postings a range of terms at a time
when the new segment is written (:class:`SegmentField`). Deleted documents are left out and
the others renumbered in order, as Whoosh does. A merged document's lengths are the lengths
its length byte stands for, as in Whoosh's merge.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from whoosh import fields as wf
from whoosh.codec.whoosh3 import LENGTHS_COLUMN, _lenfield
from whoosh.columns import VarBytesColumn
from whoosh.reading import SegmentReader

from knowledge_agent.backends.local.keyword.bulk_blocks import DocumentBlock, FieldTerms
from knowledge_agent.backends.local.keyword.bulk_columns import StoredValues
from knowledge_agent.backends.local.keyword.internals import LENGTH_OF_BYTE, column_values, postings
from knowledge_agent.backends.local.keyword.segment_arrays import SegmentTerms, read_terms
from knowledge_agent.search.analysed_batch import gather

__all__ = ["SegmentField", "segment_block"]

_LENGTHS = np.array([0 if n is None else n for n in LENGTH_OF_BYTE], np.int64)


def _stored(reader: SegmentReader, live: np.ndarray) -> StoredValues:
    perdoc = reader._perdoc
    n = live.size
    if not perdoc.has_column("_stored"):
        return StoredValues(b"", np.zeros(int(live.sum()), np.int64))
    colfile, offset, length = perdoc._get_column_file("_stored")
    column = VarBytesColumn.Reader(colfile, offset, length, n)
    lengths = np.frombuffer(column._lengths, column._lengths.typecode).astype(np.int64)
    starts = np.cumsum(lengths) - lengths
    data = np.frombuffer(colfile.get(offset, int(lengths.sum())), np.uint8)
    kept = lengths[live]
    return StoredValues(data[gather(starts[live], kept)].tobytes(), kept)


def _length_bytes(reader: SegmentReader, name: str) -> np.ndarray | None:
    column = reader._perdoc._cached_reader(_lenfield(name), LENGTHS_COLUMN)
    if column is None:
        return None
    return column_values(column, reader.doc_count_all(), "u1")


class SegmentField:
    """One field of a segment being merged, as a
    :class:`~knowledge_agent.backends.local.keyword.bulk_blocks.TermSource`: its postings are read
    from the segment's files (as arrays when :mod:`.whoosh_segment_arrays` can, else term
    by term through Whoosh) only when the new segment asks for a range of its terms."""

    def __init__(
        self,
        reader: SegmentReader,
        name: str,
        boost: float,
        found: SegmentTerms | None,
        live: np.ndarray,
        renumber: np.ndarray,
    ) -> None:
        self._reader, self._name, self._boost = reader, name, boost
        self._found, self._live, self._renumber = found, live, renumber
        if found is not None:
            self._first, end = found.fields.get(name, (0, 0))
            self.terms: Sequence[bytes] = found.terms[self._first : end]
            self._sizes = found.info["df"][self._first : end].astype(np.int64)
        else:
            self._first = 0
            self.terms = list(reader.lexicon(name))
            info = reader._terms.term_info
            self._sizes = np.array([info(name, t).doc_frequency() for t in self.terms], np.int64)

    def sizes(self) -> np.ndarray:
        return self._sizes

    def read(self, lo: int, hi: int) -> FieldTerms:
        found = None
        if self._found is not None:
            found = self._found.postings(self._first + lo, self._first + hi)
        if found is not None:
            term, docs, weights = found
            term = term - self._first
        else:  # not a layout the array reader knows: term by term through Whoosh
            read = [postings(self._reader, self._name, t) for t in self.terms[lo:hi]]
            counts = [found_docs.size for found_docs, _ in read]
            term = np.repeat(np.arange(lo, hi), counts)
            docs = np.concatenate([d for d, _ in read]) if read else np.zeros(0, np.int64)
            weights = np.concatenate([w for _, w in read]) if read else np.zeros(0)
        keep = self._live[docs]
        weights = weights[keep]
        boost = self._boost
        freqs = np.rint(weights / boost).astype(np.int64) if boost else np.ones(weights.size, int)
        return FieldTerms(self.terms, self._renumber[docs[keep]], term[keep], freqs, weights)


def segment_block(reader: SegmentReader, schema: wf.Schema) -> DocumentBlock:
    """The live documents of the segment ``reader`` reads, for a writer of ``schema``; their
    postings are read from ``reader`` when the block is written: keep it open until then."""
    n = reader.doc_count_all()
    live = np.ones(n, bool)
    if reader.has_deletions():
        live[list(reader.segment().deleted_docs())] = False
    renumber = np.cumsum(live) - 1
    count = int(live.sum())
    perdoc = reader._perdoc

    lengths: dict[str, np.ndarray] = {}
    columns: dict[str, np.ndarray] = {}
    for name in schema.names():
        fobj = schema[name]
        if fobj.indexed and fobj.scorable:
            found = _length_bytes(reader, name)
            if found is not None:
                lengths[name] = _LENGTHS[found][live]
        coltype = fobj.column_type
        if coltype is not None and perdoc.has_column(name):
            values = column_values(perdoc.column_reader(name, coltype), n, ">" + coltype._typecode)
            columns[name] = values[live]

    terms = read_terms(reader._terms)
    sources = {
        name: SegmentField(reader, name, schema[name].format.field_boost, terms, live, renumber)
        for name in reader.indexed_field_names()
        if name in schema and schema[name].indexed
    }
    return DocumentBlock(count, {}, _stored(reader, live), columns, lengths, sources)
