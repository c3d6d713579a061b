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

    fields: dict[str, FieldTerms] = {}
    indexed = [name for name in reader.indexed_field_names() if name in schema]
    for name in sorted(indexed):
        fobj = schema[name]
        if not fobj.indexed:
            continue
        boost = fobj.format.field_boost
        terms: list[bytes] = []
        docs, ids, weights = [], [], []
        for tbytes in reader.lexicon(name):
            found_docs, found_weights = postings(reader, name, tbytes)
            keep = live[found_docs]
            if not keep.any():
                continue
            ids.append(np.full(int(keep.sum()), len(terms), np.int64))
            terms.append(tbytes)
            docs.append(renumber[found_docs[keep]])
            weights.append(found_weights[keep])
        if terms:
            w = np.concatenate(weights)
            freqs = np.rint(w / boost).astype(np.int64) if boost else np.ones(w.size, np.int64)
            fields[name] = FieldTerms(terms, np.concatenate(docs), np.concatenate(ids), freqs, w)
    return DocumentBlock(count, fields, _stored(reader, live), columns, lengths)
