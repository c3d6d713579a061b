"""Reading a Whoosh index without running code planted in it.

Whoosh stores Python pickles in its files and reads them back with ``pickle.load``: a
``.toc`` file whose pickle calls ``os.system`` runs it when the index is opened. A data
folder is copied, downloaded and shared, so nothing read from it may be unpickled with a
general unpickler (DESIGN.md, "Sharing a data folder").

**Choice: a restricted unpickler at every site, not formats of our own.** Owning the formats
(a JSON TOC, plain stored fields and posting blocks) would replace Whoosh's writers as well
as its readers — the TOC written inside ``SegmentWriter.commit``, the posting block and
term-info encodings that :mod:`~knowledge_agent.backends.local.keyword.bm25_scan` decodes,
the stored-fields column, the term file's extras and the compound-file directory — and make
every existing index unreadable. Instead every pickle read from an index file goes through
:class:`RestrictedUnpickler`, which resolves only the globals listed here, by exact
qualified name (a module prefix would also let through any function of that module), and
raises :class:`UnsafePickleError` for anything else, before it is imported or called. The
formats on disk are unchanged.

Where the pickles are (read by) and what covers them:

* the ``_MAIN_<gen>.toc`` schema and segment list (``TOC.read``, from ``FileIndex`` and, via
  ``FileIndex._read_toc``, from every ``reader()``, ``searcher()`` and ``SegmentWriter``):
  :func:`read_toc`, used by :class:`SafeFileIndex`;
* a compound ``.seg`` file's directory (``CompoundStorage.__init__``, from every segment
  reader): :class:`SafeFileStorage`'s files;
* a term file's extras (``HashReader._read_extras``) and posting block headers
  (``W3LeafMatcher._goto``): the codec, which reads them from safe files;
* posting block data (``W3LeafMatcher._read_data``), inlined postings
  (``W3TermInfo.from_bytes``) and stored fields (``PickleColumn.Reader``): the codec;
* any other ``StructFile.read_pickle`` of a file in the index: :class:`SafeFileStorage`.

"The codec" is :class:`knowledge_agent.backends.local.keyword.parts.Codec`, the only codec class a
TOC may name; a segment reader built from a TOC uses the codec pickled with its segment.
Whoosh's module globals are left alone: everything is done by subclassing.

Not covered, because no index file is involved: the sorted runs a writer's posting pool
writes to its own temporary directory and reads back during the same commit.

Exceptions::

    pickle.UnpicklingError
      └── UnsafePickleError   a refused global, persistent id or malformed TOC content
"""

from __future__ import annotations

import os
import pickle
import re
import time
from pathlib import Path
from typing import IO, Any

from whoosh.codec.whoosh3 import W3Codec, W3Segment
from whoosh.fields import Schema
from whoosh.filedb.compound import SubFile
from whoosh.filedb.filestore import FileStorage, Storage
from whoosh.filedb.structfile import BufferFile, StructFile
from whoosh.index import (
    _CURRENT_TOC_VERSION,
    TOC,
    EmptyIndexError,
    FileIndex,
    IndexVersionError,
)
from whoosh.index import IndexError as WhooshIndexError
from whoosh.system import _FLOAT_SIZE, _INT_SIZE, _LONG_SIZE

from knowledge_agent.backends.local.checksums import VerifiedFiles
from knowledge_agent.backends.local.keyword.sums import (
    remove_older_sums,
    seal_generation,
    toc_generation,
    unsealed_generation,
    verified_toc,
)

__all__ = [
    "DATA_GLOBALS",
    "SCHEMA_GLOBALS",
    "SEGMENT_GLOBALS",
    "RestrictedUnpickler",
    "SafeBufferFile",
    "SafeFileIndex",
    "SafeFileStorage",
    "SafeStructFile",
    "UnsafePickleError",
    "open_file_index",
    "read_toc",
    "restricted_load",
    "restricted_loads",
    "safe_file",
    "seal_legacy_generation",
    "stored_schema",
]

_INDEX_NAME = "MAIN"  # whoosh's default index name inside a storage
_TOC_ATTEMPTS = 10  # tries to read the latest TOC while writers replace it

