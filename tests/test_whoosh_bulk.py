"""A segment written in bulk is the segment Whoosh's own writer writes, as Whoosh reads it."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from whoosh import fields as wf
from whoosh import query as wq
from whoosh.codec.whoosh3 import W3Codec
from whoosh.columns import NumericColumn, VarBytesColumn
from whoosh.filedb.filestore import FileStorage
from whoosh.index import FileIndex
from whoosh.reading import SegmentReader
from whoosh.writing import CLEAR, NO_MERGE, SegmentWriter

from knowledge_agent.analysis import TextAnalyzer
from knowledge_agent.backends.local.keyword import batch as whoosh_batch
from knowledge_agent.backends.local.keyword import bulk_terms as whoosh_bulk_terms
from knowledge_agent.backends.local.keyword import bulk_write as whoosh_bulk_write
from knowledge_agent.backends.local.keyword.batch import delete_terms
from knowledge_agent.backends.local.keyword.blocks import chunk_block, item_block
from knowledge_agent.backends.local.keyword.bm25_scan import Clause, ScanCache, top_docs
from knowledge_agent.backends.local.keyword.bulk import (
    BulkSegmentWriter,
    supports_bulk,
    write_together,
)
from knowledge_agent.backends.local.keyword.bulk_columns import StoredValues, stored_column
from knowledge_agent.backends.local.keyword.parts import Codec
from knowledge_agent.backends.local.keyword.safe import SafeFileStorage, open_file_index
from knowledge_agent.backends.local.keyword.schema import (
    LuceneBM25F,
    chunk_documents,
    chunk_schema,
    item_document,
    item_schema,
)
from knowledge_agent.backends.local.keyword.segment_arrays import read_terms
from knowledge_agent.backends.local.keyword.storage import PrivateRamStorage
from knowledge_agent.models import KnowledgeChunk, KnowledgeItem
from knowledge_agent.search.analysed_batch import AnalysedBatch

ANALYZER = TextAnalyzer()
WORDS = [f"w{n}" for n in range(40)] + ["naïve", "重置密码", "getUserName", "x" * 70, "ab"]


def generic_schema() -> wf.Schema:
    return wf.Schema(
        key=wf.ID(stored=True),
        tag=wf.ID(),
        heading=wf.TEXT(phrase=False),
        content=wf.TEXT(phrase=False),
        when=wf.COLUMN(NumericColumn("d")),
        note=wf.STORED(),
    )


def stock_writer(ix: FileIndex) -> SegmentWriter:
    return ix.writer(codec=Codec())


def bulk_writer(ix: FileIndex) -> SegmentWriter:
    return BulkSegmentWriter(ix, codec=Codec())


def snapshot(ix: FileIndex, queries: list[list[Clause]] | None = None) -> dict[str, Any]:
    """Everything a reader sees: term stats, postings, lengths, stored fields, columns,
    and the BM25F scores of some queries through Whoosh and through bm25_scan."""
    schema = ix.schema
    with ix.reader() as reader:
        terms = {}
        for fieldname, tbytes in reader.all_terms():
            info = reader.term_info(fieldname, tbytes)
            m = reader.postings(fieldname, tbytes)
            postings = []
            while m.is_active():
                postings.append((m.id(), m.weight(), m.value()))
                m.next()
            terms[fieldname, tbytes] = (
                info.weight(),
                info.doc_frequency(),
                info.min_length(),
                info.max_length(),
                info.max_weight(),
                info.min_id(),
                info.max_id(),
                postings,
            )
        n = reader.doc_count_all()
        scored = [name for name in schema.names() if schema[name].scorable]
        columns = [name for name in schema.names() if schema[name].column_type is not None]
        found: dict[str, Any] = {
            "terms": terms,
            "count": (reader.doc_count(), n),
            "lengths": {f: [reader.doc_field_length(d, f) for d in range(n)] for f in scored},
            "totals": {f: reader.field_length(f) for f in scored},
            "stored": [reader.stored_fields(d) for d in range(n)],
            "columns": {
                f: list(reader.column_reader(f)) if reader.has_column(f) else None for f in columns
            },
            "deleted": [reader.is_deleted(d) for d in range(n)],
        }
    with ix.searcher(weighting=LuceneBM25F()) as searcher:
        found["scores"] = []
        for clauses in queries or []:
            q = wq.Or([wq.Term(c.field, c.text, boost=c.boost) for c in clauses])
            whoosh = {hit.docnum: hit.score for hit in searcher.search(q, limit=None)}
            scan = dict(
                (d, s) for s, d in top_docs(searcher, ScanCache(), clauses, len(whoosh) + 5)
            )
            assert whoosh.keys() == scan.keys()
            assert all(math.isclose(whoosh[d], scan[d], rel_tol=1e-12) for d in whoosh)
            found["scores"].append(whoosh)
    return found


def assert_same(a: dict[str, Any], b: dict[str, Any]) -> None:
    for key in a:
        assert a[key] == b[key], key


def random_documents(rng: random.Random, n: int) -> list[dict[str, Any]]:
    docs = []
    for i in range(n):
        words = rng.choices(WORDS, weights=range(len(WORDS), 0, -1), k=rng.randint(0, 300))
        doc: dict[str, Any] = {
            "key": f"k{i}",
            "tag": rng.choice(["", "red", "blue", "grün"]),
            "heading": " ".join(rng.sample(WORDS, rng.randint(0, 3))),
            "content": " ".join(words),
            "note": {"i": i} if rng.random() < 0.7 else None,
        }
        if rng.random() < 0.8:
            doc["when"] = rng.choice([0.0, 1.5, 1e9 + i])
        docs.append({k: v for k, v in doc.items() if v is not None})
    return docs


def build(
    open_writer: Callable[[FileIndex], SegmentWriter],
    batches: list[list[dict[str, Any]]],
    deletes: list[list[str]],
    merge: Any = NO_MERGE,
) -> FileIndex:
    ix = PrivateRamStorage().create_index(generic_schema())
    for docs, doomed in zip(batches, deletes, strict=True):
        writer = open_writer(ix)
        for key in doomed:
            writer.delete_by_term("key", key)
        for doc in docs:
            writer.add_document(**doc)
        writer.commit(mergetype=merge)
    return ix


QUERIES = [
    [Clause("content", "w1", 1.0), Clause("content", "w7", 1.0)],
    [Clause("content", "w0", 2.0), Clause("heading", "w3", 1.0), Clause("content", "ab", 0.5)],
    [Clause("content", "naïve", 1.0), Clause("content", "重置密码", 1.0)],
]


# --------------------------------------------------------------------------- one segment


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), n=st.integers(1, 300))
def test_a_bulk_segment_reads_like_whooshs_own(seed: int, n: int) -> None:
    docs = random_documents(random.Random(seed), n)
    stock = build(stock_writer, [docs], [[]])
    bulk = build(bulk_writer, [docs], [[]])
    assert_same(snapshot(stock, QUERIES), snapshot(bulk, QUERIES))


texts = st.text(alphabet=st.sampled_from("ab cd\n\tXY.é重置_9"), max_size=60)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    docs=st.lists(
        st.fixed_dictionaries(
            {"key": st.text(max_size=5), "heading": texts, "content": texts},
            optional={"tag": st.text(max_size=3), "when": st.floats(-1e6, 1e6)},
        ),
        min_size=1,
        max_size=30,
    )
)
def test_any_documents_are_written_as_whoosh_writes_them(docs: list[dict[str, Any]]) -> None:
    stock = build(stock_writer, [docs], [[]])
    bulk = build(bulk_writer, [docs], [[]])
    assert_same(snapshot(stock), snapshot(bulk))


def test_long_posting_lists_span_blocks_and_the_term_table_grows_past_64k() -> None:
    rng = random.Random(3)
    vocab = [f"term{n:05d}" for n in range(4000)]  # > 64 KB of keys: an "i" position index
    docs = [
        {"key": str(i), "content": "common " * rng.randint(1, 3) + " ".join(rng.sample(vocab, 60))}
        for i in range(700)
    ]
    stock, bulk = build(stock_writer, [docs], [[]]), build(bulk_writer, [docs], [[]])
    query = [[Clause("content", "common", 1.0), Clause("content", "term00001", 1.0)]]
    assert_same(snapshot(stock, query), snapshot(bulk, query))
    with bulk.reader() as reader:
        assert reader.doc_frequency("content", "common") == 700  # six blocks


def test_stock_whoosh_reads_a_bulk_segment_on_disk(tmp_path: Path) -> None:
    docs = random_documents(random.Random(1), 200)
    ix = SafeFileStorage(str(tmp_path)).create_index(generic_schema())
    writer = bulk_writer(ix)
    for doc in docs:
        writer.add_document(**doc)
    writer.commit()
    # Whoosh's own storage, index and readers (general unpickler, stock codec classes).
    plain = FileStorage(str(tmp_path)).open_index()
    reference = build(stock_writer, [docs], [[]])
    assert_same(snapshot(reference, QUERIES), snapshot(plain, QUERIES))
    ours = open_file_index(ix.storage, ix.schema)
    assert_same(snapshot(reference, QUERIES), snapshot(ours, QUERIES))


# --------------------------------------------------------------------------- deletions and merges


def test_deletions_work_on_a_bulk_segment() -> None:
    docs = random_documents(random.Random(2), 120)
    doomed = [[], ["k3", "k50", "k119", "absent"]]
    stock = build(stock_writer, [docs, []], doomed)
    bulk = build(bulk_writer, [docs, []], doomed)
    assert_same(snapshot(stock, QUERIES), snapshot(bulk, QUERIES))
    with bulk.searcher() as searcher:
        assert searcher.doc_count() == 117
        assert not searcher.search(wq.Term("key", "k50"))


@pytest.mark.parametrize("writer", [stock_writer, bulk_writer], ids=["stock", "bulk"])
def test_merged_segments_read_like_whooshs_merge(writer: Callable[..., SegmentWriter]) -> None:
    """Segments (bulk or stock) with deletions, merged by the bulk writer and by Whoosh."""
    rng = random.Random(4)
    batches = [random_documents(rng, rng.randint(1, 80)) for _ in range(4)]
    for i, docs in enumerate(batches):
        for doc in docs:
            doc["key"] = f"{i}-{doc['key']}"
    doomed = [[], ["0-k1", "0-k2"], ["1-k0"], []]
    merged = []
    for merge_with in (stock_writer, bulk_writer):
        ix = build(writer, batches, doomed)
        w = merge_with(ix)
        w.add_document(key="new", content="w1 w1 w2", when=2.0)
        w.commit(optimize=True)
        merged.append(snapshot(ix, QUERIES))
        assert len(ix._segments()) == 1
    assert_same(*merged)


def test_clear_keeps_only_the_new_segment() -> None:
    docs = random_documents(random.Random(5), 30)
    ix = build(bulk_writer, [docs, docs[:3]], [[], []], merge=NO_MERGE)
    w = bulk_writer(ix)
    w.add_document(**docs[0])
    w.commit(mergetype=CLEAR)
    with ix.reader() as reader:
        assert reader.doc_count_all() == 1


# --------------------------------------------------------------------------- our schemas


def _pairs(rng: random.Random, n: int) -> list[tuple[KnowledgeItem, list[KnowledgeChunk]]]:
    pairs = []
    for i in range(n):
        paragraphs = [" ".join(rng.choices(WORDS, k=rng.randint(0, 40))) for _ in range(3)]
        content = "\n\n".join(paragraphs)
        title = rng.choice(["", "Guide", "w1 notes"])
        item = KnowledgeItem(id=f"item{i}", title=title, content=content, kb=rng.choice(["a", "b"]))
        chunks, start = [], 0
        for index, text in enumerate(paragraphs):
            heading = rng.choice(["", title, f"{title} > w{index}", "Other"])
            metadata = {"symbol": "getUserName", "symbol_type": rng.choice(["function", "module"])}
            chunks.append(
                KnowledgeChunk(
                    id=f"item{i}-{index}",
                    item_id=item.id,
                    chunk_index=index,
                    content=text,
                    heading=heading,
                    start_position=start,
                    end_position=start + len(text),
                    metadata=metadata if rng.random() < 0.3 else {},
                )
            )
            start += len(text) + 2
        pairs.append((item, chunks if rng.random() < 0.9 else []))
    return pairs


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), n=st.integers(1, 40))
def test_chunk_documents_from_the_analysed_batch_are_chunk_documents(seed: int, n: int) -> None:
    """The chunk index written from one analysis equals the one add_document writes from
    chunk_search_text; the item index, from the chunks' terms, equals item_document's when
    the chunks cover the content (here: paragraphs separated by blank lines)."""
    pairs = _pairs(random.Random(seed), n)
    batch = AnalysedBatch.build(ANALYZER, pairs)
    queries = [[Clause("content", t, 1.0) for t in ANALYZER.terms("w1 w2 guide getUserName")]]
    for schema, block, documents in (
        (chunk_schema(ANALYZER), chunk_block, lambda item, chunks: chunk_documents(item, chunks)),
        (item_schema(ANALYZER), item_block, lambda item, chunks: [item_document(item)]),
    ):
        stock = PrivateRamStorage().create_index(schema)
        with stock.writer(codec=Codec()) as w:
            for item, chunks in pairs:
                for doc in documents(item, chunks):
                    w.add_document(**doc)
        bulk = PrivateRamStorage().create_index(schema)
        w = bulk_writer(bulk)
        w.add_block(block(batch))
        w.commit()
        assert_same(snapshot(stock, queries), snapshot(bulk, queries))


def test_our_schemas_and_not_others_can_be_written_in_bulk() -> None:
    assert supports_bulk(chunk_schema(ANALYZER)) and supports_bulk(item_schema(ANALYZER))
    assert not supports_bulk(wf.Schema(text=wf.TEXT()))  # positions
    assert not supports_bulk(wf.Schema(text=wf.TEXT(phrase=False, vector=True)))
    ix = PrivateRamStorage().create_index(wf.Schema(text=wf.TEXT()))
    with pytest.raises(ValueError, match="cannot be written in bulk"):
        bulk_writer(ix)
    writer = stock_writer(ix)  # the lock was released
    writer.cancel()


# --------------------------------------------------------------------------- columns


@pytest.mark.parametrize("n", [3, 2**15 + 1])
def test_the_stored_fields_column_is_whooshs(n: int) -> None:
    """Past 2**15 documents Whoosh also writes the offsets; both layouts read back."""
    rng = np.random.default_rng(0)
    values = [b"" if rng.random() < 0.2 else bytes(rng.integers(0, 255, 300)) for _ in range(n)]
    storage = PrivateRamStorage()
    f = storage.create_file("stock")
    writer = VarBytesColumn().writer(f)
    for docnum, value in enumerate(values):
        if value:
            writer.add(docnum, value)
    writer.finish(n)
    f.close()
    stock = storage.open_file("stock").read()
    lengths = np.array([len(v) for v in values], np.int64)
    ours = stored_column(StoredValues(b"".join(values), lengths))
    assert ours == stock
    f = storage.create_file("ours")
    f.write(ours)
    f.close()
    reader = VarBytesColumn().reader(storage.open_file("ours"), 0, len(ours), n)
    assert [reader[d] for d in range(n)] == values


def test_a_stored_value_is_a_zlib_stream_of_the_pickled_fields() -> None:
    import pickle
    import zlib

    fields = {"chunk_id": "c" * 70_000, "n": 3}  # more than one stored deflate block
    stored = StoredValues.encode([fields, None])
    assert stored.lengths[1] == 0
    assert pickle.loads(zlib.decompress(stored.data)) == fields


def test_segment_reader_of_a_bulk_segment_uses_the_w3_codec(tmp_path: Path) -> None:
    ix = SafeFileStorage(str(tmp_path)).create_index(generic_schema())
    writer = bulk_writer(ix)
    writer.add_document(key="a", content="w1 w2", when=1.0)
    writer.commit()
    segment = ix._segments()[0]
    reader = SegmentReader(ix.storage, ix.schema, segment, codec=W3Codec())
    assert reader.doc_frequency("content", "w1") == 1
    reader.close()


# --------------------------------------------------------------------------- reading in bulk


def _matcher_postings(ix: FileIndex) -> dict[tuple[str, bytes], list[tuple[int, float]]]:
    with ix.reader() as reader:
        found = {}
        for fieldname, tbytes in reader.all_terms():
            m = reader.postings(fieldname, tbytes)
            pairs = []
            while m.is_active():
                pairs.append((m.id(), m.weight()))
                m.next()
            found[fieldname, tbytes] = pairs
        return found


def _array_postings(ix: FileIndex) -> dict[tuple[str, bytes], list[tuple[int, float]]] | None:
    segment = ix._segments()[0]
    reader = SegmentReader(ix.storage, ix.schema, segment, codec=Codec())
    try:
        found = read_terms(reader._terms)
        if found is None:
            return None
        out: dict[tuple[str, bytes], list[tuple[int, float]]] = {}
        for name, (first, end) in found.fields.items():
            # Read in two ranges, as a sliced merge does.
            middle = (first + end) // 2
            for lo, hi in ((first, middle), (middle, end)):
                read = found.postings(lo, hi)
                if read is None:
                    return None
                term_of, docs, weights = read
                for t in range(lo, hi):
                    rows = np.flatnonzero(term_of == t)
                    out[name, found.terms[t]] = list(
                        zip(docs[rows].tolist(), weights[rows].tolist(), strict=True)
                    )
        return out
    finally:
        reader.close()


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), n=st.integers(1, 250))
def test_a_bulk_segment_is_read_back_whole_as_arrays(seed: int, n: int) -> None:
    ix = build(bulk_writer, [random_documents(random.Random(seed), n)], [[]])
    assert _array_postings(ix) == _matcher_postings(ix)


def test_a_segment_pickled_by_whoosh_is_left_to_whoosh() -> None:
    """Whoosh pickles a short tuple without MARK (and memoises): not read as arrays; a merge
    reads such a segment term by term instead (test_merged_segments_read_like_whooshs_merge)."""
    ix = build(stock_writer, [random_documents(random.Random(6), 50)], [[]])
    assert _array_postings(ix) is None


@pytest.mark.parametrize("few", [64, 0], ids=["looked-up", "lexicon-pass"])
def test_deleting_many_terms_at_once_deletes_what_delete_by_term_deletes(
    few: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(whoosh_batch, "_FEW_VALUES", few)
    batches = [random_documents(random.Random(n), 40) for n in range(3)]
    for i, docs in enumerate(batches):
        for doc in docs:
            doc["key"] = f"{i}-{doc['key']}"
    doomed = ["0-k1", "1-k1", "2-k39", "absent", "0-k1"]
    found = []
    for delete in ("one by one", "at once"):
        ix = build(bulk_writer, batches, [[], ["0-k2"], []])
        writer = bulk_writer(ix)
        if delete == "at once":
            delete_terms(writer, "key", doomed)
        else:
            for key in doomed:
                writer.delete_by_term("key", key)
        writer.commit(mergetype=NO_MERGE)
        found.append(snapshot(ix, QUERIES))
    assert_same(*found)
    assert sum(found[0]["deleted"]) == 4


@pytest.mark.parametrize("writer", [stock_writer, bulk_writer], ids=["stock", "bulk"])
def test_postings_written_a_slice_of_terms_at_a_time_are_the_same(
    writer: Callable[..., SegmentWriter], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Slices of a few dozen postings (not a million): new and merged documents alike are
    sorted and encoded slice by slice, segments being merged read a range at a time."""
    rng = random.Random(7)
    batches = [random_documents(rng, rng.randint(20, 60)) for _ in range(3)]
    for i, docs in enumerate(batches):
        for doc in docs:
            doc["key"] = f"{i}-{doc['key']}"
    doomed = [[], ["0-k4"], []]
    new = random_documents(rng, 30)
    found = []
    for slice_postings in (whoosh_bulk_write.PART_POSTINGS, 37):
        monkeypatch.setattr(whoosh_bulk_write, "PART_POSTINGS", slice_postings)
        ix = build(writer, batches, doomed)
        w = bulk_writer(ix)
        for doc in new:
            w.add_document(**doc)
        w.commit(optimize=True)
        found.append(snapshot(ix, QUERIES))
    assert_same(*found)


