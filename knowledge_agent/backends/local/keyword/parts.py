"""Drop-ins for the Whoosh parts that indexing and opening an index spend their time and
memory in.

Each writes and reads files stock Whoosh reads; the field and codec classes are pickled into
an index's TOC by reference, so their module path is part of the on-disk format. The codec
reads every pickle in a segment with :mod:`~knowledge_agent.backends.local.keyword.safe`'s
restricted unpickler, whatever storage it is given.
"""

from __future__ import annotations

import zlib
from array import array
from collections import Counter
from collections.abc import Iterator
from typing import Any

from whoosh import fields as wf
from whoosh.codec.whoosh3 import (
    LENGTHS_COLUMN,
    W3Codec,
    W3FieldCursor,
    W3LeafMatcher,
    W3PerDocReader,
    W3TermInfo,
    W3TermsReader,
    _lenfield,
)
from whoosh.columns import PickleColumn
from whoosh.filedb.compound import CompoundStorage
from whoosh.filedb.filestore import OverlayStorage, Storage
from whoosh.filedb.structfile import StructFile
from whoosh.matching import Matcher
from whoosh.reading import TermNotFound
from whoosh.system import _INT_SIZE, _LONG_SIZE, pack_uint
from whoosh.writing import PostingPool, SegmentWriter

from knowledge_agent.analysis import WhooshTextAnalyzer
from knowledge_agent.backends.local.keyword.internals import (
    LENGTH_OF_BYTE,
    column_values,
    in_place_reading,
)
from knowledge_agent.backends.local.keyword.safe import SafeBufferFile, restricted_loads, safe_file

__all__ = ["Codec", "CountedText", "PostingTable", "spill_to_pool"]


class CountedText(wf.TEXT):
    """A frequencies-only ``TEXT`` field (no positions: every query is a bag of terms) that
    indexes a value by counting its terms at once.

    Whoosh's ``Frequency.word_values`` walks a token object per term through two generators
    and two dicts; a ``Counter`` over :meth:`TextAnalyzer.terms` gives the same postings
    (weight = frequency, as every term's boost is 1) in a third of the time.
    """

    def __init__(self, analyzer: WhooshTextAnalyzer) -> None:
        super().__init__(analyzer=analyzer, phrase=False, stored=False)

    def index(self, value: Any, **kwargs: Any) -> Iterator[tuple[bytes, int, float, bytes]]:
        if not isinstance(value, str) or kwargs.get("mode", "index") != "index":
            yield from super().index(value, **kwargs)
            return
        boost = self.format.field_boost
        for term, freq in Counter(self.analyzer._analyzer.terms(value)).items():
            packed = _PACKED[freq] if freq < len(_PACKED) else pack_uint(freq)
            yield term.encode("utf-8"), freq, freq * boost, packed


_PACKED = [pack_uint(freq) for freq in range(256)]  # shared, not one bytes object a posting


class PostingTable:
    """A segment writer's posting pool as one compact list per term.

    Whoosh's ``PostingPool`` keeps a five-object tuple per posting (about 350 bytes) and
    sorts them all when the segment is written: a batch of 2,000 files held 250 MB of
    tuples. Here a posting costs a docnum, a weight and a shared value reference (20 bytes)
    and only the terms are sorted. Set it as ``writer.pool`` before adding anything.
    """

    def __init__(self) -> None:
        self._terms: dict[tuple[str, bytes], tuple[array[int], array[float], list[bytes]]] = {}

    def add(self, item: tuple[str, bytes, int, float, bytes]) -> None:
        fieldname, tbytes, docnum, weight, vbytes = item
        postings = self._terms.get((fieldname, tbytes))
        if postings is None:
            postings = self._terms[fieldname, tbytes] = (array("q"), array("d"), [])
        postings[0].append(docnum)
        postings[1].append(weight)
        postings[2].append(vbytes)

    def iter_postings(self) -> Iterator[tuple[str, bytes, int, float, bytes]]:
        """Every posting, ordered by field, term and docnum, as Whoosh's pool gives them."""
        # A term's postings arrive in docnum order: the writer numbers documents, then each
        # merged segment's documents, after the ones before.
        terms = self._terms
        for key in sorted(terms):
            fieldname, tbytes = key
            docnums, weights, values = terms.pop(key)
            for posting in zip(docnums, weights, values, strict=True):
                yield fieldname, tbytes, *posting

    def cleanup(self) -> None:
        self._terms.clear()


def spill_to_pool(writer: SegmentWriter, limitmb: int) -> None:
    """Move ``writer``'s :class:`PostingTable` into Whoosh's ``PostingPool``, which writes
    sorted runs to disk beyond ``limitmb``: call it before merging segments into the writer.

    A batch's own postings are bounded by the batch; a merge's are not (eight segments of
    up to 100K documents, mostly terms seen once, where a table costs more than a tuple).
    """
    table = writer.pool
    if isinstance(table, PostingTable):
        pool = PostingPool(writer._tempstorage, writer.newsegment, limitmb=limitmb)
        for posting in table.iter_postings():
            pool.add(posting)
        writer.pool = pool