# The globals each kind of pickle was seen to name, collected by logging every find_class
# while indexes were built, updated (deletes, merges), reopened and searched through
# SearchIndexManager and KnowledgeAgentCore. A schema or segment needing anything else is
# not one this code wrote: refusing it makes the index unreadable, and it is rebuilt.

SCHEMA_GLOBALS: frozenset[tuple[str, str]] = frozenset(
    {
        ("whoosh.fields", "Schema"),
        ("whoosh.fields", "ID"),
        ("whoosh.fields", "STORED"),
        ("whoosh.fields", "COLUMN"),
        ("whoosh.formats", "Existence"),
        ("whoosh.formats", "Frequency"),
        ("whoosh.columns", "NumericColumn"),
        ("whoosh.analysis.tokenizers", "IDTokenizer"),
        ("knowledge_agent.analysis", "WhooshTextAnalyzer"),
        ("knowledge_agent.backends.local.keyword.parts", "CountedText"),
    }
)
"""Globals the pickled schema of a TOC may name."""

SEGMENT_GLOBALS: frozenset[tuple[str, str]] = frozenset(
    {
        ("whoosh.codec.whoosh3", "W3Segment"),
        ("knowledge_agent.backends.local.keyword.parts", "Codec"),
        # A segment's field lengths: defaultdict(int).
        ("collections", "defaultdict"),
        ("builtins", "int"),
    }
)
"""Globals the pickled segment list of a TOC may name."""

# A TOC names our classes by module path, so an index keeps the path its classes had when it
# was written: read as their present home.
_MOVED = {"knowledge_agent.search.whoosh_parts": "knowledge_agent.backends.local.keyword.parts"}

_LATIN1 = ("_codecs", "encode")

DATA_GLOBALS: frozenset[tuple[str, str]] = frozenset({_LATIN1})
"""Globals any other pickle may name: posting blocks, inlined postings, stored fields, term
file extras and compound directories hold only None, numbers, strings, bytes and
containers. Protocol 2 writes bytes as ``_codecs.encode(text, "latin1")``, which is
resolved to a function that does only that."""


class UnsafePickleError(pickle.UnpicklingError):
    """An index file holds a pickle naming a global outside the allow-list (or content
    that is not what Whoosh writes there): the index is treated as unreadable."""


def _latin1_bytes(text: object, encoding: object = "utf-8") -> bytes:
    """``_codecs.encode`` as protocol 2 uses it for bytes, and nothing else."""
    if not isinstance(text, str) or encoding != "latin1":
        raise UnsafePickleError(f"_codecs.encode is allowed as (str, 'latin1') only: {encoding!r}")
    return text.encode("latin-1")


class RestrictedUnpickler(pickle.Unpickler):
    """An unpickler that resolves only the ``allowed`` (module, name) pairs.

    Every way a pickle reaches a callable (``GLOBAL``, ``STACK_GLOBAL``, the ``EXT``
    opcodes) goes through :meth:`find_class`, so a refused name is never imported,
    looked up or called.
    """

    def __init__(self, file: IO[bytes], allowed: frozenset[tuple[str, str]]) -> None:
        super().__init__(file)
        self._allowed = allowed

    def find_class(self, module: str, name: str) -> Any:
        module = _MOVED.get(module, module)
        key = (module, name)
        if key not in self._allowed:
            raise UnsafePickleError(
                f"refused to load {module}.{name} from an index file: not a class Whoosh "
                "index files of this program contain"
            )
        if key == _LATIN1:
            return _latin1_bytes
        return super().find_class(module, name)

    def persistent_load(self, pid: Any) -> Any:
        raise UnsafePickleError("refused a persistent id in an index file")


def restricted_load(file: IO[bytes], allowed: frozenset[tuple[str, str]] = DATA_GLOBALS) -> Any:
    """One pickle from ``file`` (left just past it), resolving only ``allowed`` globals."""
    return RestrictedUnpickler(file, allowed).load()


