"""Tests for SearchIndexManager: the Whoosh BM25F chunk and item indexes (R4)."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import random
import shutil
import threading
import zlib
from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from whoosh import index as whoosh_index

from knowledge_agent.analysis import AnalyzerConfig, TextAnalyzer
from knowledge_agent.backends.local.checksums import read_sealed_json, seal_json
from knowledge_agent.backends.local.keyword import internals
from knowledge_agent.backends.local.keyword.index import SearchIndexManager, verify_keyword_folder
from knowledge_agent.backends.local.keyword.schema import LuceneBM25F
from knowledge_agent.chunking import ChunkConfig, ContentChunker
from knowledge_agent.errors import ConfigError, DamagedIndexError, QueryError, SearchIndexError
from knowledge_agent.models import KnowledgeChunk, KnowledgeItem
from knowledge_agent.search.analysed_batch import AnalysedBatch
from knowledge_agent.search.filters import SearchFilters
from knowledge_agent.search.hits import ChunkHit, ItemHit

ANALYZER = TextAnalyzer()
BASE_TIME = datetime(2024, 5, 1, 12, 0, tzinfo=timezone.utc)

Pair = tuple[KnowledgeItem, list[KnowledgeChunk]]


def terms(text: str) -> list[str]:
    return ANALYZER.terms(text)


def make_pair(
    item_id: str,
    sections: Sequence[tuple[str, str]],
    *,
    title: str = "",
    **item_fields: Any,
) -> Pair:
    """An item whose content is its sections' texts, one chunk per (heading, text)."""
    content = ""
    spans = []
    for heading, text in sections:
        if content:
            content += "\n\n"
        spans.append((heading, len(content), len(content) + len(text)))
        content += text
    item = KnowledgeItem(id=item_id, title=title, content=content, **item_fields)
    chunks = [
        KnowledgeChunk(
            id=f"{item_id}-c{index}",
            item_id=item_id,
            chunk_index=index,
            content=content[start:end],
            heading=heading,
            start_position=start,
            end_position=end,
        )
        for index, (heading, start, end) in enumerate(spans)
    ]
    return item, chunks


def chunk_ids(hits: Sequence[ChunkHit]) -> list[str]:
    return [hit.chunk_id for hit in hits]


@pytest.fixture(params=["memory", "disk"])
def manager(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SearchIndexManager]:
    index_dir = None if request.param == "memory" else tmp_path / "index"
    with SearchIndexManager(index_dir, ANALYZER) as mgr:
        yield mgr


@pytest.fixture
def mem() -> Iterator[SearchIndexManager]:
    with SearchIndexManager(None, ANALYZER) as mgr:
        yield mgr


# --------------------------------------------------------------------------- add / search / remove


def test_add_search_and_remove_chunks(manager: SearchIndexManager) -> None:
    deploy = make_pair(
        "deploy",
        [("Install", "Install the package with pip."), ("Rollback", "Roll back a bad release.")],
        title="Deploy guide",
    )
    cache = make_pair("cache", [("Headers", "Cache-Control headers set freshness.")])
    manager.update(upserts=[deploy, cache])
    assert manager.chunk_count() == 3
    assert manager.item_count() == 2

    hits = manager.search_chunks(terms("roll back release"), 10)
    assert chunk_ids(hits) == ["deploy-c1"]
    assert hits[0].item_id == "deploy"
    assert hits[0].chunk_index == 1
    assert hits[0].score > 0

    manager.remove_chunks_for_item("deploy")
    assert manager.search_chunks(terms("roll back release"), 10) == []
    assert manager.search_items(terms("deploy"), 10) == []
    assert manager.chunk_count() == 1
    assert manager.item_count() == 1
    manager.remove_chunks_for_item("deploy")  # removing again is harmless
    assert manager.chunk_count() == 1


def test_add_chunks_is_update_of_one_item(mem: SearchIndexManager) -> None:
    item, chunks = make_pair("a", [("", "alpha beta")])
    mem.add_chunks(item, chunks)
    assert chunk_ids(mem.search_chunks(["alpha"], 5)) == ["a-c0"]
    assert [hit.item_id for hit in mem.search_items(["alpha"], 5)] == ["a"]


def test_finds_the_right_chunk_of_a_long_document(mem: SearchIndexManager) -> None:
    filler = (
        "The engine drives the pump. Routine maintenance keeps the engine healthy and the "
        "operators follow the checklist before every shift. "
    ) * 3
    sections = [f"## Section {n}\n\n{filler}Note number {n} about the schedule." for n in range(40)]
    answer = (
        "## Cooling\n\nWhen the engine starts overheating, check the coolant level and the "
        "radiator fan before anything else."
    )
    sections.insert(27, answer)
    content = "\n\n".join(sections)
    item = KnowledgeItem(id="manual", title="Engine manual", content=content)
    chunks = ContentChunker(ChunkConfig(max_chunk_size=600)).chunk(content, title=item.title)
    for chunk in chunks:
        chunk.item_id = item.id
    assert len(chunks) > 30
    mem.add_chunks(item, chunks)

    hits = mem.search_chunks(terms("engine overheating coolant"), 5)
    best = next(chunk for chunk in chunks if chunk.id == hits[0].chunk_id)
    assert "coolant" in best.content
    assert "Cooling" in best.heading
    assert hits[0].score > hits[1].score


def test_heading_match_outranks_body_only_match(mem: SearchIndexManager) -> None:
    mem.update(
        upserts=[
            make_pair("h", [("Rollback procedure", "steps for undoing things safely")]),
            make_pair("b", [("Notes", "rollback steps for undoing things")]),
        ]
    )
    assert chunk_ids(mem.search_chunks(["rollback"], 5)) == ["h-c0", "b-c0"]