class _PerDocReader(W3PerDocReader):
    """Whoosh's per-document reader, faster where segment flushes and merges call it per
    posting: it remembers the length columns a segment lacks (Whoosh stat-ed the file for
    every posting of an ID field) and reads each length column once, not once per posting.
    """

    def __init__(self, storage: Storage, segment: Any) -> None:
        super().__init__(storage, segment)
        self._lengths: dict[str, list[int | None]] = {}

    def _cached_reader(self, fieldname: str, column: Any) -> Any:
        reader = super()._cached_reader(fieldname, column)
        if reader is None:
            self._readers[fieldname] = None  # the parent returns a cached entry, even None
        return reader

    def doc_field_length(self, docnum: int, fieldname: str, default: int = 0) -> Any:
        lengths = self._lengths.get(fieldname)
        if lengths is None:
            column = self._cached_reader(_lenfield(fieldname), LENGTHS_COLUMN)
            if column is None:
                return default
            raw = column_values(column, self._doccount, "u1").tolist()
            lengths = self._lengths[fieldname] = [LENGTH_OF_BYTE[b] for b in raw]
        return lengths[docnum] if docnum < self._doccount else default

    # The stored fields are a pickle column, and a column or vector file may hold pickles.

    def _get_column_file(self, fieldname: str) -> tuple[StructFile, int, int]:
        colfile, offset, length = super()._get_column_file(fieldname)
        return safe_file(colfile), offset, length

    def column_reader(self, fieldname: str, column: Any) -> Any:
        if isinstance(column, PickleColumn):
            return _PickleReader(super().column_reader(fieldname, column._child))
        return super().column_reader(fieldname, column)

    def _prep_vectors(self) -> None:
        super()._prep_vectors()
        self._vpostfile = safe_file(self._vpostfile)

    def vector(self, docnum: int, fieldname: str, format_: Any) -> Matcher:
        if self._vpostfile is None:
            self._prep_vectors()
        offset, length = self._vector_extent(docnum, fieldname)
        if not offset:
            raise Exception(f"Field {fieldname!r} has no vector in docnum {docnum}")
        return _LeafMatcher(self._vpostfile, offset, length, format_, byteids=True)


class _PickleReader(PickleColumn.Reader):
    """A pickle column's values (stored fields), unpickled with the restricted unpickler."""

    def __getitem__(self, docnum: int) -> Any:
        value = self._child[docnum]
        return restricted_loads(value) if value else None

    def __iter__(self) -> Iterator[Any]:
        for value in self._child:
            yield restricted_loads(value) if value else None


class _LeafMatcher(W3LeafMatcher):
    """Whoosh's posting-block matcher, unpickling a block's data with the restricted
    unpickler (its header is read from the postings file, a safe file)."""

    def _read_data(self) -> None:
        data = self._postfile.get(self._dataoffset, self._nextoffset - self._dataoffset)
        if self._compression:
            data = zlib.decompress(data)
        self._data = restricted_loads(data)


class _TermInfo(W3TermInfo):
    """Whoosh's term info, its inlined postings unpickled with the restricted unpickler."""

    @classmethod
    def from_bytes(cls, s: bytes) -> W3TermInfo:
        size = cls._struct.size
        if not s[0]:  # the flags byte: postings in the postings file, no pickle
            return super().from_bytes(s)
        # Whoosh decodes the fixed part; with the flag cleared it reads no pickle.
        terminfo = super().from_bytes(b"\x00" + s[1:size] + bytes(_LONG_SIZE + _INT_SIZE))
        terminfo._offset = terminfo._length = None
        terminfo._inlined = restricted_loads(s[size:])
        return terminfo


class _FieldCursor(W3FieldCursor):
    def term_info(self) -> W3TermInfo | None:
        if self._pos is None:
            return None
        return _TermInfo.from_bytes(self._tindex.dbfile.get(self._datapos, self._datalen))


class _TermsReader(W3TermsReader):
    """Whoosh's terms reader over safe files (the term file's extras and the posting block
    headers are pickles), decoding term infos with :class:`_TermInfo`."""

    def __init__(self, codec: W3Codec, dbfile: StructFile, length: int, postfile: StructFile):
        super().__init__(codec, safe_file(dbfile), length, safe_file(postfile))

    def cursor(self, fieldname: str, fieldobj: Any) -> _FieldCursor:
        return _FieldCursor(self._tindex, fieldname, self._keycoder, self._keydecoder, fieldobj)

    def items(self) -> Iterator[tuple[tuple[str, bytes], W3TermInfo]]:
        decode = self._keydecoder
        return ((decode(key), _TermInfo.from_bytes(value)) for key, value in self._tindex.items())

    def items_from(
        self, fieldname: str, prefix: bytes
    ) -> Iterator[tuple[tuple[str, bytes], W3TermInfo]]:
        decode = self._keydecoder
        pairs = self._tindex.items_from(self._keycoder(fieldname, prefix))
        return ((decode(key), _TermInfo.from_bytes(value)) for key, value in pairs)

    def term_info(self, fieldname: str, tbytes: bytes) -> W3TermInfo:
        try:
            return _TermInfo.from_bytes(self._tindex[self._keycoder(fieldname, tbytes)])
        except KeyError:
            raise TermNotFound(f"No term {fieldname}:{tbytes!r}") from None