class _BytesReader:
    """Bytes as a file with ``peek``: given it, the unpickler parses what one ``peek``
    returns; over a ``BytesIO`` it calls ``read`` per opcode (a posting block: 6x slower)."""

    __slots__ = ("_data", "_pos")

    def __init__(self, data: bytes | bytearray | memoryview) -> None:
        self._data = bytes(data)
        self._pos = 0

    def read(self, size: int = -1) -> bytes:
        start = self._pos
        end = len(self._data) if size < 0 else start + size
        self._pos = min(end, len(self._data))
        return self._data[start:end]

    def readline(self, size: int = -1) -> bytes:
        end = self._data.find(b"\n", self._pos) + 1 or len(self._data)
        if size >= 0:
            end = min(end, self._pos + size)
        return self.read(end - self._pos)

    def peek(self, size: int = 0) -> bytes:
        return self._data[self._pos :]


def restricted_loads(
    data: bytes | bytearray | memoryview, allowed: frozenset[tuple[str, str]] = DATA_GLOBALS
) -> Any:
    """The pickle in ``data``, resolving only ``allowed`` globals."""
    return RestrictedUnpickler(_BytesReader(data), allowed).load()  # type: ignore[arg-type]


# --------------------------------------------------------------------------- files


class SafeStructFile(StructFile):
    """A ``StructFile`` whose pickles are read with the restricted unpickler."""

    def read_pickle(self) -> Any:
        return restricted_load(self.file)

    def subset(self, offset: int, length: int, name: str | None = None) -> SafeStructFile:
        return SafeStructFile(SubFile(self.file, offset, length), name=name or self._name)


class SafeBufferFile(BufferFile):
    """A ``BufferFile`` whose pickles are read with the restricted unpickler."""

    def read_pickle(self) -> Any:
        return restricted_load(self.file)

    def subset(self, position: int, length: int, name: str | None = None) -> SafeBufferFile:
        return SafeBufferFile(self.get(position, length), name=name or self._name)


def safe_file(f: StructFile) -> StructFile:
    """``f`` as a file whose pickles are read safely, over the same underlying file."""
    if isinstance(f, (SafeStructFile, SafeBufferFile)):
        return f
    if isinstance(f, BufferFile):
        safe = SafeBufferFile(b"", name=f._name, onclose=f.onclose)
        safe._buf, safe.file = f._buf, f.file  # share the buffer and position, no copy
        return safe
    return SafeStructFile(f.file, name=f._name, onclose=f.onclose)


class SafeFileStorage(FileStorage):
    """``FileStorage`` whose files read pickles with the restricted unpickler and whose
    indexes are :class:`SafeFileIndex` (``open_index``, ``create_index``).

    Every file it creates is fsynced when closed — segment files before the TOC that names
    them is renamed into place — except in its temporary storage, which a crash discards.
    Renaming a TOC into place records the checksums of its generation first, and reading a
    TOC verifies them (:mod:`~knowledge_agent.backends.local.keyword.sums`); with ``legacy`` (an
    index of the previous release) a latest generation without them is read unverified.
    """

    def __init__(
        self, path: str, *args: Any, durable: bool = True, legacy: bool = False, **kwargs: Any
    ) -> None:
        super().__init__(path, *args, **kwargs)
        self.durable = durable
        self.legacy = legacy
        self.verified = VerifiedFiles()  # files of this index checksummed by this process

    def open_file(self, name: str, **kwargs: Any) -> SafeStructFile:
        return SafeStructFile(open(self._fpath(name), "rb"), name=name, **kwargs)

    def create_file(
        self, name: str, excl: bool = False, mode: str = "wb", **kwargs: Any
    ) -> StructFile:
        if not self.durable:
            return super().create_file(name, excl=excl, mode=mode, **kwargs)
        onclose = kwargs.pop("onclose", None)

        def sync_then(f: StructFile) -> None:
            if onclose is not None:
                onclose(f)
            f.file.flush()
            os.fsync(f.file.fileno())

        return super().create_file(name, excl=excl, mode=mode, onclose=sync_then, **kwargs)

    def rename_file(self, oldname: str, newname: str, safe: bool = False) -> None:
        generation = toc_generation(newname)
        if generation is None:
            super().rename_file(oldname, newname, safe=safe)
            return
        indexname, gen = generation
        stream = self.open_file(oldname)
        try:
            toc = _parse_toc(stream, indexname, gen, schema=None, skip_schema=True)
        finally:
            stream.close()
        folder = Path(self.folder)
        segment_ids = [s.segid for s in toc.segments]
        seal_generation(folder, indexname, gen, oldname, segment_ids, self.verified)
        super().rename_file(oldname, newname, safe=safe)
        remove_older_sums(folder, indexname, gen)

    def temp_storage(self, name: str | None = None) -> SafeFileStorage:
        base = super().temp_storage(name)
        return SafeFileStorage(base.folder, durable=False)

    def open_index(
        self,
        indexname: str = _INDEX_NAME,
        schema: Schema | None = None,
        indexclass: type[FileIndex] | None = None,
    ) -> FileIndex:
        return (indexclass or SafeFileIndex)(self, schema=schema, indexname=indexname)

    def create_index(
        self,
        schema: Schema,
        indexname: str = _INDEX_NAME,
        indexclass: type[FileIndex] | None = None,
    ) -> FileIndex:
        return (indexclass or SafeFileIndex).create(self, schema, indexname)