def test_field_boosts_drive_the_ranking() -> None:
    pairs = [
        make_pair("h", [("Rollback", "steps for undoing things safely")]),
        make_pair("b", [("Notes", "rollback rollback rollback rollback rollback steps")]),
    ]
    with SearchIndexManager() as plain:
        plain.update(upserts=pairs)
        assert chunk_ids(plain.search_chunks(["rollback"], 5)) == ["b-c0", "h-c0"]
    with SearchIndexManager(field_boosts={"heading": 5.0}) as boosted:
        boosted.update(upserts=pairs)
        assert chunk_ids(boosted.search_chunks(["rollback"], 5)) == ["h-c0", "b-c0"]


def test_title_counts_for_every_chunk(mem: SearchIndexManager) -> None:
    mem.update(
        upserts=[
            make_pair("k", [("", "first part"), ("", "second part")], title="Kubernetes notes"),
            make_pair("o", [("", "other text")], title="Other"),
        ]
    )
    assert sorted(chunk_ids(mem.search_chunks(terms("kubernetes"), 5))) == ["k-c0", "k-c1"]


def test_chinese_terms_find_the_chunk(mem: SearchIndexManager) -> None:
    mem.update(
        upserts=[
            make_pair("faq", [("账户", "如何重置密码？请打开设置页面。")], language="zh"),
            make_pair("crypto", [("密码学", "密码学简介与历史。")], language="zh"),
            make_pair("en", [("Password", "How to reset your password.")]),
        ]
    )
    hits = mem.search_chunks(terms("重置密码"), 5)
    assert hits[0].chunk_id == "faq-c0"
    assert "en-c0" not in chunk_ids(hits)


def test_duplicate_query_terms_weigh_like_query_term_frequency(mem: SearchIndexManager) -> None:
    mem.update(
        upserts=[
            make_pair("x", [("", "alpha alpha filler")]),
            make_pair("y", [("", "beta beta filler")]),
        ]
    )
    plain = mem.search_chunks(["alpha", "beta"], 5)
    assert plain[0].score == pytest.approx(plain[1].score)
    assert chunk_ids(plain) == ["x-c0", "y-c0"]  # a tie: chunk_id order
    doubled = mem.search_chunks(["alpha", "beta", "beta"], 5)
    assert chunk_ids(doubled) == ["y-c0", "x-c0"]
    single = mem.search_chunks(["beta"], 5)[0].score
    assert mem.search_chunks(["beta", "beta"], 5)[0].score == pytest.approx(2 * single)


def test_search_items_ranks_whole_documents(mem: SearchIndexManager) -> None:
    mem.update(
        upserts=[
            make_pair("t", [("", "nothing relevant here")], title="Backup runbook"),
            make_pair("c", [("", "a backup is mentioned once in a longer body of text")]),
            make_pair("n", [("", "unrelated")]),
        ]
    )
    hits = mem.search_items(terms("backup"), 10)
    assert [hit.item_id for hit in hits] == ["t", "c"]
    assert all(isinstance(hit, ItemHit) for hit in hits)


# --------------------------------------------------------------------------- update / rebuild


def test_update_replaces_an_items_old_chunks(manager: SearchIndexManager) -> None:
    manager.update(upserts=[make_pair("doc", [("", "old apple"), ("", "old banana"), ("", "x")])])
    manager.update(upserts=[make_pair("doc", [("", "new cherry")])])
    assert manager.chunk_count() == 1
    assert manager.item_count() == 1
    assert manager.search_chunks(terms("apple banana"), 10) == []
    assert manager.search_items(terms("apple banana"), 10) == []
    assert chunk_ids(manager.search_chunks(terms("cherry"), 10)) == ["doc-c0"]


def test_update_batches_upserts_and_deletes_and_is_idempotent(
    manager: SearchIndexManager,
) -> None:
    manager.update(upserts=[make_pair(name, [("", f"{name} common")]) for name in "abcd"])
    batch: dict[str, Any] = {
        "upserts": [
            make_pair("a", [("", "a first version")]),
            make_pair("e", [("", "e common")]),
            make_pair("a", [("", "a second common version")]),  # the last one wins
            make_pair("c", [("", "c back common")]),  # deleted and upserted: upserted
        ],
        "deletes": ["b", "c", "missing"],
    }
    manager.update(**batch)
    manager.update(**batch)  # replaying is safe
    found = {hit.item_id for hit in manager.search_chunks(["common"], 20)}
    assert found == {"a", "c", "d", "e"}
    assert manager.chunk_count() == 4
    assert manager.item_count() == 4
    assert manager.search_chunks(terms("first"), 5) == []
    manager.update()  # nothing to do
    assert manager.chunk_count() == 4


def test_many_small_commits_then_merges_never_duplicate_hits(tmp_path: Path) -> None:
    # Whoosh merges small segments every few commits; a reused reader must not keep merged-away
    # segments or deleted documents (whoosh-reloaded's Searcher.refresh() does both).
    with SearchIndexManager(tmp_path / "ix") as mgr:
        for n in range(24):
            mgr.add_chunks(*make_pair(f"i{n:02d}", [("", "shared word")]))
            assert mgr.chunk_count() == n + 1
            mgr.search_chunks(["share"], 100)
        mgr.remove_chunks_for_item("i00")
        hits = mgr.search_chunks(terms("shared"), 100)
        assert len(hits) == 23 == len(set(chunk_ids(hits)))
        assert "i00-c0" not in chunk_ids(hits)


def test_rebuild_replaces_content_from_a_generator(manager: SearchIndexManager) -> None:
    manager.update(upserts=[make_pair("old", [("", "obsolete words")])])
    manager.set_applied_seq(3)

    def pairs() -> Iterator[Pair]:
        for n in range(5):
            yield make_pair(f"new{n}", [("", "fresh words"), ("", f"part {n}")])

    assert manager.rebuild(pairs()) == 10
    assert manager.chunk_count() == 10
    assert manager.item_count() == 5
    assert manager.search_chunks(terms("obsolete"), 5) == []
    assert len(manager.search_chunks(terms("fresh"), 10)) == 5
    assert manager.applied_seq == 3  # the caller decides what the rebuild reflects


