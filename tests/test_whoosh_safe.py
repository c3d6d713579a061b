"""A planted pickle in any Whoosh file of a data folder is refused, never run."""

from __future__ import annotations

import codecs
import contextlib
import io
import logging
import pickle
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from whoosh import query as wq
from whoosh.codec.whoosh3 import W3Codec, W3TermInfo
from whoosh.filedb.compound import CompoundStorage
from whoosh.filedb.filestore import FileStorage, RamStorage
from whoosh.filedb.filetables import OrderedHashReader, OrderedHashWriter
from whoosh.filedb.structfile import BufferFile, StructFile
from whoosh.index import TOC, FileIndex
from whoosh.reading import SegmentReader
from whoosh.system import pack_int, unpack_int

from knowledge_agent import KnowledgeAgentCore
from knowledge_agent.analysis import TextAnalyzer
from knowledge_agent.backends.local.atomic_files import write_sealed
from knowledge_agent.backends.local.checksums import file_sum
from knowledge_agent.backends.local.keyword import safe as whoosh_safe
from knowledge_agent.backends.local.keyword.bm25_scan import Clause, ScanCache, top_docs
from knowledge_agent.backends.local.keyword.index import SearchIndexManager
from knowledge_agent.backends.local.keyword.parts import Codec, CountedText
from knowledge_agent.backends.local.keyword.safe import (
    DATA_GLOBALS,
    SCHEMA_GLOBALS,
    SEGMENT_GLOBALS,
    SafeFileStorage,
    UnsafePickleError,
    open_file_index,
    read_toc,
    restricted_loads,
    stored_schema,
)
from knowledge_agent.backends.local.keyword.schema import (
    LuceneBM25F,
    chunk_schema,
    schema_signature,
)
from knowledge_agent.backends.local.keyword.sums import verified_toc
from knowledge_agent.errors import DamagedIndexError
from knowledge_agent.models import KnowledgeChunk, KnowledgeItem

ANALYZER = TextAnalyzer()
SCHEMA = chunk_schema(ANALYZER)
COMMON = "common"  # a term of every chunk: postings in several blocks


def plant_marker(path: str) -> str:
    """What a planted pickle calls: proof that it ran."""
    Path(path).write_text("ran")
    return "planted"


class Payload:
    """Pickles as a call of :func:`plant_marker`."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self) -> tuple[Callable[[str], str], tuple[str]]:
        return plant_marker, (self.marker,)


def _pair(n: int) -> tuple[KnowledgeItem, list[KnowledgeChunk]]:
    item_id = f"item{n}"
    texts = [f"{COMMON} alpha{n % 7} word{n}", f"{COMMON} beta{n % 3} only{n}"]
    item = KnowledgeItem(id=item_id, title=f"Title {n}", content="\n\n".join(texts))
    chunks = [
        KnowledgeChunk(
            id=f"{item_id}-c{i}",
            item_id=item_id,
            chunk_index=i,
            content=text,
            start_position=0,
            end_position=len(text),
        )
        for i, text in enumerate(texts)
    ]
    return item, chunks


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An index folder written by SearchIndexManager: several segments, deletes, a merge."""
    index_dir = tmp_path_factory.mktemp("built") / "index"
    with SearchIndexManager(index_dir, ANALYZER) as mgr:
        mgr.rebuild_commit_every = 150
        mgr.rebuild(_pair(n) for n in range(200))
        for n in range(200, 212):  # small commits: eight of a tier are merged
            mgr.update(upserts=[_pair(n)], deletes=[f"item{n - 200}"])
    return index_dir


@pytest.fixture
def chunks(built: Path, tmp_path: Path) -> Path:
    """A copy of the built chunk index to plant into."""
    return Path(shutil.copytree(built / "chunks", tmp_path / "chunks"))


# --------------------------------------------------------------------------- file surgery


def _segment_files(folder: Path) -> dict[str, bytes]:
    """The member files of the first segment's compound file, by name."""
    segment = read_toc(FileStorage(str(folder)), "MAIN").segments[0]
    compound = segment.open_compound_file(FileStorage(str(folder)))
    try:
        return {name: compound.open_file(name).read() for name in compound.list()}
    finally:
        compound.close()


