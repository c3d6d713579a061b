"""A Whoosh segment writer that takes documents as arrays and writes the segment in one pass.

Whoosh's ``SegmentWriter`` analyses, pools and sorts every posting as a Python tuple, then
writes term by term, block by block, posting by posting. :class:`BulkSegmentWriter` takes a
:class:`DocumentBlock` — each indexed field's (document, term) rows, stored fields, columns —
sorts every field's postings at once with numpy and encodes the files from the arrays
(:mod:`~knowledge_agent.search.whoosh_bulk_terms`,
:mod:`~knowledge_agent.search.whoosh_bulk_columns`).
The result is an ordinary Whoosh 3 segment: stock Whoosh, our codec's readers and
:mod:`~knowledge_agent.search.bm25_scan` read it through the same API, with the same terms,
frequencies, lengths, stored fields and scores as ``add_document`` would have given.

Everything else is Whoosh's: the lock, the TOC and generation, deletions, merge policies,
compound files, cancel. ``add_document`` still works (the document becomes a block of one)
and so does ``add_reader``, which merges read a segment's postings, lengths, columns and
stored fields as arrays (:mod:`~knowledge_agent.search.whoosh_bulk_read`), deleted documents
left out.

Only schemas whose indexed fields count frequencies or existence (``TEXT`` without
positions, ``ID``), without vectors or spelling, and whose columns are numeric can be
written so (:func:`supports_bulk`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from whoosh import fields as wf
from whoosh.codec.whoosh3 import W3Codec, _lenfield
from whoosh.columns import NumericColumn
from whoosh.formats import Existence, Frequency
from whoosh.index import FileIndex, LockError
from whoosh.reading import IndexReader
from whoosh.util.filelock import try_for
from whoosh.writing import SegmentWriter, UnknownFieldError

from knowledge_agent.search.whoosh_bulk_columns import (
    StoredValues,
    numeric_column,
    stored_column,
    write_compound,
)
from knowledge_agent.search.whoosh_bulk_terms import (
    FieldPostings,
    encode_postings,
    encode_terms,
    length_bytes,
)

__all__ = ["BulkSegmentWriter", "DocumentBlock", "FieldTerms", "supports_bulk"]


def supports_bulk(schema: wf.Schema) -> bool:
    """Whether :class:`BulkSegmentWriter` can write documents of ``schema``."""
    for name in schema.names():
        fobj = schema[name]
        if fobj.indexed and type(fobj.format) not in (Frequency, Existence):
            return False
        if fobj.vector or fobj.separate_spelling():
            return False
        column = fobj.column_type
        if column is not None and type(column) is not NumericColumn:
            return False
    return True


@dataclass(eq=False)
class FieldTerms:
    """One indexed field's terms in a block: row i adds ``freqs[i]`` (default 1) of term
    ``terms[ids[i]]`` to document ``docs[i]``; rows of the same pair add up."""

    terms: Sequence[bytes]
    docs: np.ndarray  # int64, block-local docnums
    ids: np.ndarray  # int64 indexes into terms
    freqs: np.ndarray | None = None  # None: 1 per row (a token stream)
    weights: np.ndarray | None = None  # None: freq × the field's boost
    rank: np.ndarray | None = None  # each term's rank in byte order, if known


@dataclass(eq=False)
class DocumentBlock:
    """Consecutive documents as arrays.

    ``lengths`` holds a scored field's length per document when it is not simply the sum of
    its frequencies (segments read back for a merge); ``columns`` one value per document of
    each column field the documents have (the column's default where one has none).
    """

    count: int
    fields: dict[str, FieldTerms]
    stored: StoredValues
    columns: dict[str, np.ndarray] = field(default_factory=dict)
    lengths: dict[str, np.ndarray] = field(default_factory=dict)


class BulkSegmentWriter(SegmentWriter):
    """A ``SegmentWriter`` whose segment is written from :class:`DocumentBlock` arrays."""

    def __init__(
        self,
        ix: FileIndex,
        *,
        codec: W3Codec,
        timeout: float = 0.0,
        delay: float = 0.1,
    ) -> None:
        # SegmentWriter.__init__, without the per-document writer and posting pool it would
        # create (and the files its field writer opens): the flush writes every file.
        self.writelock = ix.lock("WRITELOCK")
        if not try_for(self.writelock.acquire, timeout=timeout, delay=delay):
            raise LockError
        try:
            info = ix._read_toc()
            if not supports_bulk(info.schema):
                raise ValueError("this schema cannot be written in bulk")
            self.codec = codec
            self.storage = ix.storage
            self.indexname = ix.indexname
            self.generation = info.generation + 1
            self.schema = info.schema
            self.segments = info.segments
            self.docnum = self.docbase = 0
            self._setup_doc_offsets()
            self._temp: Any = None
            self.newsegment = codec.new_segment(self.storage, self.indexname)
            self.compound = self.newsegment.should_assemble()
        except BaseException:
            self.writelock.release()
            raise
        self.is_closed = False
        self._added = False
        self.pool = None
        self.merge = True
        self.optimize = False
        self.mergetype = None
        self._searcher = None
        self._blocks: list[DocumentBlock] = []

    @property
    def _tempstorage(self) -> Any:
        """Whoosh's temporary storage, created only if something asks for it: the bulk
        path never does (a memory index's is a folder shared by every process)."""
        if self._temp is None:
            self._temp = self.storage.temp_storage(f"{self.indexname}.tmp")
        return self._temp

    def _finish(self) -> None:
        if self._searcher is not None:
            self._searcher._orig_close()
            self._searcher = None
        if self._temp is not None:
            self._temp.destroy()
        if self.writelock:
            self.writelock.release()
        self.is_closed = True

    # -- adding --------------------------------------------------------------------------

    def add_block(self, block: DocumentBlock) -> None:
        """Add ``block.count`` documents, numbered after those added before."""
        self._check_state()
        if block.count:
            self._blocks.append(block)
            self.docnum += block.count
            self._added = True

    def add_document(self, **fields: Any) -> None:
        self._check_state()
        self.add_block(self._document_block(fields))

    def _document_block(self, fields: dict[str, Any]) -> DocumentBlock:
        """One document as a block, field by field as ``SegmentWriter.add_document`` does."""
        schema = self.schema
        docboost = self._doc_boost(fields)
        names = sorted(name for name in fields if not name.startswith("_"))
        for name in names:
            if name not in schema:
                raise UnknownFieldError(f"No field named {name!r} in {schema}")
        terms: dict[str, FieldTerms] = {}
        stored: dict[str, Any] = {}
        columns: dict[str, np.ndarray] = {}
        lengths: dict[str, np.ndarray] = {}
        for name in names:
            value = fields[name]
            if value is None:
                continue
            fobj = schema[name]
            if fobj.indexed:
                boost = self._field_boost(fields, name, docboost)
                items = list(fobj.index(value))
                n = len(items)
                terms[name] = FieldTerms(
                    [tbytes for tbytes, _, _, _ in items],
                    np.zeros(n, np.int64),
                    np.arange(n),
                    np.array([freq for _, freq, _, _ in items], np.int64),
                    np.array([weight * boost for _, _, weight, _ in items], np.float64),
                )
                if fobj.scorable:
                    lengths[name] = np.array([sum(freq for _, freq, _, _ in items)], np.int64)
            custom = fields.get(f"_stored_{name}", value)
            if fobj.stored:
                stored[name] = custom
            if fobj.column_type is not None and custom is not None:
                columns[name] = np.array([fobj.to_column_value(custom)])
        return DocumentBlock(1, terms, StoredValues.encode([stored]), columns, lengths)

    def add_reader(self, reader: IndexReader) -> None:
        from knowledge_agent.search.whoosh_bulk_read import segment_block

        self._check_state()
        self.add_block(segment_block(reader, self.schema))

    # -- writing -------------------------------------------------------------------------

    def _flush_segment(self) -> None:
        write_segment(
            self.storage,
            self.newsegment,
            self.schema,
            self._blocks,
            self.docnum,
            compound=self.compound,
        )

    def _assemble_segment(self) -> None:
        pass  # the flush wrote the compound file itself

    def _close_segment(self) -> None:
        self._blocks = []

    def _partial_segment(self) -> Any:
        raise NotImplementedError("a bulk segment writer is not a multiprocessing sub-writer")


# --------------------------------------------------------------------------- the flush


def _scored_lengths(
    name: str, blocks: Sequence[DocumentBlock], offsets: np.ndarray, total: int
) -> np.ndarray:
    """Every document's length of scored field ``name``."""
    lengths = np.zeros(total, np.int64)
    for block, offset in zip(blocks, offsets.tolist(), strict=True):
        given = block.lengths.get(name)
        if given is not None:
            lengths[offset : offset + block.count] = given
            continue
        terms = block.fields.get(name)
        if terms is not None:
            weights = None if terms.freqs is None else terms.freqs
            lengths[offset : offset + block.count] = np.bincount(
                terms.docs, weights=weights, minlength=block.count
            ).astype(np.int64)
    return lengths


def _field_postings(
    fobj: wf.FieldType,
    parts: Sequence[tuple[int, FieldTerms]],
    total: int,
    doc_bytes: np.ndarray | None,
) -> FieldPostings:
    """A field's rows from every block, as postings sorted by term bytes then docnum."""
    if len(parts) == 1:
        offset, only = parts[0]
        vocab: Sequence[bytes] = only.terms
        ids, docs = only.ids, only.docs + offset
    else:
        union = list(dict.fromkeys(t for _, part in parts for t in part.terms))
        index = dict(zip(union, range(len(union)), strict=True))
        vocab = union
        ids = np.concatenate(
            [
                np.fromiter(map(index.__getitem__, p.terms), np.int64, len(p.terms))[p.ids]
                for _, p in parts
            ]
        )
        docs = np.concatenate([p.docs + offset for offset, p in parts])
    present = np.flatnonzero(np.bincount(ids, minlength=len(vocab)))
    known = parts[0][1].rank if len(parts) == 1 else None
    if known is not None:
        ordered = present[np.argsort(known[present])].tolist()
    else:
        ordered = sorted(present.tolist(), key=vocab.__getitem__)
    rank = np.empty(len(vocab), np.int64)
    rank[ordered] = np.arange(len(ordered))
    keys = rank[ids] * total + docs
    boost = fobj.format.field_boost
    if all(part.freqs is None and part.weights is None for _, part in parts):
        keys, freqs = np.unique(keys, return_counts=True)
        weights = (freqs * boost).astype(np.float32)
    else:
        rows_freq = np.concatenate(
            [np.ones(p.ids.size, np.int64) if p.freqs is None else p.freqs for _, p in parts]
        )
        rows_weight = np.concatenate(
            [
                (np.ones(p.ids.size) if p.freqs is None else p.freqs) * boost
                if p.weights is None
                else p.weights
                for _, p in parts
            ]
        )
        order = np.argsort(keys, kind="stable")
        keys = keys[order]
        bounds = np.flatnonzero(np.diff(keys, prepend=-1))
        keys = keys[bounds]
        freqs = np.add.reduceat(rows_freq[order], bounds)
        weights = np.add.reduceat(rows_weight[order], bounds).astype(np.float32)
    term, doc = np.divmod(keys, total)
    starts = np.searchsorted(term, np.arange(len(ordered) + 1))
    return FieldPostings(
        terms=[vocab[i] for i in ordered],
        starts=starts.astype(np.int64),
        docs=doc,
        weights=weights,
        freqs=freqs if isinstance(fobj.format, Frequency) else None,
        doc_length_bytes=None if doc_bytes is None else doc_bytes[doc],
    )


def write_segment(
    storage: Any,
    segment: Any,
    schema: wf.Schema,
    blocks: Sequence[DocumentBlock],
    total: int,
    *,
    compound: bool,
) -> None:
    """Write the files of ``segment`` holding ``blocks`` (``total`` documents in all); with
    ``compound``, as the one compound file Whoosh would assemble from them."""
    counts = np.array([block.count for block in blocks], np.int64)
    offsets = np.cumsum(counts) - counts
    files: dict[str, bytes] = {}

    def column(name: str, data: bytes) -> None:
        files[f".{name}{W3Codec.COLUMN_EXT}"] = data

    column("_stored", stored_column(StoredValues.join([block.stored for block in blocks])))
    field_lengths: defaultdict[str, int] = defaultdict(int)
    doc_bytes: dict[str, np.ndarray] = {}
    names = sorted(schema.names())
    for name in names:
        fobj = schema[name]
        if fobj.indexed and fobj.scorable:
            lengths = _scored_lengths(name, blocks, offsets, total)
            if lengths.any():
                doc_bytes[name] = length_bytes(lengths)
                column(_lenfield(name), doc_bytes[name].tobytes().rstrip(b"\x00"))
                field_lengths[name] = int(lengths.sum())
        if fobj.column_type is not None and any(name in block.columns for block in blocks):
            coltype = fobj.column_type
            values = np.full(total, coltype._default, np.float64)
            for block, offset in zip(blocks, offsets.tolist(), strict=True):
                if name in block.columns:
                    values[offset : offset + block.count] = block.columns[name]
            column(name, numeric_column(values, coltype))
    segment._fieldlengths = field_lengths

    fieldmap: dict[str, int] = {}
    found = []
    for name in names:
        fobj = schema[name]
        parts = [
            (int(offset), block.fields[name])
            for block, offset in zip(blocks, offsets.tolist(), strict=True)
            if name in block.fields and block.fields[name].ids.size
        ]
        if fobj.indexed and parts:
            fieldmap[name] = len(fieldmap)
            found.append(_field_postings(fobj, parts, total, doc_bytes.get(name)))
    data, infos = encode_postings(found)
    files[W3Codec.POSTS_EXT] = data.tobytes()
    files[W3Codec.TERMS_EXT] = encode_terms(fieldmap, [f.terms for f in found], infos)
    if compound:
        f = segment.create_file(storage, segment.COMPOUND_EXT)
        write_compound(f, {segment.make_filename(ext): data for ext, data in files.items()})
        segment.compound = True
        return
    for ext, data in files.items():
        f = segment.create_file(storage, ext)
        try:
            f.write(data)
        finally:
            f.close()
