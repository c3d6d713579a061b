"""Tests for SemanticSearcher: incremental TF-IDF cosine search over chunks and items."""

from __future__ import annotations

import os
import pickle
import random
import re
import tempfile
import threading
from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.feature_extraction.text import TfidfVectorizer

from knowledge_agent.analysis import TextAnalyzer
from knowledge_agent.backends.local.atomic_files import write_sealed
from knowledge_agent.backends.local.checksums import read_sealed_json
from knowledge_agent.backends.local.tfidf import collection as tfidf_collection
from knowledge_agent.backends.local.tfidf.index import SemanticSearcher
from knowledge_agent.errors import ConfigError, SearchIndexError
from knowledge_agent.models import KnowledgeChunk, KnowledgeItem
from knowledge_agent.search.filters import SearchFilters

BASE_TIME = datetime(2024, 1, 1, tzinfo=timezone.utc)
ANALYZER = TextAnalyzer()
FILLER = [
    *("river", "mountain", "forest", "cloud", "stone", "bridge", "market", "garden"),
    *("window", "harbor", "engine", "lantern", "violin", "castle", "meadow", "copper"),
    *("silver", "orchard", "canyon", "glacier", "desert", "island", "valley", "summit"),
]

Pair = tuple[KnowledgeItem, list[KnowledgeChunk]]


def make_item(item_id: str, texts: Sequence[str], *, title: str = "", **fields: object) -> Pair:
    """An item whose content is its chunk texts joined by blank lines, with exact positions."""
    content = "\n\n".join(texts)
    item = KnowledgeItem(id=item_id, title=title, content=content, **fields)  # type: ignore[arg-type]
    chunks, start = [], 0
    for index, text in enumerate(texts):
        chunks.append(
            KnowledgeChunk(
                id=f"{item_id}#{index}",
                item_id=item_id,
                chunk_index=index,
                content=text,
                start_position=start,
                end_position=start + len(text),
            )
        )
        start += len(text) + 2
    return item, chunks


def filler(rng: random.Random, words: int = 12) -> str:
    return " ".join(rng.choice(FILLER) for _ in range(words))


def terms(text: str) -> list[str]:
    return ANALYZER(text)


def scores(hits: Sequence[object]) -> dict[str, float]:
    return {
        getattr(hit, "chunk_id", None) or hit.item_id: hit.score  # type: ignore[attr-defined]
        for hit in hits
    }


def files(directory: Path) -> dict[str, tuple[int, int]]:
    return {
        path.name: (path.stat().st_mtime_ns, path.stat().st_size)
        for path in directory.iterdir()
        if path.suffix == ".npz"
    }


@pytest.fixture(scope="module")
def corpus() -> list[Pair]:
    """40 items of filler text; one chunk is about photosynthesis."""
    rng = random.Random(7)
    pairs = []
    for i in range(40):
        texts = [filler(rng) for _ in range(5)]
        if i == 23:
            texts[3] = "Photosynthesis: chlorophyll turns sunlight into chemical energy."
        pairs.append(make_item(f"item{i:02d}", texts, title=f"Notes {i}"))
    return pairs


@pytest.fixture
def fitted(corpus: list[Pair]) -> SemanticSearcher:
    searcher = SemanticSearcher()
    searcher.fit_chunks(corpus)
    return searcher


# --------------------------------------------------------------------------- ranking


def test_fit_finds_the_right_chunk_among_many(fitted: SemanticSearcher) -> None:
    assert fitted.chunk_count() == 200 and fitted.item_count() == 40 and fitted.has_chunks()
    hits = fitted.search_chunks(terms("how does chlorophyll use sunlight"), 5)
    assert hits[0].chunk_id == "item23#3"
    assert hits[0].item_id == "item23" and hits[0].chunk_index == 3
    assert len(hits) == 1  # no other chunk shares a term


def test_top_k_limits_and_orders_results(fitted: SemanticSearcher) -> None:
    hits = fitted.search_chunks(terms("river mountain glacier"), 7)
    assert len(hits) == 7
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_scores_equal_a_fitted_sklearn_tfidf(corpus: list[Pair]) -> None:
    """An independent oracle: TfidfVectorizer fitted on the same chunk texts."""
    searcher = SemanticSearcher(include_title=False)
    searcher.fit_chunks(corpus)
    chunks = [chunk for _, item_chunks in corpus for chunk in item_chunks]
    vectorizer = TfidfVectorizer(
        analyzer=lambda doc: doc if isinstance(doc, list) else ANALYZER(doc), sublinear_tf=True
    )
    matrix = vectorizer.fit_transform([chunk.content for chunk in chunks])
    for query in ("river mountain mountain", "glacier chlorophyll sunlight", "orchard x"):
        expected = (matrix @ vectorizer.transform([terms(query)]).T).toarray().ravel()
        got = scores(searcher.search_chunks(terms(query), 1000))
        want = {chunk.id: float(s) for chunk, s in zip(chunks, expected, strict=True) if s > 0}
        assert got.keys() == want.keys()
        for chunk_id, value in want.items():
            assert got[chunk_id] == pytest.approx(value, abs=1e-5)