def _write_segment(folder: Path, files: dict[str, bytes], **options: Any) -> None:
    """Replace the first segment's compound file by one holding ``files``."""
    segment = read_toc(FileStorage(str(folder)), "MAIN").segments[0]
    store = RamStorage()
    for name, data in files.items():
        with store.create_file(name) as f:
            f.write(data)
    seg = folder / segment.make_filename(segment.COMPOUND_EXT)
    seg.unlink()
    dbfile = FileStorage(str(folder)).create_file(seg.name)
    CompoundStorage.assemble(dbfile, store, sorted(files), **options)


def _member(files: dict[str, bytes], ext: str) -> str:
    return next(name for name in files if name.endswith(ext))


def _terms(trm: bytes) -> tuple[list[tuple[bytes, bytes]], dict[str, Any]]:
    reader = OrderedHashReader(BufferFile(trm), len(trm))
    return list(reader.items()), dict(reader.extras)


def _rewrite_terms(items: list[tuple[bytes, bytes]], extras: dict[str, Any], **more: Any) -> bytes:
    out = io.BytesIO()
    dbfile = StructFile(out)
    dbfile.close = lambda: None  # type: ignore[method-assign]  # keep the bytes readable
    writer = OrderedHashWriter(dbfile)
    for key, value in items:
        writer.add(key, value)
    writer.extras["fieldmap"] = extras["fieldmap"]
    writer.extras.update(more)
    writer.close()
    return out.getvalue()


def _last_block_offset(trm: bytes) -> int:
    """Where the posting list written last starts in the postings file."""
    items, _ = _terms(trm)  # the flags byte first: 0 for a list in the postings file
    return max(W3TermInfo.from_bytes(value)._offset for _, value in items if not value[0])


def _block(pst: bytes, offset: int) -> tuple[int, int, int, int]:
    """(length field position, header start, data start, block end) of a list's first block."""
    position = offset + 4  # after the "W3Bl" tag
    length = unpack_int(pst[position : position + 4])[0]
    stream = io.BytesIO(pst)
    stream.seek(position + 4)
    pickle.load(stream)  # the header of our own, clean file
    return position, position + 4, stream.tell(), position + 4 + abs(length)


def _reseal(folder: Path) -> None:
    """Record the sums of the latest generation as its files are now: whoever plants a
    file can write checksums too, so a refusal must not rest on them."""
    gen = max(int(toc.stem.rsplit("_", 1)[1]) for toc in folder.glob("_MAIN_*.toc"))
    names = [f"_MAIN_{gen}.toc", *(path.name for path in folder.glob("MAIN_*.*"))]
    record = {
        "format": "knowledge_agent.whoosh-sums/1",
        "generation": gen,
        "files": {name: file_sum(folder / name).to_json() for name in names},
    }
    write_sealed(folder / f"_MAIN_{gen}.sums", record)


def _write_toc(folder: Path, schema: Any = None, segments: Any = None) -> None:
    """A next generation whose TOC holds ``schema`` and ``segments`` (default: the latest's)."""
    storage = FileStorage(str(folder))
    toc = read_toc(storage, "MAIN")
    schema = toc.schema if schema is None else schema
    TOC(schema, toc.segments if segments is None else segments, toc.generation + 1).write(
        storage, "MAIN"
    )


# --------------------------------------------------------------------------- the sites


@dataclass(frozen=True)
class Site:
    """Where a pickle is planted and what reads it."""

    name: str
    plant: Callable[[Path, Payload], None]
    read: Callable[[list[SegmentReader]], object]


def _plant_schema(folder: Path, payload: Payload) -> None:
    schema = read_toc(FileStorage(str(folder)), "MAIN").schema
    schema["chunk_id"].planted = payload  # pickled with the schema
    _write_toc(folder, schema=schema)


def _plant_segments(folder: Path, payload: Payload) -> None:
    segments = read_toc(FileStorage(str(folder)), "MAIN").segments
    segments[0].planted = payload
    _write_toc(folder, segments=segments)


def _plant_compound_directory(folder: Path, payload: Payload) -> None:
    _write_segment(folder, _segment_files(folder), planted=payload)  # the directory's options