def test_rebuild_streams_and_commits_in_batches(tmp_path: Path) -> None:
    index_dir = tmp_path / "ix"
    with SearchIndexManager(index_dir) as mgr, SearchIndexManager(index_dir) as observer:
        mgr.update(upserts=[make_pair("old", [("", "a"), ("", "b"), ("", "c")])])
        mgr.rebuild_commit_every = 2
        seen: list[int] = []

        def pairs() -> Iterator[Pair]:
            for n in range(6):
                # What another reader sees while the rebuild is still pulling pairs.
                seen.append(observer.chunk_count())
                yield make_pair(f"n{n}", [("", f"text {n}")])

        assert mgr.rebuild_chunk_index(pairs()) == 6
        # Old content until the first commit, then two chunks more at every commit.
        assert seen == [3, 3, 2, 2, 4, 4]
        assert observer.chunk_count() == 6
        assert observer.item_count() == 6


def test_rebuild_with_nothing_empties_the_indexes(manager: SearchIndexManager) -> None:
    manager.update(upserts=[make_pair("old", [("", "words")])])
    assert manager.rebuild(iter(())) == 0
    assert manager.chunk_count() == 0
    assert manager.item_count() == 0
    assert not manager.has_chunk_index()


def test_rebuild_lets_the_sources_error_through(mem: SearchIndexManager) -> None:
    def broken() -> Iterator[Pair]:
        yield make_pair("a", [("", "words")])
        raise RuntimeError("sqlite went away")

    with pytest.raises(RuntimeError, match="sqlite went away"):
        mem.rebuild(broken())
    mem.update(upserts=[make_pair("b", [("", "more words")])])  # the lock was released
    assert mem.search_chunks(["more"], 5)


# --------------------------------------------------------------------------- status


def test_has_index_reflects_content(manager: SearchIndexManager) -> None:
    assert not manager.has_chunk_index()
    assert not manager.has_item_index()
    assert manager.chunk_count() == 0
    manager.add_chunks(*make_pair("a", [("", "words")]))
    assert manager.has_chunk_index()
    assert manager.has_item_index()
    manager.remove_chunks_for_item("a")
    assert not manager.has_chunk_index()


def test_an_item_without_chunks_is_in_the_item_index_only(mem: SearchIndexManager) -> None:
    item = KnowledgeItem(id="bare", title="Bare item", content="no chunks yet")
    mem.add_chunks(item, [])
    assert not mem.has_chunk_index()
    assert [hit.item_id for hit in mem.search_items(terms("chunks"), 5)] == ["bare"]


# --------------------------------------------------------------------------- filters

FILTER_ITEMS: list[KnowledgeItem] = [
    KnowledgeItem(
        id=f"f{n}",
        title=f"Doc {n}",
        content=f"common text {n}",
        kb=("docs", "notes", "code")[n % 3],
        source_type=("file", "web", "text")[n % 3],
        doc_type=("markdown", "html", "")[n % 3],
        language=("en", "zh")[n % 2],
        source_uri=(
            f"/repo/docs/guide{n}.md",
            f"https://example.com/page/{n}",
            None,
            f"/repo/src/module{n}.py",
        )[n % 4],
        updated_at=BASE_TIME + timedelta(days=n),
    )
    for n in range(12)
]

FILTER_CASES = [
    SearchFilters.build(kb="docs"),
    SearchFilters.build(kb=["docs", "code"]),
    SearchFilters.build(source_type="web"),
    SearchFilters.build(doc_type=""),
    SearchFilters.build(doc_type="markdown"),
    SearchFilters.build(language="zh"),
    SearchFilters.build(path_prefix="/repo/"),
    SearchFilters.build(path_prefix="https://example.com/"),
    SearchFilters.build(path_glob="*.md"),
    SearchFilters.build(path_glob="/repo/*"),
    SearchFilters.build(path_glob="*"),
    SearchFilters.build(path_glob="/repo/src/module?.py"),
    SearchFilters.build(path_glob="/repo/[ds]*"),
    SearchFilters.build(path_prefix="/repo/", path_glob="*.py"),
    SearchFilters.build(path_prefix="/repo/docs", path_glob="/repo/src/*"),
    SearchFilters.build(path_prefix=["/repo/docs", "https://example.com/"]),
    SearchFilters.build(path_glob=["*.md", "/repo/src/*"]),
    SearchFilters.build(path_prefix=["/repo/docs", "/repo/src"], path_glob=["*.py", "*.md"]),
    SearchFilters.build(path_prefix=["/repo/", "/repo/docs"], path_glob=["/repo/docs/*"]),
    SearchFilters.build(updated_after=BASE_TIME + timedelta(days=4)),
    SearchFilters.build(updated_before=BASE_TIME + timedelta(days=4)),
    SearchFilters.build(
        updated_after=BASE_TIME + timedelta(days=2), updated_before=BASE_TIME + timedelta(days=7)
    ),
    SearchFilters.build(kb="docs", language="en", path_glob="*.md"),
    SearchFilters.build(kb="notes", updated_after="2024-05-05T12:00:00+00:00", language="zh"),
    SearchFilters.build(kb="nowhere"),
    SearchFilters.build(kb="docs", source_type="web"),
    SearchFilters(),
]


@pytest.fixture(scope="module")
def filter_index() -> Iterator[SearchIndexManager]:
    with SearchIndexManager() as mgr:
        mgr.update(
            upserts=[(item, make_pair(item.id, [("", item.content)])[1]) for item in FILTER_ITEMS]
        )
        yield mgr


