"""The Whoosh drop-ins write and read exactly what the parts they replace do."""

from __future__ import annotations

import io
import pickle
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from whoosh import fields as wf
from whoosh.codec.whoosh3 import W3Codec, W3PerDocReader
from whoosh.filedb.filestore import FileStorage, RamStorage
from whoosh.reading import SegmentReader
from whoosh.writing import NO_MERGE

from knowledge_agent.analysis import TextAnalyzer
from knowledge_agent.backends.local.keyword.parts import (
    Codec,
    CountedText,
    PostingTable,
    _MappedFile,
    _ViewReader,
    spill_to_pool,
)
from knowledge_agent.backends.local.keyword.storage import PrivateRamStorage

WORDS = ["alpha", "beta", "running", "runs", "数据库", "索引", "the", "x1", "ünïcode", "a-b"]
texts = st.lists(st.sampled_from(WORDS), max_size=40).map(" ".join) | st.text(max_size=60)


@given(text=texts)
def test_counted_text_indexes_the_same_postings_as_text(text: str) -> None:
    analyzer = TextAnalyzer().whoosh_analyzer()
    plain = wf.TEXT(analyzer=analyzer, phrase=False, stored=False)
    counted = CountedText(analyzer)
    assert sorted(counted.index(text)) == sorted(plain.index(text))


def test_counted_text_is_frequency_only_text() -> None:
    counted = CountedText(TextAnalyzer().whoosh_analyzer())
    assert isinstance(counted, wf.TEXT)
    assert not counted.format.supports("positions")
    assert not counted.stored


def _schema() -> wf.Schema:
    return wf.Schema(
        key=wf.ID(stored=True), body=CountedText(TextAnalyzer().whoosh_analyzer()), tag=wf.ID()
    )


def _add(writer: object, docs: list[tuple[str, str]]) -> None:
    for key, body in docs:
        writer.add_document(key=key, body=body, tag=key[:1])


def _assert_same_postings(ours: object, theirs: object) -> None:
    assert list(ours.all_terms()) == list(theirs.all_terms())
    for field, term in theirs.all_terms():
        mine = list(ours.postings(field, term).all_items())
        assert mine == list(theirs.postings(field, term).all_items()), (field, term)


def _index(docs: list[tuple[str, str]], codec: W3Codec) -> tuple[RamStorage, object]:
    storage = PrivateRamStorage()
    ix = storage.create_index(_schema())
    with ix.writer(codec=codec) as w:
        w.mergetype = NO_MERGE
        _add(w, docs)
    return storage, ix


docs_strategy = st.lists(st.tuples(st.sampled_from("abc"), texts), min_size=1, max_size=25).map(
    lambda pairs: [(f"{k}{n}", body) for n, (k, body) in enumerate(pairs)]
)


@settings(max_examples=40, suppress_health_check=[HealthCheck.too_slow])
@given(docs=docs_strategy)
def test_per_document_reader_reads_the_lengths_whoosh_reads(docs: list[tuple[str, str]]) -> None:
    storage, ix = _index(docs, Codec())
    segment = ix._segments()[0]
    ours = Codec().per_document_reader(storage, segment)
    theirs = W3PerDocReader(storage, segment)
    for field in ("body", "tag", "key"):
        for docnum in range(len(docs)):
            expected = theirs.doc_field_length(docnum, field)
            assert ours.doc_field_length(docnum, field) == expected
            assert ours.doc_field_length(docnum, field, default=7) == theirs.doc_field_length(
                docnum, field, default=7
            )
    assert ours.doc_field_length(len(docs), "body", default=5) == 5


@settings(max_examples=25, suppress_health_check=[HealthCheck.too_slow])
@given(docs=docs_strategy)
def test_codec_writes_an_index_whoosh_reads_back_whole(docs: list[tuple[str, str]]) -> None:
    """Uncompressed blocks and the per-document reader change no posting, length or field,
    also through a merge that reads the segments back with the codec."""
    half = len(docs) // 2
    _, ix = _index(docs[:half] or docs, Codec())
    with ix.writer(codec=Codec()) as w:
        w.mergetype = NO_MERGE
        _add(w, docs[half:] if half else [])
    _, reference = _index(docs, W3Codec())
    with ix.writer(codec=Codec()) as w:
        w.optimize = True  # merge every segment into one through Codec's readers
    with ix.searcher() as ours, reference.searcher() as theirs:
        assert ours.doc_count() == theirs.doc_count() == len(docs)
        assert sorted(ours.lexicon("body")) == sorted(theirs.lexicon("body"))
        for term in theirs.lexicon("body"):
            mine = {
                ours.stored_fields(d)["key"]: w
                for d, w in ours.postings("body", term).items_as("weight")
            }
            want = {
                theirs.stored_fields(d)["key"]: w
                for d, w in theirs.postings("body", term).items_as("weight")
            }
            assert mine == want
        lengths = {
            ours.stored_fields(d)["key"]: ours.doc_field_length(d, "body") for d in range(len(docs))
        }
        want_lengths = {
            theirs.stored_fields(d)["key"]: theirs.doc_field_length(d, "body")
            for d in range(len(docs))
        }
        assert lengths == want_lengths
    assert len(ix._segments()) == 1


ops = st.lists(
    st.one_of(
        st.tuples(st.just("read"), st.integers(-1, 12)),
        st.tuples(st.just("readline"), st.integers(-1, 12)),
        st.tuples(st.just("seek"), st.integers(0, 40), st.sampled_from([0, 1, 2])),
        st.tuples(st.just("tell")),
        st.tuples(st.just("peek"), st.integers(0, 12)),
    ),
    max_size=30,
)