def _plant_term_extras(folder: Path, payload: Payload) -> None:
    files = _segment_files(folder)
    trm = _member(files, ".trm")
    items, extras = _terms(files[trm])
    files[trm] = _rewrite_terms(items, extras, planted=payload)
    _write_segment(folder, files)


def _plant_inlined_postings(folder: Path, payload: Payload) -> None:
    files = _segment_files(folder)
    trm = _member(files, ".trm")
    items, extras = _terms(files[trm])
    # Whoosh never inlines a posting list (its limit is off by one) but reads one if the
    # flags byte says so.
    size = W3TermInfo._struct.size
    key, value = items[0]
    items[0] = (key, b"\x01" + value[1:size] + pickle.dumps(payload, 2))
    files[trm] = _rewrite_terms(items, extras)
    _write_segment(folder, files)


def _plant_block_header(folder: Path, payload: Payload) -> None:
    files = _segment_files(folder)
    pst = _member(files, ".pst")
    offset = _last_block_offset(files[_member(files, ".trm")])
    _, header, data, _ = _block(files[pst], offset)
    files[pst] = files[pst][:header] + pickle.dumps(payload) + files[pst][data:]
    _write_segment(folder, files)


def _plant_block_data(folder: Path, payload: Payload) -> None:
    files = _segment_files(folder)
    pst = _member(files, ".pst")
    raw = files[pst]
    offset = _last_block_offset(files[_member(files, ".trm")])
    position, header, data, end = _block(raw, offset)
    planted = pickle.dumps(payload, 2)
    sign = -1 if unpack_int(raw[position : position + 4])[0] < 0 else 1
    length = pack_int(sign * (data - header + len(planted)))
    files[pst] = raw[:position] + length + raw[header:data] + planted + raw[end:]
    _write_segment(folder, files)


def _plant_stored_fields(folder: Path, payload: Payload) -> None:
    """A segment written by Whoosh itself, whose stored ``chunk_id`` is the payload."""
    ix = FileIndex(FileStorage(str(folder)), schema=SCHEMA)
    writer = ix.writer(codec=Codec())
    writer.add_document(chunk_id=payload, item_id="planted", chunk_index=0, content="planted")
    writer.commit(merge=False)


def _read_last_block_term(readers: list[SegmentReader]) -> object:
    reader = readers[0]  # the first segment's, where the plants are
    infos = [(key, info) for key, info in reader._terms.items() if not info.is_inlined()]
    (field, term), _ = max(infos, key=lambda pair: pair[1].extent()[0])
    return list(reader.postings(field, term).all_ids())


def _read_inlined(readers: list[SegmentReader]) -> object:
    return list(readers[0]._terms.items())  # decodes every term info


def _read_stored(readers: list[SegmentReader]) -> object:
    return [list(reader.all_stored_fields()) for reader in readers]


def _nothing(readers: list[SegmentReader]) -> object:
    return readers


SITES = [
    Site("toc schema", _plant_schema, _nothing),
    Site("toc segments", _plant_segments, _nothing),
    Site("compound directory", _plant_compound_directory, _nothing),
    Site("term file extras", _plant_term_extras, _nothing),
    Site("inlined postings", _plant_inlined_postings, _read_inlined),
    Site("posting block header", _plant_block_header, _read_last_block_term),
    Site("posting block data", _plant_block_data, _read_last_block_term),
    Site("stored fields", _plant_stored_fields, _read_stored),
]


def _safe_readers(folder: Path) -> list[SegmentReader]:
    """Open the way SearchIndexManager opens, through the safe loader."""
    storage = SafeFileStorage(str(folder))
    assert schema_signature(stored_schema(storage)) == schema_signature(SCHEMA)
    ix = open_file_index(storage, SCHEMA)
    return [leaf for leaf, _ in ix.reader().leaf_readers()]


def _plain_readers(folder: Path) -> list[SegmentReader]:
    """Open with stock Whoosh: its FileIndex and storage, its own codec."""
    storage = FileStorage(str(folder))
    ix = storage.open_index()  # reads the pickled schema
    return [SegmentReader(storage, SCHEMA, segment, codec=W3Codec()) for segment in ix._segments()]