def test_a_small_collection_scores_exactly_as_with_an_idf_per_column(
    corpus: list[Pair], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A small collection keeps idf for the columns it holds only: the same floats."""
    queries = ("river mountain mountain", "glacier chlorophyll sunlight", "orchard x")
    found = []
    for small in (8, 0):  # 0: always an n_features-long idf
        monkeypatch.setattr(tfidf_collection, "_SMALL", small)
        searcher = SemanticSearcher()
        searcher.fit_chunks(corpus)
        searcher.update(deletes=[corpus[3][0].id])  # dead rows: columns no live row holds
        found.append([scores(searcher.search_chunks(terms(q), 1000)) for q in queries])
        found.append([scores(searcher.search_items(terms(q), 1000)) for q in queries])
    assert found[:2] == found[2:] and found[0][0]


def test_scores_are_cosines_and_identical_text_scores_one(corpus: list[Pair]) -> None:
    searcher = SemanticSearcher(include_title=False)
    searcher.fit_chunks(corpus)
    target = corpus[5][1][2]
    hits = searcher.search_chunks(terms(target.content), 1000)
    assert hits[0].chunk_id == target.id
    assert hits[0].score == pytest.approx(1.0, abs=1e-5)
    assert all(0.0 <= hit.score <= 1.0 for hit in hits)


def test_title_and_heading_are_indexed_with_the_chunk() -> None:
    item, chunks = make_item("a", ["plain body words"], title="Kubernetes handbook")
    chunks[0].heading = "Ingress controllers"
    searcher = SemanticSearcher()
    searcher.update([(item, chunks)])
    assert searcher.search_chunks(terms("kubernetes ingress"), 3)[0].chunk_id == "a#0"
    bare = SemanticSearcher(include_title=False, include_heading=False)
    bare.update([(item, chunks)])
    assert bare.search_chunks(terms("kubernetes ingress"), 3) == []


def test_repeated_query_term_counts_twice(fitted: SemanticSearcher) -> None:
    once = scores(fitted.search_chunks(["river", "castl"], 1000))
    twice = scores(fitted.search_chunks(["river", "river", "castl"], 1000))
    assert once.keys() == twice.keys() and once != twice


# --------------------------------------------------------------------------- updates


def test_update_replaces_an_items_chunks(fitted: SemanticSearcher) -> None:
    item, _ = make_item("item23", ["unused"])
    new = [
        KnowledgeChunk(id="item23#v2-0", item_id="item23", chunk_index=0, content="volcano lava"),
        KnowledgeChunk(id="item23#v2-1", item_id="item23", chunk_index=1, content="magma ash"),
    ]
    fitted.update_chunks_for_item(item, new)
    assert fitted.chunk_count() == 197
    assert fitted.search_chunks(terms("chlorophyll sunlight"), 10) == []
    assert fitted.search_chunks(terms("volcano magma"), 10)[0].item_id == "item23"
    every = fitted.search_chunks(terms(" ".join(FILLER) + " volcano magma"), 10_000)
    ids = {hit.chunk_id for hit in every}
    assert not any(i.startswith("item23#") and "v2" not in i for i in ids)
    assert {"item23#v2-0", "item23#v2-1"} <= ids


def test_remove_drops_an_items_rows(fitted: SemanticSearcher) -> None:
    assert fitted.search_chunks(terms("chlorophyll"), 10)  # queried before: derived state exists
    fitted.remove_chunks_for_item("item23")
    assert fitted.chunk_count() == 195 and fitted.item_count() == 39
    assert fitted.search_chunks(terms("chlorophyll"), 10) == []
    assert fitted.search_items(terms("chlorophyll"), 10) == []
    every = fitted.search_chunks(terms(" ".join(FILLER)), 10_000)
    assert "item23" not in {hit.item_id for hit in every}
    fitted.remove_chunks_for_item("item23")  # again, and an unknown id: no-ops
    fitted.remove_chunks_for_item("no such item")
    assert fitted.chunk_count() == 195


def test_replaying_an_update_is_harmless(corpus: list[Pair]) -> None:
    once, twice = SemanticSearcher(), SemanticSearcher()
    for searcher in (once, twice):
        searcher.fit_chunks(corpus[:30])
    batch = corpus[25:35]
    once.update(batch, ["item01"])
    twice.update(batch, ["item01"])
    twice.update(batch, ["item01"])
    assert twice.chunk_count() == once.chunk_count() == 170
    query = terms("river castle meadow chlorophyll")
    assert scores(twice.search_chunks(query, 1000)) == pytest.approx(
        scores(once.search_chunks(query, 1000))
    )


def test_an_id_upserted_and_deleted_in_one_call_ends_deleted(corpus: list[Pair]) -> None:
    searcher = SemanticSearcher()
    searcher.update(corpus[:3], ["item01"])
    assert searcher.item_count() == 2 and searcher.chunk_count() == 10


class CountingAnalyzer(TextAnalyzer):
    """Counts the texts analysed: one call per vectorised row."""

    calls = 0

    def __call__(self, text: str) -> list[str]:  # type: ignore[override]
        self.calls += 1
        return self.terms(text)


def test_an_update_vectorises_only_its_own_rows(corpus: list[Pair]) -> None:
    analyzer = CountingAnalyzer()
    searcher = SemanticSearcher(analyzer=analyzer)
    searcher.fit_chunks(corpus)
    assert analyzer.calls == 200 + 40  # every chunk body and item title, once
    analyzer.calls = 0
    item, chunks = make_item("fresh", ["one new chunk", "two new chunks", "three"])
    searcher.update([(item, chunks)])
    assert analyzer.calls == 3  # its chunks (its item row reuses their terms): no refit
    searcher.search_chunks(terms("new chunk"), 5)
    searcher.remove_chunks_for_item("item05")
    searcher.search_items(terms("river"), 5)
    assert analyzer.calls == 3


# --------------------------------------------------------------------------- incremental == refit

VOCAB = ["apple", "banana", "cherry", "durian", "elderberry", "fig", "grape", "lemon"]
QUERIES = [["appl"], ["banana", "cherri"], ["fig", "fig", "grape", "lemon"], ["durian", "zzz"]]

ops_strategy = st.lists(
    st.one_of(
        st.tuples(
            st.just("upsert"),
            st.integers(0, 5),
            st.lists(st.lists(st.sampled_from(VOCAB), min_size=1, max_size=6), max_size=3),
        ),
        st.tuples(st.just("delete"), st.integers(0, 5), st.just([])),
    ),
    max_size=12,
)


def run_ops(searchers: Sequence[SemanticSearcher], ops: list) -> dict[str, Pair]:
    state: dict[str, Pair] = {}
    for version, (op, index, texts) in enumerate(ops):
        item_id = f"doc{index}"
        if op == "delete":
            state.pop(item_id, None)
            for searcher in searchers:
                searcher.update(deletes=[item_id])
                searcher.search_items(QUERIES[version % len(QUERIES)], 3)
            continue
        item, _ = make_item(item_id, [" ".join(words) for words in texts], title=VOCAB[index])
        chunks = [
            KnowledgeChunk(id=f"{item_id}v{version}c{j}", item_id=item_id, chunk_index=j, content=t)
            for j, t in enumerate(" ".join(words) for words in texts)
        ]
        state[item_id] = (item, chunks)
        for searcher in searchers:
            searcher.update([(item, chunks)])
            searcher.search_chunks(QUERIES[version % len(QUERIES)], 3)  # derived state goes stale
    return state


def assert_same_results(a: SemanticSearcher, b: SemanticSearcher) -> None:
    assert a.chunk_count() == b.chunk_count() and a.item_count() == b.item_count()
    for query in QUERIES:
        for search in ("search_chunks", "search_items"):
            got = scores(getattr(a, search)(query, 1000))
            want = scores(getattr(b, search)(query, 1000))
            assert got.keys() == want.keys()
            for key, value in want.items():
                assert got[key] == pytest.approx(value, abs=1e-5)


@settings(max_examples=50, deadline=None)
@given(ops=ops_strategy)
def test_incremental_updates_equal_a_fresh_fit(ops: list) -> None:
    with tempfile.TemporaryDirectory() as directory:
        in_memory = SemanticSearcher()
        in_memory.max_segments = 2  # merge and compact as often as possible
        on_disk = SemanticSearcher(directory)
        on_disk.max_segments = 3
        state = run_ops([in_memory, on_disk], ops)
        fresh = SemanticSearcher()
        assert fresh.fit_chunks(state.values()) == sum(len(c) for _, c in state.values())
        assert_same_results(in_memory, fresh)
        assert_same_results(on_disk, fresh)
        on_disk.close()
        with SemanticSearcher(directory) as reopened:
            assert_same_results(reopened, fresh)


def test_fit_chunks_streams_in_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """A rebuild vectorises bounded batches and still equals one big fit."""
    monkeypatch.setattr("knowledge_agent.backends.local.tfidf.index._FIT_BATCH", 7)
    rng = random.Random(3)
    pairs = [make_item(f"d{i}", [filler(rng, 6) for _ in range(3)]) for i in range(20)]
    sizes: list[int] = []
    searcher = SemanticSearcher()
    vectorize = searcher._vectorize
    monkeypatch.setattr(
        searcher,
        "_vectorize",
        lambda batch, ids, rows, n_rows: (
            sizes.append(n_rows) or vectorize(batch, ids, rows, n_rows)
        ),
    )
    assert searcher.fit_chunks(iter(pairs)) == 60
    assert max(sizes) <= 8 and sum(sizes) == 60 + 20
    reference = SemanticSearcher()
    reference.fit_chunks(pairs)
    assert_same_results(searcher, reference)


# --------------------------------------------------------------------------- filters


@pytest.fixture(scope="module")
def varied() -> tuple[SemanticSearcher, list[KnowledgeItem]]:
    """Items with every combination of metadata; all share the term "harbor"."""
    rng = random.Random(11)
    pairs = []
    for i in range(24):
        pairs.append(
            make_item(
                f"v{i:02d}",
                [f"harbor {filler(rng, 4)}", f"harbor lantern {filler(rng, 3)}"],
                kb=("alpha", "beta", "gamma")[i % 3],
                source_type=("file", "web")[i % 2],
                doc_type=("markdown", "pdf", "")[i % 3 if i % 4 else 2],
                language=("en", "zh")[(i // 3) % 2],
                source_uri=(
                    f"/docs/{('guides', 'api')[i % 2]}/page{i}.md"
                    if i % 5
                    else f"https://example.com/{i}"
                ),
                updated_at=BASE_TIME + timedelta(days=i),
            )
        )
    searcher = SemanticSearcher()
    searcher.fit_chunks(pairs)
    return searcher, [item for item, _ in pairs]


FILTER_CASES = [
    SearchFilters.build(kb="alpha"),
    SearchFilters.build(kb=["beta", "gamma"]),
    SearchFilters.build(kb="nowhere"),
    SearchFilters.build(source_type="web"),
    SearchFilters.build(doc_type="pdf"),
    SearchFilters.build(language="zh"),
    SearchFilters.build(path_prefix="/docs/api/"),
    SearchFilters.build(path_glob="*/guides/*.md"),
    SearchFilters.build(path_prefix=["/docs/api/", "https://"], path_glob=["*.md", "*.html"]),
    SearchFilters.build(path_glob="https://*"),
    SearchFilters.build(updated_after="2024-01-10"),
    SearchFilters.build(updated_before="2024-01-05T00:00:00+00:00"),
    SearchFilters.build(updated_after=BASE_TIME + timedelta(days=3), updated_before="2024-01-08"),
    SearchFilters.build(kb="alpha", language="en", path_prefix="/docs/"),
    SearchFilters.build(source_type="file", doc_type=["markdown", ""], updated_after="2024-01-04"),
]


@pytest.mark.parametrize("filters", FILTER_CASES)
def test_filters_agree_with_search_filters_matches(
    varied: tuple[SemanticSearcher, list[KnowledgeItem]], filters: SearchFilters
) -> None:
    searcher, items = varied
    expected = {item.id for item in items if filters.matches(item)}
    chunk_hits = searcher.search_chunks(["harbor"], 1000, filters=filters)
    item_hits = searcher.search_items(["harbor"], 1000, filters=filters)
    assert {hit.item_id for hit in chunk_hits} == expected
    assert len(chunk_hits) == 2 * len(expected)
    assert {hit.item_id for hit in item_hits} == expected


@settings(max_examples=60, deadline=None)
@given(
    kb=st.sampled_from([None, "alpha", ["beta", "gamma"]]),
    language=st.sampled_from([None, "en", "zh"]),
    prefix=st.sampled_from([None, "/docs/", "/docs/guides/", "https://"]),
    glob=st.sampled_from([None, "*.md", "*/api/page1*", "*example*"]),
    after=st.one_of(st.none(), st.integers(0, 25)),
    before=st.one_of(st.none(), st.integers(0, 25)),
)
def test_random_filters_agree_with_matches(
    varied: tuple[SemanticSearcher, list[KnowledgeItem]],
    kb: object,
    language: str | None,
    prefix: str | None,
    glob: str | None,
    after: int | None,
    before: int | None,
) -> None:
    searcher, items = varied
    filters = SearchFilters.build(
        kb=kb,  # type: ignore[arg-type]
        language=language,
        path_prefix=prefix,
        path_glob=glob,
        updated_after=None if after is None else BASE_TIME + timedelta(days=after),
        updated_before=None if before is None else BASE_TIME + timedelta(days=before),
    )
    expected = {item.id for item in items if filters.matches(item)}
    assert {h.item_id for h in searcher.search_chunks(["lantern"], 1000, filters=filters)} == (
        expected
    )


def test_a_narrow_scope_still_returns_its_best_rows() -> None:
    """Filter before the top-k: the global top-k holds none of the "small" rows."""
    searcher = SemanticSearcher()
    pairs = [
        make_item(f"big{i}", [f"database backup restore {i}"], kb="big") for i in range(50)
    ] + [
        make_item(
            "small0", ["a long note that mentions a backup once among many words"], kb="small"
        )
    ]
    searcher.fit_chunks(pairs)
    query = terms("database backup restore")
    assert "small0" not in {hit.item_id for hit in searcher.search_chunks(query, 5)}
    hits = searcher.search_chunks(query, 5, filters=SearchFilters.build(kb="small"))
    assert [hit.item_id for hit in hits] == ["small0"]
    items = searcher.search_items(query, 5, filters=SearchFilters.build(kb="small"))
    assert [hit.item_id for hit in items] == ["small0"]


def test_min_similarity_drops_weak_rows(fitted: SemanticSearcher) -> None:
    query = terms("river mountain forest")
    every = fitted.search_chunks(query, 1000)
    threshold = every[len(every) // 2].score
    strong = fitted.search_chunks(query, 1000, min_similarity=threshold)
    assert strong and len(strong) < len(every)
    assert all(hit.score >= threshold for hit in strong)
    assert strong == [hit for hit in every if hit.score >= threshold]
    assert fitted.search_chunks(query, 1000, min_similarity=1.01) == []


# --------------------------------------------------------------------------- items, CJK, odd input


def test_search_items_ranks_whole_documents() -> None:
    searcher = SemanticSearcher()
    searcher.fit_chunks(
        [
            make_item("spread", ["tides and the moon", "salt marsh ecology"], title="Coasts"),
            make_item("single", ["the moon landing"], title="Space"),
            make_item("other", ["bread recipes"], title="Baking"),
        ]
    )
    hits = searcher.search_items(terms("moon tides salt marsh"), 10)
    assert [hit.item_id for hit in hits] == ["spread", "single"]
    assert searcher.search_items(terms("baking"), 1)[0].item_id == "other"  # the title counts
    assert 0.0 < hits[1].score < hits[0].score <= 1.0


def test_chinese_bigrams_match_inside_longer_runs() -> None:
    searcher = SemanticSearcher()
    searcher.fit_chunks(
        [
            make_item("zh1", ["如何重置密码？请在登录页点击忘记密码。"]),
            make_item("zh2", ["如何修改用户名和头像"]),
            make_item("en", ["reset your password from the login page"]),
        ]
    )
    hits = searcher.search_chunks(terms("重置密码"), 5)
    assert hits[0].item_id == "zh1"
    assert "zh2" not in {hit.item_id for hit in hits}


@pytest.mark.parametrize(
    "query",
    [[], [""], ["", "   "], ["\x00"], ["z" * 10_000], ["unknownterm"], [None], ["😀", "∑"]],
)
def test_odd_term_lists_never_raise(fitted: SemanticSearcher, query: object) -> None:
    assert fitted.search_chunks(query, 5) == []  # type: ignore[arg-type]
    assert fitted.search_items(query, 5) == []  # type: ignore[arg-type]


def test_empty_index_and_zero_top_k(fitted: SemanticSearcher) -> None:
    empty = SemanticSearcher()
    assert empty.search_chunks(["river"], 5) == [] and not empty.has_chunks()
    assert empty.search_items(["river"], 5) == []
    assert fitted.search_chunks(["river"], 0) == []
    empty.update([make_item("blank", [""])])  # a chunk with no terms is indexed, never found
    assert empty.chunk_count() == 1 and empty.search_chunks(["river"], 5) == []


def test_ties_are_broken_by_row_order(tmp_path: Path) -> None:
    """Three score levels interleaved: equal scores must come back in insertion order."""
    variants = ["twin text", "twin twin text", "twin text with more words"]
    pairs = [make_item(f"t{i:02d}", [variants[i * 7 % 3]]) for i in range(30)]
    searcher = SemanticSearcher(tmp_path)
    searcher.fit_chunks(pairs)
    searcher.update([make_item("t99", [variants[0]])])
    hits = searcher.search_chunks(["twin"], 100)
    position = {f"t{i:02d}": i for i in range(30)} | {"t99": 99}
    expected = sorted(hits, key=lambda hit: (-hit.score, position[hit.item_id]))
    assert len({hit.score for hit in hits}) == 3
    assert hits == expected
    assert searcher.search_chunks(["twin"], 12) == hits[:12]  # a cut inside a tie group
    searcher.close()
    with SemanticSearcher(tmp_path) as reopened:
        assert reopened.search_chunks(["twin"], 100) == hits


# --------------------------------------------------------------------------- persistence


def test_reopen_gives_identical_results_and_applied_seq(tmp_path: Path, corpus: list[Pair]) -> None:
    searcher = SemanticSearcher(tmp_path)
    searcher.fit_chunks(corpus)
    searcher.update(corpus[:3], ["item30"])
    searcher.set_applied_seq(42)
    queries = [terms("chlorophyll sunlight"), terms("river castle"), ["orchard", "orchard"]]
    filters = SearchFilters.build(path_glob="*")
    before = [
        (searcher.search_chunks(q, 50), searcher.search_items(q, 50, filters=filters))
        for q in queries
    ]
    searcher.close()
    searcher.close()  # idempotent
    with SemanticSearcher(tmp_path) as reopened:
        assert reopened.applied_seq == 42
        assert reopened.chunk_count() == 195 and reopened.item_count() == 39
        after = [
            (reopened.search_chunks(q, 50), reopened.search_items(q, 50, filters=filters))
            for q in queries
        ]
        assert after == before


def test_a_new_directory_is_an_empty_index_written_by_the_first_update(tmp_path: Path) -> None:
    folder = tmp_path / "new" / "tfidf"
    with SemanticSearcher(folder) as searcher:
        assert searcher.chunk_count() == 0 and searcher.applied_seq == 0
        assert not folder.exists()  # opening writes nothing
        searcher.update([make_item("a", ["first words"])])
    assert sorted(os.listdir(folder)) == [
        "chunks-00000001.npz",
        "items-00000002.npz",
        "manifest.json",
    ]


def test_refresh_loads_what_another_writer_persisted(tmp_path: Path, corpus: list[Pair]) -> None:
    writer = SemanticSearcher(tmp_path)
    writer.update(corpus[:20])
    reader = SemanticSearcher(tmp_path)
    assert reader.chunk_count() == 100 and not reader.refresh()  # nothing new yet
    photosynthesis = terms("chlorophyll sunlight")
    assert reader.search_chunks(photosynthesis, 3) == []
    writer.update(corpus[20:], deletes=["item00"])
    writer.set_applied_seq(7)
    assert reader.search_chunks(photosynthesis, 3) == []  # a snapshot until refreshed
    assert reader.refresh()
    assert reader.applied_seq == 7
    assert reader.chunk_count() == writer.chunk_count() == 195
    for query in (photosynthesis, terms("notes filler words")):
        assert scores(reader.search_chunks(query, 20)) == scores(writer.search_chunks(query, 20))
    assert not reader.refresh()


def test_refresh_survives_a_writer_sweeping_segments(tmp_path: Path, corpus: list[Pair]) -> None:
    writer = SemanticSearcher(tmp_path)
    writer.max_segments = 2  # every update merges: old segment files are swept
    reader = SemanticSearcher(tmp_path)
    for pair in corpus[:12]:
        writer.update([pair])
        reader.refresh()
        assert reader.chunk_count() == writer.chunk_count()


def test_failed_writes_leave_no_temporary_files(tmp_path: Path, corpus: list[Pair]) -> None:
    searcher = SemanticSearcher(tmp_path)
    searcher.update(corpus[:3])
    (tmp_path / "manifest.json.0123456789abcdef0123456789abcdef.tmp").write_text("{")
    searcher.update(corpus[3:5])  # the next write sweeps what a crashed writer left
    assert not [name for name in os.listdir(tmp_path) if name.endswith(".tmp")]


def test_fit_resets_applied_seq(tmp_path: Path, corpus: list[Pair]) -> None:
    searcher = SemanticSearcher(tmp_path)
    searcher.set_applied_seq(9)
    searcher.fit_chunks(corpus[:2])
    assert searcher.applied_seq == 0
    with pytest.raises(ConfigError):
        searcher.set_applied_seq(-1)


def test_an_update_appends_a_segment_and_leaves_earlier_files_alone(
    tmp_path: Path, corpus: list[Pair]
) -> None:
    searcher = SemanticSearcher(tmp_path)
    searcher.fit_chunks(corpus)
    before = files(tmp_path)
    assert len(before) == 2  # one chunk segment, one item segment
    searcher.update([corpus[3]])  # replaces 5 of 200 rows: well under the compaction threshold
    after = files(tmp_path)
    assert {name: after[name] for name in before} == before  # not rewritten
    new = sorted(set(after) - set(before))
    assert len(new) == 2 and new[0].startswith("chunks-") and new[1].startswith("items-")
    searcher.update(deletes=["item07"])  # a pure delete writes no segment, only the manifest
    assert files(tmp_path) == after


def test_merging_and_compaction_keep_results_identical(tmp_path: Path, corpus: list[Pair]) -> None:
    compacting = SemanticSearcher(tmp_path)
    compacting.max_segments = 3
    never = SemanticSearcher()
    never.max_segments = 10**9
    never.compact_dead_fraction = 1.0
    rng = random.Random(5)
    for searcher in (compacting, never):
        searcher.fit_chunks(corpus[:20])
    for step in range(30):
        index = rng.randrange(25)
        texts = [filler(rng, 8) for _ in range(rng.randint(1, 4))]
        item, chunks = make_item(f"item{index:02d}", texts, title=f"Notes {index}")
        for chunk in chunks:
            chunk.id = f"{chunk.id}/{step}"
        deletes = [f"item{rng.randrange(25):02d}"] if step % 7 else []
        for searcher in (compacting, never):
            searcher.update([(item, chunks)], deletes)
    chunk_files = [name for name in files(tmp_path) if name.startswith("chunks-")]
    assert 1 <= len(chunk_files) <= 4
    for query in (terms("river castle meadow"), terms(" ".join(FILLER[:8])), ["summit"]):
        assert compacting.search_chunks(query, 40) == never.search_chunks(query, 40)
        assert compacting.search_items(query, 40) == never.search_items(query, 40)
    compacting.close()
    with SemanticSearcher(tmp_path) as reopened:
        query = terms("river castle meadow")
        assert reopened.search_chunks(query, 40) == never.search_chunks(query, 40)


@pytest.fixture
def saved(tmp_path: Path, corpus: list[Pair]) -> Path:
    with SemanticSearcher(tmp_path) as searcher:
        searcher.fit_chunks(corpus[:5])
        searcher.update([corpus[6]])
    return tmp_path


def test_a_corrupt_manifest_raises(saved: Path) -> None:
    (saved / "manifest.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(SearchIndexError, match=re.escape("manifest.json")):
        SemanticSearcher(saved)


def test_a_truncated_segment_raises(saved: Path) -> None:
    path = next(saved.glob("chunks-*.npz"))
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(SearchIndexError, match=re.escape(path.name)):
        SemanticSearcher(saved)


def test_a_missing_segment_or_manifest_raises(saved: Path) -> None:
    manifest = (saved / "manifest.json").read_bytes()
    next(saved.glob("items-*.npz")).unlink()
    with pytest.raises(SearchIndexError):
        SemanticSearcher(saved)
    (saved / "manifest.json").unlink()
    with pytest.raises(SearchIndexError, match="missing"):
        SemanticSearcher(saved)
    assert manifest


def test_a_mismatched_configuration_raises(saved: Path) -> None:
    with pytest.raises(SearchIndexError, match="n_features"):
        SemanticSearcher(saved, n_features=2**18)
    with pytest.raises(SearchIndexError, match="include_title"):
        SemanticSearcher(saved, include_title=True)
    SemanticSearcher(saved, sublinear_tf=False).close()  # raw counts are stored: no rebuild


def test_manifest_entries_cannot_leave_the_directory(saved: Path) -> None:
    # Resealed, as whoever wrote the folder could: the names are checked, not only the seal.
    manifest = read_sealed_json(saved / "manifest.json")
    manifest["segments"]["chunks"][0]["file"] = "../chunks-00000001.npz"
    write_sealed(saved / "manifest.json", manifest)
    with pytest.raises(SearchIndexError):
        SemanticSearcher(saved)


def test_a_bad_dead_row_bitmap_raises(saved: Path) -> None:
    manifest = read_sealed_json(saved / "manifest.json")
    manifest["segments"]["chunks"][0]["dead"] = "!!"
    write_sealed(saved / "manifest.json", manifest)
    with pytest.raises(SearchIndexError):
        SemanticSearcher(saved)


class _Exploit:
    """Unpickling this would create a marker file."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (open, (self.marker, "w"))


def test_a_pickle_is_refused_and_never_executed(saved: Path) -> None:
    marker = saved / "pwned"
    path = next(saved.glob("chunks-*.npz"))
    path.write_bytes(pickle.dumps(_Exploit(str(marker))))
    with pytest.raises(SearchIndexError):
        SemanticSearcher(saved)
    assert not marker.exists()


def test_an_object_array_in_a_segment_is_refused(saved: Path) -> None:
    path = next(saved.glob("chunks-*.npz"))
    with np.load(path) as npz:
        arrays = {key: npz[key] for key in npz.files}
    arrays["keys"] = np.array([_Exploit(str(saved / "pwned"))] * arrays["keys"].size, dtype=object)
    with open(path, "wb") as fh:
        np.savez(fh, **arrays)
    with pytest.raises(SearchIndexError):
        SemanticSearcher(saved)
    assert not (saved / "pwned").exists()


def test_inconsistent_segment_arrays_are_refused(saved: Path) -> None:
    path = next(saved.glob("chunks-*.npz"))
    with np.load(path) as npz:
        arrays = {key: npz[key] for key in npz.files}
    arrays["indices"] = arrays["indices"] + 2**20  # a column outside the feature space
    with open(path, "wb") as fh:
        np.savez(fh, **arrays)
    with pytest.raises(SearchIndexError):
        SemanticSearcher(saved)


def test_an_unwritable_directory_raises_search_index_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory", encoding="utf-8")
    with pytest.raises(SearchIndexError):
        SemanticSearcher(blocker / "index")


# --------------------------------------------------------------------------- lifecycle


def test_closed_searcher_raises_and_config_is_checked() -> None:
    searcher = SemanticSearcher()
    with searcher:
        pass
    with pytest.raises(SearchIndexError, match="closed"):
        searcher.search_chunks(["x"], 1)
    with pytest.raises(ConfigError):
        SemanticSearcher(n_features=0)
    with pytest.raises(ConfigError):
        SemanticSearcher(analyzer="standard")  # type: ignore[arg-type]


def test_segment_count_stays_bounded_under_many_updates(tmp_path: Path) -> None:
    searcher = SemanticSearcher(tmp_path)
    for i in range(60):
        searcher.update([make_item(f"n{i}", [f"note number {i} about otters"])])
    assert len([n for n in os.listdir(tmp_path) if n.startswith("chunks-")]) <= 17
    assert searcher.chunk_count() == 60
    assert len(searcher.search_chunks(["otter"], 100)) == 60


def test_concurrent_searches_and_updates(corpus: list[Pair]) -> None:
    searcher = SemanticSearcher()
    searcher.fit_chunks(corpus[:20])
    errors: list[BaseException] = []

    def search() -> None:
        try:
            for _ in range(40):
                for hit in searcher.search_chunks(terms("river castle chlorophyll"), 10):
                    assert 0.0 < hit.score <= 1.0
        except BaseException as exc:  # re-raised in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=search) for _ in range(3)]
    for thread in threads:
        thread.start()
    for pair in corpus[20:]:
        searcher.update([pair], ["item00"])
    for thread in threads:
        thread.join()
    assert not errors
    assert searcher.chunk_count() == 195


def test_a_failed_rebuild_leaves_the_old_index(tmp_path: Path, corpus: list[Pair]) -> None:
    searcher = SemanticSearcher(tmp_path)
    searcher.fit_chunks(corpus[:10])
    before = searcher.search_chunks(terms("river castle"), 20)

    def broken() -> Iterator[Pair]:
        yield from corpus[10:]
        raise RuntimeError("storage went away")

    with pytest.raises(RuntimeError):
        searcher.fit_chunks(broken())
    assert searcher.chunk_count() == 50
    assert searcher.search_chunks(terms("river castle"), 20) == before
    searcher.close()
    with SemanticSearcher(tmp_path) as reopened:
        assert reopened.search_chunks(terms("river castle"), 20) == before


# --------------------------------------------------------------------------- hashing in bulk


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.text(max_size=30), min_size=1, max_size=40),
    st.sampled_from([2**4, 2**18, 2**20, 1000]),
)
def test_terms_hashed_in_bulk_take_the_vectorizers_columns(
    vocab: list[str], n_features: int
) -> None:
    from sklearn.feature_extraction.text import HashingVectorizer

    from knowledge_agent.search.hashing import feature_column
    from knowledge_agent.search.term_hashing import feature_columns

    vocab = [term.encode("utf-8", "replace").decode("utf-8") for term in vocab]  # no surrogates
    got = feature_columns(vocab, n_features).tolist()
    assert got == [feature_column(term, n_features) for term in vocab]
    vectorizer = HashingVectorizer(
        analyzer=lambda doc: doc, n_features=n_features, alternate_sign=False, norm=None
    )
    assert got == [int(vectorizer.transform([[term]]).indices[0]) for term in vocab]


def test_terms_hashed_before_take_the_same_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    from knowledge_agent.search import term_hashing
    from knowledge_agent.search.hashing import feature_column

    monkeypatch.setattr(term_hashing, "_HASHES", {})
    monkeypatch.setattr(term_hashing, "_HASHES_LIMIT", 5)
    first = ["alpha", "beta", "gamma", "beta"]
    again = ["gamma", "delta", "alpha", "epsilon", "zeta", "alpha"]  # past the limit: cleared
    for vocab in (first, first, again, again, first):
        got = term_hashing.feature_columns(vocab, 2**20).tolist()
        assert got == [feature_column(term, 2**20) for term in vocab]
        assert len(term_hashing._HASHES) <= 5


def test_a_batch_analysed_for_both_engines_gives_the_same_rows() -> None:
    from knowledge_agent.search.analysed_batch import AnalysedBatch

    rng = random.Random(12)
    pairs = [make_item(f"d{i}", [filler(rng, 8) for _ in range(3)], title="T") for i in range(9)]
    alone, shared = SemanticSearcher(), SemanticSearcher()
    alone.update(pairs)
    shared.update(AnalysedBatch.build(ANALYZER, pairs))
    assert_same_results(alone, shared)