@pytest.mark.parametrize("filters", FILTER_CASES, ids=repr)
def test_filters_agree_with_the_reference(
    filter_index: SearchIndexManager, filters: SearchFilters
) -> None:
    expected = {item.id for item in FILTER_ITEMS if filters.matches(item)}
    chunk_hits = filter_index.search_chunks(["common"], 100, filters)
    item_hits = filter_index.search_items(["common"], 100, filters)
    assert {hit.item_id for hit in chunk_hits} == expected
    assert {hit.item_id for hit in item_hits} == expected


def test_date_bounds_are_inclusive(mem: SearchIndexManager) -> None:
    stamps = {
        "t1": BASE_TIME,
        "t2": BASE_TIME + timedelta(hours=1, microseconds=123_456),
        "t3": BASE_TIME + timedelta(hours=2),
    }
    mem.update(
        upserts=[
            make_pair(name, [("", "dated text")], updated_at=when) for name, when in stamps.items()
        ]
    )
    t2 = stamps["t2"]

    def found(**bounds: Any) -> set[str]:
        hits = mem.search_chunks(["date"], 10, SearchFilters.build(**bounds))
        return {hit.item_id for hit in hits}

    assert found(updated_after=t2) == {"t2", "t3"}
    assert found(updated_before=t2) == {"t1", "t2"}
    assert found(updated_after=t2, updated_before=t2) == {"t2"}
    assert found(updated_after=t2 + timedelta(microseconds=1)) == {"t3"}
    assert found(updated_before=t2 - timedelta(microseconds=1)) == {"t1"}
    naive_t2 = t2.replace(tzinfo=None)  # naive means UTC
    assert found(updated_after=naive_t2, updated_before=naive_t2) == {"t2"}


def test_a_narrow_scope_still_returns_its_best_hits(mem: SearchIndexManager) -> None:
    strong = [
        make_pair(f"big{n:02d}", [("Search ranking", "search ranking search ranking")], kb="big")
        for n in range(50)
    ]
    weak = make_pair(
        "small",
        [("Misc", "a long note that mentions search once among many other unrelated words")],
        kb="small",
    )
    mem.update(upserts=[*strong, weak])
    query = terms("search ranking")
    assert "small" not in {hit.item_id for hit in mem.search_chunks(query, 5)}
    scoped = mem.search_chunks(query, 5, SearchFilters.build(kb="small"))
    assert [hit.item_id for hit in scoped] == ["small"]
    assert [hit.item_id for hit in mem.search_items(query, 5, SearchFilters.build(kb="small"))] == [
        "small"
    ]


def test_filter_cache_follows_index_changes(mem: SearchIndexManager) -> None:
    only_b = SearchFilters.build(kb="b")
    mem.update(upserts=[make_pair("x", [("", "word")], kb="a")])
    assert mem.search_chunks(["word"], 5, only_b) == []
    mem.update(upserts=[make_pair("y", [("", "word")], kb="b")])
    assert chunk_ids(mem.search_chunks(["word"], 5, only_b)) == ["y-c0"]
    mem.update(upserts=[make_pair("y", [("", "word")], kb="a")])
    assert mem.search_chunks(["word"], 5, only_b) == []


PATHS = [
    "",
    "/repo/README.md",
    "/repo/docs/guide.md",
    "/repo/docs/api/index.MD",
    "/repo/src/pkg/module_1.py",
    "/repo/src/pkg/[weird].py",
    "/repo/src/pkg/star*name.txt",
    "/repo/with space/file?.rst",
    "C:\\Users\\me\\notes.txt",
    "https://example.com/docs/page?id=3",
    "https://example.com/blog/2024/post.html",
    "docs/中文/说明.md",
    "relative/a.b.c",
    "/repo/.hidden/x.md",
    "/repo/src/pkg/module_10.py",
]

GLOB_PIECES = ["*", "?", "[a-z]", "[!a-z]", "**", "*.md", "[", "]", "/", "", ".", "*/*"]
PATH_ALPHABET = "".join(sorted(set("".join(PATHS)))) + "*?[]!"


def _mutated_glob(data: tuple[str, int, int, str]) -> str:
    path, start, end, piece = data
    start, end = sorted((start % (len(path) + 1), end % (len(path) + 1)))
    return path[:start] + piece + path[end:]


GLOBS = st.one_of(
    st.text(PATH_ALPHABET, max_size=8),
    st.tuples(
        st.sampled_from(PATHS), st.integers(0, 60), st.integers(0, 60), st.sampled_from(GLOB_PIECES)
    ).map(_mutated_glob),
)
PREFIXES = st.one_of(
    st.none(),
    st.text(PATH_ALPHABET, max_size=4),
    st.tuples(st.sampled_from(PATHS), st.integers(0, 40)).map(lambda t: t[0][: t[1]]),
)


@pytest.fixture(scope="module")
def path_index() -> Iterator[SearchIndexManager]:
    with SearchIndexManager() as mgr:
        pairs = []
        for n, path in enumerate(PATHS):
            pairs.append(make_pair(f"p{n:02d}", [("", "path text")], source_uri=path or None))
        # A second segment, so the lexicon walk covers several readers.
        mgr.update(upserts=pairs[:7])
        mgr.update(upserts=pairs[7:])
        yield mgr


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(glob=st.one_of(st.none(), GLOBS), prefix=PREFIXES)
def test_path_filters_agree_with_matches(
    path_index: SearchIndexManager, glob: str | None, prefix: str | None
) -> None:
    filters = SearchFilters.build(path_glob=glob, path_prefix=prefix)
    expected = {
        f"p{n:02d}"
        for n, path in enumerate(PATHS)
        if filters.matches(KnowledgeItem(source_uri=path or None))
    }
    hits = path_index.search_chunks(["path"], 100, filters)
    assert {hit.item_id for hit in hits} == expected


# --------------------------------------------------------------------------- odd input