# --------------------------------------------------------------------------- small writes


def _segment_files(jobs: list[whoosh_bulk_write.SegmentJob]) -> list[dict[str, bytes]]:
    return [{name: bytes(data) for name, data in job.storage.files.items()} for job in jobs]


def _jobs(batch: AnalysedBatch) -> list[whoosh_bulk_write.SegmentJob]:
    jobs = []
    for schema, block in (
        (chunk_schema(ANALYZER), chunk_block),
        (item_schema(ANALYZER), item_block),
    ):
        storage = PrivateRamStorage()
        segment = Codec().new_segment(storage, "MAIN")
        segment.segid = "s" * 16  # the same file names both ways
        made = block(batch)
        jobs.append(
            whoosh_bulk_write.SegmentJob(storage, segment, schema, [made], made.count, False)
        )
    return jobs


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), n=st.integers(1, 40))
def test_small_segments_written_together_are_the_files_written_field_by_field(
    seed: int, n: int
) -> None:
    """The chunk and item segments of a small write, their postings sorted and encoded in
    one pass, are byte for byte the segments written one field at a time."""
    batch = AnalysedBatch.build(ANALYZER, _pairs(random.Random(seed), n))
    together = _jobs(batch)
    # A segment without a single indexed term (every text and title empty) is not one.
    assume(all(whoosh_bulk_write.jointly_writable(job) for job in together))
    whoosh_bulk_write.write_segments(together)
    apart = _jobs(batch)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(whoosh_bulk_write, "JOINT_ROWS", -1)  # the field-by-field path
        assert not any(whoosh_bulk_write.jointly_writable(job) for job in apart)
        for job in apart:
            whoosh_bulk_write.write_segment(
                job.storage, job.segment, job.schema, job.blocks, job.total, compound=False
            )
    assert _segment_files(together) == _segment_files(apart)
    for a, b in zip(together, apart, strict=True):
        assert a.segment._fieldlengths == b.segment._fieldlengths