_PEEK = 512


class _ViewReader:
    """A read-only file over a memoryview, for Whoosh's seek-and-read parts (block headers,
    pickles) without a copy of the bytes."""

    def __init__(self, view: memoryview) -> None:
        self._view = view
        self._pos = 0

    def read(self, size: int | None = -1) -> bytes:
        start = self._pos
        end = len(self._view) if size is None or size < 0 else min(start + size, len(self._view))
        self._pos = max(start, end)
        return bytes(self._view[start:end])

    def peek(self, size: int = 0) -> bytes:
        """Bytes ahead, without moving; a few hundred, not the 128 KB ``pickle`` asks for
        (it parses what it gets, asks again if that was not enough, then reads what it
        used): without this, pickle reads a whole block header a byte or two at a time."""
        return bytes(self._view[self._pos : self._pos + _PEEK])

    def readline(self, size: int | None = -1) -> bytes:
        limit = len(self._view) if size is None or size < 0 else self._pos + size
        line = bytearray()
        while self._pos < min(limit, len(self._view)):
            byte = self._view[self._pos]
            self._pos += 1
            line.append(byte)
            if byte == 0x0A:
                break
        return bytes(line)

    def seek(self, offset: int, whence: int = 0) -> int:
        base = (0, self._pos, len(self._view))[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def close(self) -> None:
        pass


class _MappedFile(SafeBufferFile):
    """A file inside a memory-mapped compound segment, read in place (its pickles with the
    restricted unpickler).

    Whoosh's ``BufferFile`` copies the whole file into a ``BytesIO`` when it is opened: the
    postings and terms of every segment, again for each reader, a copy of the index in
    memory and most of the time an index takes to open.
    """

    def __init__(self, view: memoryview, name: str) -> None:
        self._buf = view
        self._name = name
        self.file = _ViewReader(view)
        self.onclose = None
        self.is_real = False
        self.is_closed = False


class _InPlaceStorage:
    """A compound segment file's storage whose files are :class:`_MappedFile`; everything
    else is the compound storage's own."""

    def __init__(self, compound: CompoundStorage) -> None:
        self._compound = compound

    def open_file(self, name: str, *args: Any, **kwargs: Any) -> StructFile:
        source = self._compound._source
        if source is None:  # not memory-mapped: Whoosh reads it as a sub-file, no copy
            return safe_file(self._compound.open_file(name, *args, **kwargs))
        offset, length = self._compound.range(name)
        return _MappedFile(memoryview(source)[offset : offset + length], name)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._compound, name)


def _in_place(storage: Storage) -> Any:
    """``storage`` with its compound segment file, if any, read in place. A segment reader
    gets the compound file overlaid on the index's storage."""
    if not in_place_reading():
        return storage
    if isinstance(storage, OverlayStorage) and isinstance(storage.a, CompoundStorage):
        return OverlayStorage(_InPlaceStorage(storage.a), storage.b)
    return _InPlaceStorage(storage) if isinstance(storage, CompoundStorage) else storage


class Codec(W3Codec):
    """Whoosh's default codec reading compound segments in place, with the faster
    per-document reader and uncompressed posting blocks: zlib cost a tenth of the ingest
    time and every block read, to save a fifth of the Whoosh files (10K chunks: 14.4 ->
    12.9 s ingest, 19.0 -> 23.2 MB). Its readers unpickle nothing with a general unpickler.
    """

    def __init__(self) -> None:
        super().__init__(compression=0)

    def per_document_reader(self, storage: Storage, segment: Any) -> W3PerDocReader:
        return _PerDocReader(_in_place(storage), segment)

    def terms_reader(self, storage: Storage, segment: Any) -> W3TermsReader:
        files = _in_place(storage)
        name = segment.make_filename(self.TERMS_EXT)
        length = files.file_length(name)
        return _TermsReader(
            self, files.open_file(name), length, segment.open_file(files, self.POSTS_EXT)
        )

    def postings_reader(
        self, dbfile: StructFile, terminfo: Any, format_: Any, term: Any = None, scorer: Any = None
    ) -> Matcher:
        if terminfo.is_inlined():  # decoded by _TermInfo: no pickle left to read
            return super().postings_reader(dbfile, terminfo, format_, term=term, scorer=scorer)
        offset, length = terminfo.extent()
        return _LeafMatcher(dbfile, offset, length, format_, term=term, scorer=scorer)