# --------------------------------------------------------------------------- the TOC


_SEGMENT_ID = re.compile(r"[0-9a-z]+")


def _check_segments(segments: object, indexname: str) -> list[W3Segment]:
    """The unpickled segment list, if it is what Whoosh writes: segment ids become file
    names, so one like ``../x`` would open files outside the index."""
    if not isinstance(segments, list):
        raise UnsafePickleError(f"the TOC's segment list is a {type(segments).__name__}")
    for segment in segments:
        if type(segment) is not W3Segment:
            raise UnsafePickleError(f"the TOC lists a {type(segment).__name__}, not a segment")
        segid = getattr(segment, "segid", None)
        if (
            hasattr(segment, "name")  # Whoosh's older segments: the name is the file name
            or segment.indexname != indexname
            or not isinstance(segid, str)
            or not _SEGMENT_ID.fullmatch(segid)
            or not isinstance(getattr(segment, "_codec", None), W3Codec)
            or not isinstance(getattr(segment, "_doccount", None), int)
            or not isinstance(getattr(segment, "compound", None), bool)
        ):
            raise UnsafePickleError(f"the TOC lists a malformed segment {vars(segment)!r:.200}")
    return segments


def read_toc(
    storage: Storage,
    indexname: str = _INDEX_NAME,
    gen: int | None = None,
    schema: Schema | None = None,
) -> TOC:
    """``TOC.read`` with the restricted unpickler: generation ``gen`` (default: the latest)
    of index ``indexname``. With ``schema``, the pickled schema is skipped, not read.

    The latest TOC can be deleted by a writer in another process between finding it and
    opening it (its commit made a newer one): then the newer one is read.
    """
    if gen is not None:
        return _read_toc(storage, indexname, gen, schema)
    for attempt in range(_TOC_ATTEMPTS):
        gen = TOC._latest_generation(storage, indexname)
        if gen < 0:
            raise EmptyIndexError(f"Index {indexname!r} does not exist in {storage!r}")
        try:
            return _read_toc(storage, indexname, gen, schema)
        except FileNotFoundError:
            if attempt == _TOC_ATTEMPTS - 1:
                raise
            time.sleep(0.01 * (attempt + 1))
    raise AssertionError("unreachable")


def _read_toc(storage: Storage, indexname: str, gen: int, schema: Schema | None) -> TOC:
    if isinstance(storage, SafeFileStorage):
        folder = Path(storage.folder)
        if storage.legacy and unsealed_generation(folder, indexname) == gen:
            data = (folder / TOC._filename(indexname, gen)).read_bytes()  # no sums to check
        else:  # checked against its recorded checksum before a byte of it is parsed
            data = verified_toc(folder, indexname, gen, storage.verified)
        stream: StructFile = SafeBufferFile(data, name=TOC._filename(indexname, gen))
    else:
        stream = storage.open_file(TOC._filename(indexname, gen))
    try:
        return _parse_toc(stream, indexname, gen, schema)
    finally:
        stream.close()