def test_a_segment_written_ahead_is_written_again_when_a_merge_adds_to_it() -> None:
    """write_together writes the writers' segments before their commits; a writer given more
    documents after (a merge's) writes its whole segment again at the commit."""
    batch = AnalysedBatch.build(ANALYZER, _pairs(random.Random(2), 6))
    indexes = [
        PrivateRamStorage().create_index(s) for s in (chunk_schema(ANALYZER), item_schema(ANALYZER))
    ]
    writers = [BulkSegmentWriter(ix, codec=Codec()) for ix in indexes]
    writers[0].add_block(chunk_block(batch))
    writers[1].add_block(item_block(batch))
    assert write_together(writers)
    extra = AnalysedBatch.build(ANALYZER, _pairs(random.Random(3), 2))
    writers[1].add_block(item_block(extra))
    for writer in writers:
        writer.commit()
    with indexes[0].reader() as reader:
        assert reader.doc_count() == batch.n_chunks
    with indexes[1].reader() as reader:
        assert reader.doc_count() == 8
        assert len(list(reader.all_stored_fields())) == 8  # all of them in the files


# --------------------------------------------------------------------------- terms tables


@settings(max_examples=60, deadline=None)
@given(
    homes=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2**24 - 1)), max_size=400),
    crowded=st.booleans(),
    files=st.integers(1, 3),
)
def test_every_key_of_a_hash_table_is_found_by_the_readers_probe(
    homes: list[tuple[int, int]], crowded: bool, files: int
) -> None:
    """Each key sits in a slot of its own table, reached from its home slot by probing past
    taken slots only (wrapping at the table's end), as Whoosh's HashReader looks it up."""
    hashes = np.array(
        [
            ((2**24 - 1 - high % 5 if crowded else high) << 8) | (low if crowded else high & 255)
            for low, high in homes
        ],
        np.uint32,
    )
    group = np.array([low % files for low, _ in homes], np.int64)
    slot, slots, base = whoosh_bulk_terms._place(hashes, group, files)
    assert len(set(slot.tolist())) == hashes.size
    taken = np.zeros(int(slots.sum()), bool)
    taken[slot] = True
    for key in range(hashes.size):
        table = int(hashes[key] & 255) + 256 * int(group[key])
        size, first = int(slots[table]), int(base[table])
        probe = int(hashes[key] >> 8) % size
        for _ in range(size):
            if first + probe == slot[key]:
                break
            assert taken[first + probe]
            probe = (probe + 1) % size
        else:
            raise AssertionError(f"key {key} is not reachable")