@pytest.mark.parametrize("site", SITES, ids=[site.name for site in SITES])
def test_a_planted_pickle_runs_through_stock_whoosh(
    site: Site, chunks: Path, tmp_path: Path
) -> None:
    """The plants are live: stock Whoosh runs each (so the refusals below are of them)."""
    marker = tmp_path / "marker"
    site.plant(chunks, Payload(marker))
    with contextlib.suppress(Exception):  # what the payload returned breaks some readers
        site.read(_plain_readers(chunks))
    assert marker.read_text() == "ran"


@pytest.mark.parametrize("site", SITES, ids=[site.name for site in SITES])
def test_a_planted_pickle_is_found_damaged_before_it_is_read(
    site: Site, chunks: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "marker"
    site.plant(chunks, Payload(marker))
    with pytest.raises(DamagedIndexError):
        site.read(_safe_readers(chunks))
    assert not marker.exists()


@pytest.mark.parametrize("site", SITES, ids=[site.name for site in SITES])
def test_a_planted_pickle_is_refused_not_run(site: Site, chunks: Path, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    site.plant(chunks, Payload(marker))
    _reseal(chunks)
    with pytest.raises(UnsafePickleError, match="plant_marker"):
        site.read(_safe_readers(chunks))
    assert not marker.exists()


def test_every_site_is_planted() -> None:
    """One plant per kind of pickle the safe loader's docstring lists."""
    assert len({site.name for site in SITES}) == 8


# --------------------------------------------------------------------------- safe = plain


def _hits(ix: FileIndex, terms: list[str]) -> tuple[list[Any], list[Any]]:
    """(score, stored fields) of every hit, by Whoosh's matchers and by the block scan."""
    with ix.searcher(weighting=LuceneBM25F(B=0.75, K1=1.2)) as searcher:
        query = wq.Or([wq.Term("content", term) for term in terms])
        matched = [(hit.score, hit.fields()) for hit in searcher.search(query, limit=None)]
        clauses = [Clause("content", term, 1.0) for term in terms]
        scanned = [
            (score, searcher.stored_fields(docnum))
            for score, docnum in top_docs(searcher, ScanCache(), clauses, 1_000)
        ]
        return matched, scanned


def test_an_index_reads_the_same_through_the_safe_path(built: Path) -> None:
    folder = built / "chunks"
    safe = open_file_index(SafeFileStorage(str(folder)), SCHEMA)
    plain = FileIndex(FileStorage(str(folder)), schema=SCHEMA)
    assert len(safe._segments()) > 1
    assert any(segment.has_deletions() for segment in safe._segments())
    for terms in ([COMMON], ["alpha3", "beta1"], ["word5", "only211", COMMON], ["absent"]):
        matched, scanned = _hits(safe, terms)
        assert (matched, scanned) == _hits(plain, terms)
        assert len(scanned) == len(matched) > 0 or terms == ["absent"]
    # Every posting and stored field, against Whoosh's own codec's readers.
    for ours, theirs in zip(_safe_readers(folder), _plain_readers(folder), strict=True):
        assert list(ours.all_terms()) == list(theirs.all_terms())
        for field, term in theirs.all_terms():
            expected = list(theirs.postings(field, term).items_as("weight"))
            assert list(ours.postings(field, term).items_as("weight")) == expected
        assert list(ours.all_stored_fields()) == list(theirs.all_stored_fields())
        ours.close()
        theirs.close()


def test_writers_through_the_safe_path_read_the_toc_safely(chunks: Path, tmp_path: Path) -> None:
    ix = open_file_index(SafeFileStorage(str(chunks)), SCHEMA)
    _plant_segments(chunks, Payload(tmp_path / "marker"))
    _reseal(chunks)
    with pytest.raises(UnsafePickleError):
        ix.writer(codec=Codec())
    with pytest.raises(UnsafePickleError):
        ix.searcher()
    assert not (tmp_path / "marker").exists()


def test_open_file_index_refuses_a_plain_file_storage(built: Path) -> None:
    with pytest.raises(TypeError, match="SafeFileStorage"):
        open_file_index(FileStorage(str(built / "chunks")), SCHEMA)


def test_safe_storage_indexes_are_safe(tmp_path: Path) -> None:
    storage = SafeFileStorage(str(tmp_path)).create()
    ix = storage.create_index(SCHEMA)
    assert type(storage.open_index()) is type(ix) is not FileIndex
    assert schema_signature(storage.open_index().schema) == schema_signature(SCHEMA)


def test_older_toc_versions_are_refused(chunks: Path) -> None:
    """Whoosh reads a version -110 TOC with a general unpickler."""
    toc = max(chunks.glob("_MAIN_*.toc"))
    raw = bytearray(toc.read_bytes())
    raw[7:11] = pack_int(-110)  # after three one-byte varints and the int -12345
    toc.write_bytes(bytes(raw))
    _reseal(chunks)
    with pytest.raises(Exception, match="format -110"):
        open_file_index(SafeFileStorage(str(chunks)), SCHEMA)


def test_a_segment_naming_files_outside_the_index_is_refused(chunks: Path) -> None:
    segments = read_toc(FileStorage(str(chunks)), "MAIN").segments
    segments[0].segid = "../../elsewhere"
    _write_toc(chunks, segments=segments)
    _reseal(chunks)
    with pytest.raises(UnsafePickleError, match="malformed segment"):
        open_file_index(SafeFileStorage(str(chunks)), SCHEMA)


@pytest.mark.parametrize(
    "value",
    [None, 1, 2.5, "text", b"bytes", (1, (2.0,), [b"x", None]), {"a": {"b": 1}}],
)
def test_plain_data_loads_under_every_protocol(value: object) -> None:
    for protocol in range(2, pickle.HIGHEST_PROTOCOL + 1):
        assert restricted_loads(pickle.dumps(value, protocol), DATA_GLOBALS) == value


class Rot13:
    """Pickles as protocol 2 pickles bytes, ``_codecs.encode``, but with another codec."""

    def __reduce__(self) -> tuple[Callable[..., object], tuple[str, str]]:
        return codecs.encode, ("text", "rot13")


def test_latin1_encode_is_allowed_for_bytes_only() -> None:
    with pytest.raises(UnsafePickleError, match="rot13"):
        restricted_loads(pickle.dumps(Rot13(), 2))


# --------------------------------------------------------------------------- end to end


def test_core_rebuilds_an_index_with_a_planted_toc_without_running_it(
    tmp_path: Path, data_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with KnowledgeAgentCore(data_dir) as core:
        item = core.add_text("The ultrasonic probe measures wall thickness.", title="Probe")
    folder = data_dir / "index" / "whoosh" / "chunks"
    marker = tmp_path / "marker"
    _plant_schema(folder, Payload(marker))
    planted = max(folder.glob("_MAIN_*.toc"))
    with caplog.at_level(logging.WARNING), KnowledgeAgentCore(data_dir) as core:
        assert not marker.exists()
        warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert any(str(folder) in message for message in warned)
        assert not planted.exists()  # deleted with the index, which was rebuilt
        assert core.search("ultrasonic probe", mode="keyword")[0].item.id == item.id
    assert not marker.exists()


def test_a_toc_replaced_while_it_is_opened_gives_the_newer_one(
    chunks: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = SafeFileStorage(str(chunks))
    latest = read_toc(storage).generation
    vanished: list[int] = []

    def writer_replaced_it(folder: Path, indexname: str, gen: int, verified: Any) -> bytes:
        if not vanished:  # deleted by another process's commit
            vanished.append(gen)
            raise FileNotFoundError(gen)
        return verified_toc(folder, indexname, gen, verified)

    monkeypatch.setattr(whoosh_safe, "verified_toc", writer_replaced_it)
    assert read_toc(storage).generation == latest and vanished


def test_a_toc_written_before_the_classes_moved_names_their_old_module_and_still_loads() -> None:
    old = b"knowledge_agent.search.whoosh_parts"
    for cls, allowed in ((CountedText, SCHEMA_GLOBALS), (Codec, SEGMENT_GLOBALS)):
        data = pickle.dumps(cls, protocol=2)
        assert cls.__module__.encode() in data
        written_then = data.replace(cls.__module__.encode(), old)
        assert restricted_loads(written_then, allowed) is cls
    other = pickle.dumps(Codec, protocol=2).replace(Codec.__module__.encode(), old)
    with pytest.raises(UnsafePickleError):  # the old path lets through only the classes it had
        restricted_loads(other.replace(b"Codec", b"Other"), SEGMENT_GLOBALS)