ODD_TERMS = [
    "",
    " ",
    "AND",
    "OR",
    "NOT",
    "(",
    ")",
    '"',
    "*",
    "?",
    "field:x",
    "title:",
    "content:*",
    "\\",
    "😀",
    "\x00",
    "\ud800",
    "x" * 10_000,
    "重" * 500,
]


@pytest.mark.parametrize("term", ODD_TERMS, ids=lambda t: repr(t[:20]))
def test_odd_terms_never_raise(manager: SearchIndexManager, term: str) -> None:
    manager.add_chunks(*make_pair("a", [("", "plain words")]))
    assert manager.search_chunks([term], 5) == []
    assert manager.search_items([term, "plain"], 5)[0].item_id == "a"


def test_odd_query_text_through_the_analyzer(mem: SearchIndexManager) -> None:
    mem.add_chunks(*make_pair("a", [("Fields", "field values and wildcard stars")]))
    query = terms('AND ( " field: * OR) NOT title:"wildcard" ^2 ~ [a TO z]')
    assert chunk_ids(mem.search_chunks(query, 5)) == ["a-c0"]


def test_trivial_requests_return_nothing(mem: SearchIndexManager) -> None:
    mem.add_chunks(*make_pair("a", [("", "words")]))
    assert mem.search_chunks([], 5) == []
    assert mem.search_chunks(["", ""], 5) == []
    assert mem.search_chunks(["word"], 0) == []
    assert mem.search_items([], 5) == []


def test_programming_errors_are_reported(mem: SearchIndexManager) -> None:
    with pytest.raises(QueryError):
        mem.search_chunks(["word"], "5")  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        SearchIndexManager(field_boosts={"body": 1.0})
    with pytest.raises(ConfigError):
        mem.set_applied_seq(-1)


# --------------------------------------------------------------------------- persistence


def test_reopening_keeps_data_and_applied_seq(tmp_path: Path) -> None:
    index_dir = tmp_path / "ix"
    with SearchIndexManager(index_dir) as mgr:
        assert mgr.applied_seq == 0
        mgr.add_chunks(*make_pair("a", [("", "persistent words")]))
        mgr.set_applied_seq(42)
    assert (index_dir / "chunks").is_dir()
    assert (index_dir / "items").is_dir()
    assert read_sealed_json(index_dir / "state.json") == {"applied_seq": 42}
    with SearchIndexManager(index_dir) as mgr:
        assert mgr.applied_seq == 42
        assert mgr.has_chunk_index()
        assert chunk_ids(mgr.search_chunks(terms("persistent"), 5)) == ["a-c0"]


@pytest.mark.parametrize(
    "content",
    [
        b"{not json",
        # Plain JSON, but not the previous release's state file ({"applied_seq": N} alone).
        b'{"applied_seq": 7, "generation": 3}',
        seal_json({"applied_seq": "7"}),
        seal_json([1, 2]),
        b'{"crc32":"00000000","body":{"applied_seq":7}}\n',
        b"[" * 100_000 + b"]" * 100_000,
    ],
    ids=["not-json", "unsealed", "wrong-type", "wrong-shape", "bad-checksum", "deep"],
)
def test_a_state_file_that_fails_to_load_makes_the_index_unreadable(
    tmp_path: Path, content: bytes
) -> None:
    index_dir = tmp_path / "ix"
    index_dir.mkdir()
    (index_dir / "state.json").write_bytes(content)
    with pytest.raises(DamagedIndexError, match=r"state\.json"):
        SearchIndexManager(index_dir)
    assert [d.path for d in verify_keyword_folder(index_dir)] == [str(index_dir / "state.json")]


def test_a_deeply_nested_sealed_state_file_is_damage_not_a_recursion_error(
    tmp_path: Path,
) -> None:
    body = b"[" * 50_000 + b"]" * 50_000
    sealed = b'{"crc32":"%08x","body":' % zlib.crc32(body) + body + b"}\n"
    (tmp_path / "state.json").write_bytes(sealed)
    with pytest.raises(DamagedIndexError, match="larger than"):
        SearchIndexManager(tmp_path)
    small = b"[" * 20_000 + b"]" * 20_000  # under the size bound: the parser's depth
    (tmp_path / "state.json").write_bytes(
        b'{"crc32":"%08x","body":' % zlib.crc32(small) + small + b"}\n"
    )
    with pytest.raises(DamagedIndexError, match="nested too deeply"):
        SearchIndexManager(tmp_path)


def test_in_memory_applied_seq_is_an_attribute() -> None:
    with SearchIndexManager() as mgr:
        assert mgr.applied_seq == 0
        mgr.set_applied_seq(5)
        assert mgr.applied_seq == 5


def test_a_corrupt_index_raises_on_open_naming_its_dir(tmp_path: Path) -> None:
    index_dir = tmp_path / "ix"
    with SearchIndexManager(index_dir) as mgr:
        mgr.add_chunks(*make_pair("a", [("", "words")]))
    for toc in (index_dir / "chunks").glob("*.toc"):
        toc.write_bytes(b"garbage")
    with pytest.raises(SearchIndexError) as info:
        SearchIndexManager(index_dir)
    assert str(index_dir / "chunks") in str(info.value)
    # What the caller does: delete the directory and rebuild from SQLite.
    shutil.rmtree(index_dir / "chunks")
    with SearchIndexManager(index_dir) as mgr:
        assert not mgr.has_chunk_index()
        assert mgr.has_item_index()
        assert mgr.rebuild([make_pair("a", [("", "words")])]) == 1
        assert chunk_ids(mgr.search_chunks(["word"], 5)) == ["a-c0"]


def test_truncated_segments_raise_on_open(tmp_path: Path) -> None:
    index_dir = tmp_path / "ix"
    with SearchIndexManager(index_dir) as mgr:
        mgr.add_chunks(*make_pair("a", [("", "words")]))
    for segment in (index_dir / "items").glob("*.seg"):
        segment.write_bytes(segment.read_bytes()[:20])
    with pytest.raises(SearchIndexError, match="items"):
        SearchIndexManager(index_dir)