@given(data=st.binary(max_size=40), steps=ops)
def test_view_reader_reads_like_bytesio(data: bytes, steps: list[tuple]) -> None:
    view, bio = _ViewReader(memoryview(data)), io.BytesIO(data)
    for step in steps:
        name, *args = step
        if name == "seek" and args[1] != 0:
            args[0] = -args[0] if args[1] == 2 else args[0] - 20  # relative moves, both ways
            if bio.tell() + args[0] < 0 and args[1] == 1:
                continue  # BytesIO refuses a negative position; nothing to compare
        if name == "peek":  # bytes ahead without moving: at least one unless at the end
            ahead = view.peek(*args)
            assert data[bio.tell() :].startswith(ahead)
            assert ahead or bio.tell() >= len(data)
            assert view.tell() == bio.tell()
            continue
        assert getattr(view, name)(*args) == getattr(bio, name)(*args), step


def test_compound_segments_are_read_in_place_with_the_same_results(tmp_path: Path) -> None:
    docs = [
        (f"k{n}", " ".join(WORDS[(n * i) % len(WORDS)] for i in range(n % 9))) for n in range(300)
    ]
    storage = FileStorage(str(tmp_path)).create()
    schema = _schema()
    ix = storage.create_index(schema)
    for start in (0, 150):
        with ix.writer(codec=Codec()) as w:
            w.mergetype = NO_MERGE
            _add(w, docs[start : start + 150])
    for segment in ix._segments():
        assert segment.is_compound()
        ours = SegmentReader(storage, schema, segment)  # the segment's own codec: Codec
        theirs = SegmentReader(storage, schema, segment, codec=W3Codec())
        assert isinstance(ours._terms._dbfile, _MappedFile)
        _assert_same_postings(ours, theirs)
        assert list(ours.all_stored_fields()) == list(theirs.all_stored_fields())
        assert [ours.doc_field_length(d, "body") for d in range(150)] == [
            theirs.doc_field_length(d, "body") for d in range(150)
        ]
        ours.close()
        theirs.close()


def _write(docs: list[tuple[str, str]], deleted: list[str], table: bool) -> object:
    """Two segments, some documents deleted, then merged into one; with or without
    PostingTable as the writers' pool."""
    ix = PrivateRamStorage().create_index(_schema())
    half = len(docs) // 2
    for part in (docs[:half], docs[half:]):
        w = ix.writer(codec=Codec())
        if table:
            w.pool = PostingTable()
        w.mergetype = NO_MERGE
        _add(w, part)
        w.commit(merge=False)
    w = ix.writer(codec=Codec())
    if table:
        w.pool = PostingTable()
    for key in deleted:
        w.delete_by_term("key", key)
    w.commit(optimize=True)
    return ix


@settings(max_examples=30, suppress_health_check=[HealthCheck.too_slow])
@given(docs=docs_strategy, data=st.data())
def test_posting_table_writes_the_postings_whooshs_pool_writes(
    docs: list[tuple[str, str]], data: st.DataObject
) -> None:
    deleted = data.draw(st.lists(st.sampled_from([key for key, _ in docs]), unique=True))
    ours, theirs = _write(docs, deleted, table=True), _write(docs, deleted, table=False)
    with ours.reader() as a, theirs.reader() as b:
        assert a.doc_count() == b.doc_count() == len(docs) - len(deleted)
        _assert_same_postings(a, b)
        assert list(a.all_stored_fields()) == list(b.all_stored_fields())


@given(
    values=st.lists(
        st.recursive(
            st.none() | st.integers() | st.floats(allow_nan=False) | st.binary(max_size=700),
            lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner),
            max_leaves=20,
        ),
        min_size=1,
        max_size=5,
    )
)
def test_pickles_load_from_a_view_reader_and_leave_it_just_past_each(values: list) -> None:
    """Whoosh reads a block header with pickle.load, then takes tell() as the data start."""
    pickles = [pickle.dumps(value, protocol=-1) for value in values]
    reader = _ViewReader(memoryview(b"".join(pickles) + b"tail"))
    end = 0
    for value, dumped in zip(values, pickles, strict=True):
        assert pickle.load(reader) == value
        end += len(dumped)
        assert reader.tell() == end
    assert reader.read() == b"tail"


@settings(max_examples=20, suppress_health_check=[HealthCheck.too_slow])
@given(docs=docs_strategy)
def test_a_table_spilled_into_whooshs_pool_merges_like_whoosh(docs: list[tuple[str, str]]) -> None:
    """A writer's new documents go into a PostingTable; before segments are merged into
    it, the table moves into Whoosh's bounded pool (which then spills runs to disk)."""

    def build(spill: bool) -> object:
        _, ix = _index(docs[: len(docs) // 2], Codec())
        w = ix.writer(codec=Codec())
        if spill:
            w.pool = PostingTable()
        _add(w, docs[len(docs) // 2 :])
        if spill:
            spill_to_pool(w, limitmb=1)
            assert not isinstance(w.pool, PostingTable)
            w.pool.limit = 2_000  # bytes: force runs to disk even for a few postings
        w.commit(optimize=True)
        return ix

    ours, theirs = build(spill=True), build(spill=False)
    with ours.reader() as a, theirs.reader() as b:
        assert a.doc_count() == b.doc_count() == len(docs)
        _assert_same_postings(a, b)