@settings(max_examples=30, deadline=None)
@given(
    tables=st.lists(
        st.lists(st.sets(st.binary(max_size=6), max_size=60), max_size=4), min_size=1, max_size=3
    )
)
def test_terms_tables_encoded_together_are_read_by_whooshs_hash_reader(
    tables: list[list[set[bytes]]],
) -> None:
    from whoosh.filedb.filetables import OrderedHashReader

    given_tables = []
    for fields in tables:
        terms = [sorted(field) for field in fields]
        values = np.zeros(sum(map(len, terms)), whoosh_bulk_terms.TERM_INFO)
        values["offset"] = np.arange(values.size) * 3 + 1
        given_tables.append(({f"f{n}": n for n in range(len(terms))}, terms, values))
    encoded = whoosh_bulk_terms.encode_term_tables(given_tables)
    storage = PrivateRamStorage()
    for number, ((fieldmap, terms, values), data) in enumerate(
        zip(given_tables, encoded, strict=True)
    ):
        assert data == whoosh_bulk_terms.encode_terms(fieldmap, terms, values)
        with storage.create_file(f"t{number}") as f:
            f.write(data)
        reader = OrderedHashReader.open(storage, f"t{number}")
        assert reader.extras["fieldmap"] == fieldmap
        at = 0
        for field_number, field in enumerate(terms):
            for term in field:
                key = field_number.to_bytes(2, "big") + term
                assert reader[key] == values[at].tobytes()
                at += 1
        assert list(reader.keys()) == [
            n.to_bytes(2, "big") + t for n, field in enumerate(terms) for t in field
        ]
        reader.close()