def test_an_index_that_breaks_while_open_is_reported_then_rebuilt(tmp_path: Path) -> None:
    index_dir = tmp_path / "ix"
    with SearchIndexManager(index_dir) as mgr:
        mgr.add_chunks(*make_pair("a", [("", "words")]))
        shutil.rmtree(index_dir / "chunks")
        index_dir.joinpath("chunks").mkdir()
        assert not mgr.has_chunk_index()
        with pytest.raises(SearchIndexError, match="chunks"):
            mgr.search_chunks(["word"], 5)
        assert mgr.rebuild([make_pair("b", [("", "words")])]) == 1
        assert chunk_ids(mgr.search_chunks(["word"], 5)) == ["b-c0"]


def test_an_index_from_another_analyzer_raises_on_open(tmp_path: Path) -> None:
    index_dir = tmp_path / "ix"
    unstemmed = TextAnalyzer(AnalyzerConfig(stem=False))
    with SearchIndexManager(index_dir, unstemmed) as mgr:
        mgr.add_chunks(*make_pair("a", [("", "running words")]))
    with pytest.raises(SearchIndexError, match="analyzer"):
        SearchIndexManager(index_dir, ANALYZER)
    with SearchIndexManager(index_dir, unstemmed) as mgr:  # the same configuration still opens
        assert mgr.chunk_count() == 1


# --------------------------------------------------------------------------- concurrency


def test_a_held_write_lock_times_out_with_the_index_dir(tmp_path: Path) -> None:
    index_dir = tmp_path / "ix"
    with SearchIndexManager(index_dir, lock_timeout=0.3) as mgr:
        mgr.add_chunks(*make_pair("z", [("", "created")]))  # opening alone creates nothing
        holder = whoosh_index.open_dir(str(index_dir / "chunks")).writer()
        try:
            with pytest.raises(SearchIndexError, match=r"timed out after 0\.3 s") as info:
                mgr.add_chunks(*make_pair("a", [("", "words")]))
            assert str(index_dir / "chunks") in str(info.value)
        finally:
            holder.cancel()
        mgr.add_chunks(*make_pair("a", [("", "words")]))  # nothing was left locked
        assert mgr.chunk_count() == 2


def test_a_writer_waits_for_the_lock_then_succeeds(tmp_path: Path) -> None:
    index_dir = tmp_path / "ix"
    with (
        SearchIndexManager(index_dir, lock_timeout=60) as first,
        SearchIndexManager(index_dir, lock_timeout=60) as second,
    ):
        first.add_chunks(*make_pair("a", [("", "first words")]))
        holder = whoosh_index.open_dir(str(index_dir / "chunks")).writer()
        events: list[str] = []

        def release() -> None:
            events.append("released")
            holder.cancel()

        releaser = threading.Timer(0.3, release)
        releaser.start()
        try:
            second.add_chunks(*make_pair("b", [("", "second words")]))
            events.append("written")
        finally:
            releaser.join()
        assert events == ["released", "written"]  # it waited for the lock, then wrote
        # The other manager's searcher notices the commit.
        assert chunk_ids(first.search_chunks(terms("second"), 5)) == ["b-c0"]


