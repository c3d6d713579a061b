"""A Whoosh segment writer that takes documents as arrays and writes the segment in one pass.

Whoosh's ``SegmentWriter`` analyses, pools and sorts every posting as a Python tuple, then
writes term by term, block by block, posting by posting. :class:`BulkSegmentWriter` takes a
:class:`DocumentBlock` — each indexed field's (document, term) rows, stored fields, columns —
sorts every field's postings at once with numpy and encodes the files from the arrays
(:mod:`~knowledge_agent.backends.local.keyword.bulk_terms`,
:mod:`~knowledge_agent.backends.local.keyword.bulk_columns`).
The result is an ordinary Whoosh 3 segment: stock Whoosh, our codec's readers and
:mod:`~knowledge_agent.backends.local.keyword.bm25_scan` read it through the same API, with the
same terms, frequencies, lengths, stored fields and scores as ``add_document`` would have given.

Everything else is Whoosh's: the lock, the TOC and generation, deletions, merge policies,
compound files, cancel. ``add_document`` still works (the document becomes a block of one)
and so does ``add_reader``, through which merges read a segment's lengths, columns and
stored fields as arrays and its postings a range of terms at a time as the new segment is
written (:mod:`~knowledge_agent.backends.local.keyword.bulk_read`,
:mod:`~knowledge_agent.backends.local.keyword.bulk_write`), deleted documents left out.

Only schemas whose indexed fields count frequencies or existence (``TEXT`` without
positions, ``ID``), without vectors or spelling, and whose columns are numeric can be
written so (:func:`supports_bulk`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from whoosh import fields as wf
from whoosh.codec.whoosh3 import W3Codec
from whoosh.columns import NumericColumn
from whoosh.formats import Existence, Frequency
from whoosh.index import FileIndex, LockError
from whoosh.reading import IndexReader, SegmentReader
from whoosh.util.filelock import try_for
from whoosh.writing import SegmentWriter, UnknownFieldError

from knowledge_agent.backends.local.keyword.bulk_blocks import DocumentBlock, FieldTerms, TermSource
from knowledge_agent.backends.local.keyword.bulk_columns import StoredValues
from knowledge_agent.backends.local.keyword.bulk_read import segment_block
from knowledge_agent.backends.local.keyword.bulk_write import (
    SegmentJob,
    jointly_writable,
    write_segment,
    write_segments,
)

__all__ = [
    "BulkSegmentWriter",
    "DocumentBlock",
    "FieldTerms",
    "TermSource",
    "supports_bulk",
    "write_together",
]


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
        self._readers: list[SegmentReader] = []  # segments being merged, read at the flush
        self._written: list[DocumentBlock] | None = None  # blocks already in the files

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
        """Add the live documents of ``reader``'s segments; their postings are read when the
        segment is written, through readers of this writer's own (the caller may close
        ``reader`` at once, as Whoosh's merge policies do)."""
        self._check_state()
        for leaf, _ in reader.leaf_readers():
            own = SegmentReader(self.storage, self.schema, leaf.segment(), codec=self.codec)
            self._readers.append(own)
            self.add_block(segment_block(own, self.schema))

    # -- writing -------------------------------------------------------------------------

    def _job(self) -> SegmentJob:
        return SegmentJob(
            self.storage, self.newsegment, self.schema, self._blocks, self.docnum, self.compound
        )

    def _flush_segment(self) -> None:
        if self._written is not None and self._written == self._blocks:
            return  # written by write_together, and no merge has added to it since
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
        readers, self._readers = self._readers, []
        for reader in readers:
            reader.close()

    def _partial_segment(self) -> Any:
        raise NotImplementedError("a bulk segment writer is not a multiprocessing sub-writer")


def write_together(writers: Sequence[BulkSegmentWriter]) -> bool:
    """Write the new segment of each writer (of different indexes: the chunk and item
    indexes of one update) before their commits, in one pass (:func:`write_segments`), when
    each is a small write; their commits then only record the segments. False (nothing
    written) otherwise. A commit whose merge adds documents after all writes its segment
    again, whole."""
    jobs = [writer._job() for writer in writers]
    if not jobs or not all(jointly_writable(job) for job in jobs):
        return False
    write_segments(jobs)
    for writer in writers:
        writer._written = list(writer._blocks)
    return True
