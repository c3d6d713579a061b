"""A segment read back as a :class:`~knowledge_agent.search.whoosh_bulk.DocumentBlock`, for
merging it into a bulk writer's new segment.

Whoosh's ``add_reader`` copies a segment document by document and posting by posting; here
each part is read as arrays: the stored-fields column's bytes as they are (no unpickling),
length bytes, numeric columns and every term's postings. Deleted documents are left out and
the others renumbered in order, as Whoosh does. A merged document's lengths are the lengths
its length byte stands for, as in Whoosh's merge.
"""

from __future__ import annotations

import numpy as np
from whoosh import fields as wf
from whoosh.codec.whoosh3 import LENGTHS_COLUMN, _lenfield
from whoosh.columns import VarBytesColumn
from whoosh.reading import SegmentReader

from knowledge_agent.search.analysed_batch import gather
from knowledge_agent.search.whoosh_bulk import DocumentBlock, FieldTerms
from knowledge_agent.search.whoosh_bulk_columns import StoredValues
from knowledge_agent.search.whoosh_internals import LENGTH_OF_BYTE, column_values, postings
from knowledge_agent.search.whoosh_segment_arrays import read_postings

__all__ = ["segment_block"]

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


def _field_terms(
    terms: list[bytes], term: np.ndarray, docs: np.ndarray, weights: np.ndarray, boost: float
) -> FieldTerms:
    freqs = np.rint(weights / boost).astype(np.int64) if boost else np.ones(docs.size, np.int64)
    # Terms arrive in byte order: their rank is their position.
    return FieldTerms(terms, docs, term, freqs, weights, rank=np.arange(len(terms)))


def _postings(
    reader: SegmentReader, schema: wf.Schema, live: np.ndarray, renumber: np.ndarray
) -> dict[str, FieldTerms]:
    """Each indexed field's postings of the live documents, renumbered."""
    found = read_postings(reader._terms)
    fields: dict[str, FieldTerms] = {}
    if found is None:  # not a layout the array reader knows: term by term through Whoosh
        for name in sorted(reader.indexed_field_names()):
            if name not in schema or not schema[name].indexed:
                continue
            terms: list[bytes] = []
            ids, docs, weights = [], [], []
            for tbytes in reader.lexicon(name):
                found_docs, found_weights = postings(reader, name, tbytes)
                ids.append(np.full(found_docs.size, len(terms), np.int64))
                terms.append(tbytes)
                docs.append(found_docs)
                weights.append(found_weights)
            if terms:
                term, doc = np.concatenate(ids), np.concatenate(docs)
                keep = live[doc]
                fields[name] = _field_terms(
                    terms,
                    term[keep],
                    renumber[doc[keep]],
                    np.concatenate(weights)[keep],
                    schema[name].format.field_boost,
                )
        return fields
    keep = live[found.docs]
    term, docs, weights = found.term_of[keep], renumber[found.docs[keep]], found.weights[keep]
    for name, (first, end) in found.fields.items():
        if name not in schema or not schema[name].indexed:
            continue
        lo, hi = np.searchsorted(term, [first, end])
        fields[name] = _field_terms(
            found.terms[first:end],
            term[lo:hi] - first,
            docs[lo:hi],
            weights[lo:hi],
            schema[name].format.field_boost,
        )
    return fields


def segment_block(reader: SegmentReader, schema: wf.Schema) -> DocumentBlock:
    """The live documents of the segment ``reader`` reads, for a writer of ``schema``."""
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

    fields = _postings(reader, schema, live, renumber)
    return DocumentBlock(count, fields, _stored(reader, live), columns, lengths)