def test_shared_between_threads(mem: SearchIndexManager) -> None:
    mem.update(upserts=[make_pair(f"s{n}", [("", "shared thread words")]) for n in range(20)])
    errors: list[BaseException] = []

    def search() -> None:
        try:
            for _ in range(30):
                assert mem.search_chunks(terms("shared thread"), 5)
        except BaseException as exc:
            errors.append(exc)

    def write() -> None:
        try:
            for n in range(10):
                mem.add_chunks(*make_pair(f"w{n}", [("", "shared writer words")]))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=search) for _ in range(3)] + [threading.Thread(target=write)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert mem.chunk_count() == 30


# --------------------------------------------------------------------------- results


def test_results_are_deterministic_and_ties_go_by_index_order(mem: SearchIndexManager) -> None:
    # Added in reverse id order: ties follow the order of indexing, not the ids.
    mem.update(
        upserts=[make_pair(f"tie{n:02d}", [("", "identical words")]) for n in reversed(range(12))]
    )
    first = mem.search_chunks(terms("identical"), 3)
    assert chunk_ids(first) == ["tie11-c0", "tie10-c0", "tie09-c0"]
    for _ in range(3):
        assert mem.search_chunks(terms("identical"), 3) == first
    assert [hit.item_id for hit in mem.search_items(terms("identical"), 2)] == ["tie11", "tie10"]


def test_hits_are_plain_values(manager: SearchIndexManager) -> None:
    manager.add_chunks(*make_pair("a", [("", "plain"), ("", "plain values")]))
    hits = manager.search_chunks(["plain"], 5)
    assert len(hits) == 2
    for hit in hits:
        assert type(hit) is ChunkHit
        assert type(hit.chunk_id) is str
        assert type(hit.item_id) is str
        assert type(hit.chunk_index) is int
        assert type(hit.score) is float
        json.dumps(dataclasses.asdict(hit))
    item_hit = manager.search_items(["plain"], 5)[0]
    assert type(item_hit.item_id) is str and type(item_hit.score) is float


def test_close_is_idempotent_and_final(tmp_path: Path) -> None:
    mgr = SearchIndexManager(tmp_path / "ix")
    mgr.add_chunks(*make_pair("a", [("", "words")]))
    mgr.close()
    mgr.close()
    assert not mgr.has_chunk_index()
    with pytest.raises(SearchIndexError):
        mgr.search_chunks(["word"], 5)
    with pytest.raises(SearchIndexError):
        mgr.add_chunks(*make_pair("b", [("", "words")]))
    with pytest.raises(SearchIndexError):
        mgr.rebuild([])


def test_idf_is_lucenes(mem: SearchIndexManager) -> None:
    mem.update(
        upserts=[
            make_pair("a", [("", "common rare")]),
            make_pair("b", [("", "common")]),
            make_pair("c", [("", "common")]),
        ]
    )
    searcher = mem._searcher(mem._chunks)
    weighting = LuceneBM25F()
    for term, df in (("common", 3), ("rare", 1)):
        expected = math.log(1 + (3 - df + 0.5) / (df + 0.5))
        assert weighting.idf(searcher, "content", term) == pytest.approx(expected)
    assert weighting.idf(searcher, "content", "common") < 0.2, "a word in every chunk weighs ~0"


# --------------------------------------------------------------------------- segment merging


def segment_sizes(manager: SearchIndexManager) -> list[int]:
    ix = manager._chunks.ix
    assert ix is not None
    return sorted(segment.doc_count() for segment in ix._segments())


def test_small_updates_never_rewrite_large_segments(mem: SearchIndexManager) -> None:
    def batch(start: int, count: int) -> list[Pair]:
        return [
            make_pair(f"i{n}", [("H", f"text number {n}")]) for n in range(start, start + count)
        ]

    for round_ in range(7):  # seven bulk commits of 200 documents: one short of a merge
        mem.update(upserts=batch(round_ * 200, 200))
    assert segment_sizes(mem) == [200] * 7
    for n in range(30):  # one-document edits merge among themselves only
        mem.update(upserts=batch(n, 1))
    sizes = segment_sizes(mem)
    assert sizes[-7:] == [170] + [200] * 6  # the edited docs left the first; none merged
    assert len(sizes) < 7 + 30  # the small ones were merged
    assert mem.chunk_count() == 1400
    mem.update(upserts=batch(2000, 200))  # the eighth segment of the 200-doc tier
    mem.update(upserts=batch(3000, 200))  # and the bulk commit after it merges the tier
    assert max(segment_sizes(mem)) == 1770  # the tier and the new documents, in one segment
    assert mem.chunk_count() == 1800


@pytest.mark.skipif(not internals.bulk_writing(), reason="Whoosh's own writers write apart")
def test_a_small_update_writes_both_segments_in_one_pass(
    manager: SearchIndexManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The chunk and item segments of a small update are written together before the
    commits (one set of numpy calls); each is written on its own once a merge is due."""
    from knowledge_agent.backends.local.keyword import bulk

    calls: list[str] = []
    for name in ("write_segment", "write_segments"):
        original = getattr(bulk, name)

        def counted(*args: Any, _original: Any = original, _name: str = name, **kw: Any) -> Any:
            calls.append(_name)
            return _original(*args, **kw)

        monkeypatch.setattr(bulk, name, counted)
    manager.update(upserts=[make_pair("a", [("H", "alpha beta")]), make_pair("b", [("", "gamma")])])
    assert calls == ["write_segments"]
    assert manager.chunk_count() == 2 and manager.item_count() == 2
    for n in range(7):  # up to the eighth segment of the tier
        manager.update(upserts=[make_pair(f"x{n}", [("H", "delta")])])
    calls.clear()
    manager.update(upserts=[make_pair("y", [("H", "epsilon")])])  # merges the tier
    assert calls == ["write_segment", "write_segment"]
    assert manager.chunk_count() == 10 and manager.item_count() == 10
    assert set(chunk_ids(manager.search_chunks(terms("alpha epsilon"), 5))) == {"a-c0", "y-c0"}


def test_a_segment_of_deleted_documents_only_is_dropped(mem: SearchIndexManager) -> None:
    mem.update(upserts=[make_pair(f"i{n}", [("H", f"text {n}")]) for n in range(50)])
    mem.update(upserts=[make_pair("gone", [("H", "soon deleted")])])
    assert segment_sizes(mem) == [1, 50]
    mem.update(deletes=["gone"])
    assert segment_sizes(mem) == [50]
    assert mem.chunk_count() == 50


def test_opening_writes_nothing_and_readers_see_what_a_writer_creates(tmp_path: Path) -> None:
    index_dir = tmp_path / "ix"
    with SearchIndexManager(index_dir) as reader:
        assert not index_dir.exists()  # absent: an empty stand-in, nothing on disk
        assert reader.chunk_count() == 0 and not reader.has_chunk_index()
        assert reader.search_chunks(terms("created"), 5) == []
        with SearchIndexManager(index_dir) as writer:
            writer.add_chunks(*make_pair("a", [("", "created words")]))
            writer.set_applied_seq(4)
        assert chunk_ids(reader.search_chunks(terms("created"), 5)) == ["a-c0"]
        assert reader.applied_seq == 0
        assert reader.refresh() and reader.applied_seq == 4
        assert not reader.refresh()
    assert sorted(p.name for p in index_dir.iterdir()) == ["chunks", "items", "state.json"]


def test_public_whoosh_paths_give_the_same_hits(tmp_path: Path) -> None:
    """On an untested Whoosh version the index is written and read without the private fast
    paths (no in-place reading, no compact posting pool, matchers posting by posting)."""
    rng = random.Random(5)
    words = [f"w{n}" for n in range(30)]
    pairs = [
        make_pair(f"i{n}", [("", " ".join(rng.choices(words, k=40))) for _ in range(4)])
        for n in range(60)
    ]
    queries = [rng.sample(words, 3) for _ in range(20)]
    found = []
    for fast in (True, False):
        saved = internals.FAST_PATHS
        internals.FAST_PATHS = fast
        try:
            with SearchIndexManager(tmp_path / str(fast)) as mgr:
                mgr.update(pairs[:30])
                mgr.update(pairs[30:], deletes=["i3"])
                found.append([mgr.search_chunks(q, 10) for q in queries])
        finally:
            internals.FAST_PATHS = saved
    assert found[0] == found[1] and found[0][0]


# --------------------------------------------------------------------------- analysed once


def _chunked(item_id: str, content: str, title: str = "") -> Pair:
    item = KnowledgeItem(id=item_id, title=title, content=content)
    chunks = ContentChunker(ChunkConfig(min_chunk_size=20, max_chunk_size=120)).chunk(
        content, title=title
    )
    for index, chunk in enumerate(chunks):
        chunk.item_id, chunk.chunk_index = item_id, index
    return item, chunks


def test_item_level_terms_are_the_chunks_terms_with_overlaps_counted_once() -> None:
    """Windows overlap; the item-level text drops each overlap, so on a document the chunks
    cover, its terms are exactly the terms of the title and the content."""
    rng = random.Random(8)
    words = ["alpha", "beta", "gamma", "delta", "getUserName", "重置密码", "naïve", "x.y"]
    sections = []
    for n in range(4):
        sentences = [" ".join(rng.choices(words, k=rng.randint(3, 12))) + "." for _ in range(12)]
        sections.append(f"## Part {n}\n\n" + " ".join(sentences))
    item, chunks = _chunked("long", "\n\n".join(sections), title="Guide")
    assert any(b.start_position < a.end_position for a, b in itertools.pairwise(chunks))
    batch = AnalysedBatch.build(ANALYZER, [(item, chunks)])
    ids, _ = batch.item_rows(np.arange(1))
    assert [batch.vocab[i] for i in ids] == terms(f"{item.title}\n{item.content}")
    body_terms = [batch.vocab[i] for i in batch.pool[batch.body[0, 0] : batch.body[0, 1]]]
    assert body_terms == terms(chunks[0].content)


def test_each_text_is_analysed_once_per_update(tmp_path: Path) -> None:
    calls: list[str] = []

    class Counting(TextAnalyzer):
        def __call__(self, text: str) -> list[str]:  # type: ignore[override]
            calls.append(text)
            return self.terms(text)

    analyzer = Counting()
    pairs = [
        make_pair(f"i{n}", [("Setup", "install the tool"), ("Setup", "then run it")], title="T")
        for n in range(3)
    ]
    with SearchIndexManager(tmp_path / "ix", analyzer) as mgr:
        mgr.update(AnalysedBatch.build(analyzer, pairs))
        # Six bodies, one heading, one title: no item text, no repeated heading or title.
        assert sorted(calls) == sorted(
            ["T", "Setup", *(t for _, c in pairs for t in (c[0].content, c[1].content))]
        )
        assert chunk_ids(mgr.search_chunks(terms("setup run"), 1)) == ["i0-c1"]
        assert [hit.item_id for hit in mgr.search_items(terms("install"), 5)] == ["i0", "i1", "i2"]


def test_rebuild_takes_analysed_batches_as_well_as_pairs(tmp_path: Path) -> None:
    rng = random.Random(9)
    words = [f"w{n}" for n in range(25)]
    pairs = [
        make_pair(f"i{n}", [("H", " ".join(rng.choices(words, k=30))) for _ in range(3)])
        for n in range(40)
    ]
    queries = [rng.sample(words, 2) for _ in range(10)]
    found = []
    for feed in (pairs, [AnalysedBatch.build(ANALYZER, pairs[:25]), *pairs[25:]]):
        with SearchIndexManager(tmp_path / str(len(found)), ANALYZER) as mgr:
            mgr.rebuild_commit_every = 30
            assert mgr.rebuild(feed) == 120
            found.append([(mgr.search_chunks(q, 10), mgr.search_items(q, 10)) for q in queries])
    assert found[0] == found[1]


def test_items_without_chunks_are_indexed_from_their_content_or_title(
    mem: SearchIndexManager,
) -> None:
    mem.update(
        [
            (KnowledgeItem(id="bare", title="Lonely title", content="only content"), []),
            (KnowledgeItem(id="empty", title="Empty note", content=""), []),
        ]
    )
    assert [hit.item_id for hit in mem.search_items(terms("content"), 5)] == ["bare"]
    assert [hit.item_id for hit in mem.search_items(terms("empty note"), 5)] == ["empty"]
    assert not mem.has_chunk_index()


def test_what_a_searcher_remembers_is_forgotten_after_a_write(tmp_path: Path) -> None:
    """Terms' scores, idf and stored keys are kept per searcher: after updates and a delete
    every search answers as a manager that never searched before."""
    rng = random.Random(5)
    words = ["alpha", "beta", "gamma", "delta", "omega"]

    def pair(n: int) -> Pair:
        sections = [("", " ".join(rng.choices(words, k=rng.randint(1, 12)))) for _ in range(3)]
        return make_pair(f"i{n}", sections)

    queries = [terms(" ".join(rng.sample(words, k))) for k in (1, 2, 3, 5)]
    with SearchIndexManager(tmp_path / "index", ANALYZER) as warm:
        warm.update(upserts=[pair(n) for n in range(30)])
        for step in range(3):
            for query in queries:
                warm.search_chunks(query, 20)
                warm.search_items(query, 20)
                warm.idf(query)
                warm.unseen([*query, "zeta"])
            if step == 0:  # new documents, one with a word the base had not seen
                warm.update(
                    upserts=[*(pair(n) for n in range(30, 45)), make_pair("z", [("", "zeta")])]
                )
            else:  # replaced one by one: deletions, and merges that renumber documents
                for n in range(9):
                    warm.update(upserts=[pair(n)])
            with SearchIndexManager(tmp_path / "index", ANALYZER) as fresh:
                for query in queries:
                    assert warm.search_chunks(query, 20) == fresh.search_chunks(query, 20)
                    assert warm.search_items(query, 20) == fresh.search_items(query, 20)
                    assert warm.idf(query) == fresh.idf(query)
                    assert warm.unseen([*query, "zeta"]) == fresh.unseen([*query, "zeta"])