def _parse_toc(
    stream: StructFile,
    indexname: str,
    gen: int,
    schema: Schema | None,
    *,
    skip_schema: bool = False,
) -> TOC:
    """A TOC read from ``stream``; the pickled schema is skipped when ``schema`` is given
    or with ``skip_schema`` (the TOC's schema is then ``schema``)."""
    for what, size in (("int", _INT_SIZE), ("long", _LONG_SIZE), ("float", _FLOAT_SIZE)):
        if stream.read_varint() != size:
            raise WhooshIndexError(f"Index was created on a different architecture ({what})")
    if stream.read_int() != -12345:
        raise WhooshIndexError("Number misread: byte order problem")
    version = stream.read_int()
    release = (stream.read_varint(), stream.read_varint(), stream.read_varint())
    if version != _CURRENT_TOC_VERSION:
        # Whoosh reads older TOCs with a general (renaming) unpickler.
        raise IndexVersionError(f"Can't read format {version}", version)
    if schema is None and not skip_schema:
        schema = restricted_loads(stream.read_string(), SCHEMA_GLOBALS)
        if not isinstance(schema, Schema):
            raise UnsafePickleError(f"the TOC's schema is a {type(schema).__name__}")
    else:
        stream.skip_string()
    if stream.read_int() != gen:
        raise WhooshIndexError(f"the TOC of generation {gen} names another generation")
    stream.read_int()  # unused
    segments = restricted_load(stream.file, SEGMENT_GLOBALS)
    return TOC(schema, _check_segments(segments, indexname), gen, version=version, release=release)


def seal_legacy_generation(storage: SafeFileStorage, indexname: str = _INDEX_NAME) -> bool:
    """Record the sums of the latest generation when it has none (written by the previous
    release): of its TOC and of the files of the segments it lists, as they are now. False
    when there is nothing to record. Only the writer calls this, once the index has been
    opened from that generation (which read its TOC and every segment's directory)."""
    folder = Path(storage.folder)
    gen = unsealed_generation(folder, indexname)
    if gen is None:
        return False
    name = TOC._filename(indexname, gen)
    stream = storage.open_file(name)
    try:
        toc = _parse_toc(stream, indexname, gen, schema=None, skip_schema=True)
    finally:
        stream.close()
    segment_ids = [segment.segid for segment in toc.segments]
    seal_generation(folder, indexname, gen, name, segment_ids, storage.verified)
    return True


def stored_schema(storage: Storage, indexname: str = _INDEX_NAME) -> Schema:
    """The schema pickled in the latest TOC of ``indexname``, read safely (to compare it
    with the schema this code would write)."""
    return read_toc(storage, indexname).schema


class SafeFileIndex(FileIndex):
    """A ``FileIndex`` that reads its TOC with :func:`read_toc` — on opening, and in every
    ``reader()``, ``searcher()`` and ``writer()``, which re-read it through ``_read_toc``."""

    def __init__(
        self, storage: Storage, schema: Schema | None = None, indexname: str = _INDEX_NAME
    ) -> None:
        # FileIndex.__init__ itself, but for its TOC.read, which is not overridable.
        if not isinstance(storage, Storage):
            raise ValueError(f"{storage!r} is not a Storage object")
        if not isinstance(indexname, str):
            raise ValueError(f"indexname {indexname!r} is not a string")
        if schema is not None and not isinstance(schema, Schema):
            raise ValueError(f"{schema!r} is not a Schema")
        self.storage = storage
        self._schema = schema
        self.indexname = indexname
        self._read_toc()  # fails now if the index cannot be read

    def _read_toc(self) -> TOC:
        return read_toc(self.storage, self.indexname, schema=self._schema)


def open_file_index(storage: Storage, schema: Schema, indexname: str = _INDEX_NAME) -> FileIndex:
    """The latest generation of index ``indexname`` in ``storage``, whose writers and
    searchers use ``schema``; the schema on disk is :func:`stored_schema`.

    ``storage`` on disk must be a :class:`SafeFileStorage`: a plain ``FileStorage`` would
    read compound segment directories with ``pickle.load``.
    """
    if isinstance(storage, FileStorage) and not isinstance(storage, SafeFileStorage):
        raise TypeError(f"open_file_index needs a SafeFileStorage, got {type(storage).__name__}")
    return SafeFileIndex(storage, schema=schema, indexname=indexname)
