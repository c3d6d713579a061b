"""The dense index on pgvector (``backends/postgres/dense.py``) on a real server: the same
hits and scores as the local in-memory index for the same rows, filters and caps; vectors of
unchanged text kept; an embedder failure changing nothing; and a knowledge base on the
server answering dense and hybrid queries as a data folder does."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from test_dense_search import FakeEmbedder

from knowledge_agent import KnowledgeAgentCore
from knowledge_agent.backends.local.dense.index import DenseIndex
from knowledge_agent.backends.postgres.dense import PostgresDenseIndex
from knowledge_agent.errors import EmbeddingError, SearchIndexError
from knowledge_agent.models import KnowledgeChunk, KnowledgeItem
from knowledge_agent.search.filters import SearchFilters

WORDS = [
    "cat",
    "mat",
    "garden",
    "bird",
    "password",
    "secret",
    "settings",
    "recovery",
    "link",
    "ferry",
    "harbour",
    "pier",
    "release",
    "cache",
    "page",
    "deploy",
    "revert",
    "script",
    "tide",
    "moon",
    "river",
    "bridge",
    "lamp",
]


class DocumentsFail(FakeEmbedder):
    """Embeds queries; fails on documents while ``down``."""

    down = False

    def embed(self, texts: Sequence[str], *, kind: str = "document") -> np.ndarray:
        if self.down and kind == "document":
            raise EmbeddingError("fake://", "service down")
        return super().embed(texts, kind=kind)


def _words(seed: int, count: int) -> str:
    rng = np.random.default_rng(seed)
    return " ".join(WORDS[i] for i in rng.integers(0, len(WORDS), count))


def corpus(n_items: int = 40) -> list[tuple[KnowledgeItem, list[KnowledgeChunk]]]:
    """Items in two knowledge bases, of several types, paths and dates; every fifth has no
    chunks (it is scored by its own row)."""
    pairs = []
    for number in range(n_items):
        item = KnowledgeItem(
            id=f"item-{number:03d}",
            title=f"Note {number} {WORDS[number % len(WORDS)]}",
            content=_words(number, 30),
            source_type=("file", "web")[number % 2],
            source_uri=f"/notes/{('a', 'b', 'c')[number % 3]}/n{number}.md",
            doc_type=("guide", "reference")[number % 3 == 0],
            language="en",
            kb=("default", "other")[number % 4 == 0],
            updated_at=datetime(2024, 1 + number % 12, 1, tzinfo=timezone.utc),
        )
        chunks = []
        if number % 5:
            for index in range(1 + number % 4):
                chunks.append(
                    KnowledgeChunk(
                        id=f"{item.id}-c{index}",
                        item_id=item.id,
                        chunk_index=index,
                        content=_words(1000 * number + index, 12),
                        heading=f"Section {index}" if index % 2 else "",
                    )
                )
        pairs.append((item, chunks))
    return pairs


FILTERS = [
    None,
    SearchFilters(kb=("default",)),
    SearchFilters(source_type=("web",), doc_type=("guide",)),
    SearchFilters(path_prefix=("/notes/a/",)),
    SearchFilters(path_glob=("/notes/*/n1*.md",)),
    SearchFilters(updated_after=datetime(2024, 6, 1, tzinfo=timezone.utc)),
    SearchFilters(path_prefix=("/nowhere/",)),
]
QUERIES = ["cat in the garden", "password recovery settings", "ferry harbour pier tide", "zzz"]


@pytest.fixture
def both(postgres_url: str):
    """The same rows in the local in-memory index and on the server, written alike: one
    batch, then a second that replaces some items and deletes others."""
    pairs = corpus()
    local = DenseIndex(None, FakeEmbedder())
    server = PostgresDenseIndex(postgres_url, FakeEmbedder())
    try:
        for index in (local, server):
            index.update(pairs[:30])
            index.update(pairs[25:], deletes=["item-003", "item-011"])
        yield local, server
    finally:
        server.close()
        local.close()


TIE = 1e-6
"""Scores this close are a tie: a mathematical tie may round one float32 step apart between
numpy's and pgvector's sums, and then either order is right."""


def _same_ranking(found, expected, key, every: dict[str, float]) -> None:
    """The same hits in the same order, up to ties: where the two differ, the server's hit
    scores locally (``every``: key → local score) as the local hit in that place."""
    assert len(found) == len(expected)
    for hit, want in zip(found, expected, strict=True):
        if key(hit) != key(want):
            assert abs(every[key(hit)] - want.score) <= TIE, (key(hit), key(want))
    assert np.allclose([h.score for h in found], [h.score for h in expected], atol=1e-5, rtol=0)


def _same_chunks(local, server, query, top_k, min_similarity, filters, *, per_item=None) -> None:
    expected = local.search_chunks(query, top_k, min_similarity, filters, per_item=per_item)
    found = server.search_chunks(query, top_k, min_similarity, filters, per_item=per_item)
    every = local.search_chunks(query, 10**6, min_similarity, filters)
    parts = {hit.chunk_id: (hit.item_id, hit.chunk_index) for hit in every}
    assert [parts[hit.chunk_id] for hit in found] == [(h.item_id, h.chunk_index) for h in found]
    _same_ranking(found, expected, lambda h: h.chunk_id, {h.chunk_id: h.score for h in every})
    if per_item is not None:
        counts: dict[str, int] = {}
        for hit in found:
            counts[hit.item_id] = counts.get(hit.item_id, 0) + 1
        assert max(counts.values(), default=0) <= per_item


def _same_items(local, server, query, top_k, min_similarity, filters) -> None:
    expected = local.search_items(query, top_k, min_similarity, filters)
    found = server.search_items(query, top_k, min_similarity, filters)
    every = local.search_items(query, 10**6, min_similarity, filters)
    _same_ranking(found, expected, lambda h: h.item_id, {h.item_id: h.score for h in every})


@pytest.mark.parametrize("filters", FILTERS)
def test_the_same_hits_and_scores_as_the_local_index(both, filters) -> None:
    local, server = both
    assert (server.chunk_count(), server.item_count()) == (local.chunk_count(), local.item_count())
    assert server.indexed_item_ids(chunks=True) == local.indexed_item_ids(chunks=True)
    compared = 0
    for query in QUERIES:
        for top_k in (1, 5, 50):
            for per_item in (None, 1, 2):
                _same_chunks(local, server, query, top_k, 0.0, filters, per_item=per_item)
            _same_items(local, server, query, top_k, 0.0, filters)
            compared += len(local.search_items(query, top_k, 0.0, filters))
        _same_chunks(local, server, query, 50, 0.3, filters)
    if filters is None or filters.path_prefix != ("/nowhere/",):
        assert compared  # the comparisons saw hits
    else:
        assert compared == 0


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=6),
    top_k=st.integers(1, 30),
    per_item=st.one_of(st.none(), st.integers(1, 3)),
    kb=st.sampled_from([(), ("default",), ("other",)]),
    source_type=st.sampled_from([(), ("file",), ("web",)]),
    prefix=st.sampled_from([(), ("/notes/b/",), ("/notes/c/n2",)]),
)
@example(  # two rows tied at 0.7302967: pgvector's sum rounds one of them a step lower
    words=["cat", "cat", "cache", "revert"],
    top_k=2,
    per_item=None,
    kb=(),
    source_type=(),
    prefix=(),
)
def test_any_query_and_filter_ranks_as_the_local_index(
    both, words, top_k, per_item, kb, source_type, prefix
) -> None:
    local, server = both
    filters = SearchFilters(kb=kb, source_type=source_type, path_prefix=prefix)
    query = " ".join(words)
    _same_chunks(local, server, query, top_k, 0.0, filters, per_item=per_item)
    _same_items(local, server, query, top_k, 0.0, filters)


def test_a_refit_with_reuse_embeds_only_the_text_that_changed(postgres_url: str) -> None:
    pairs = corpus(12)
    embedder = FakeEmbedder()
    with PostgresDenseIndex(postgres_url, embedder) as index:
        rows = sum(len(chunks) or 1 for _, chunks in pairs)
        assert index.fit_chunks(pairs) == sum(len(chunks) for _, chunks in pairs)
        assert embedder.embedded == rows  # no two rows share a text here
        index.update(pairs[:4])  # a replayed write: every text is held already
        assert embedder.embedded == rows
        edited, chunks = pairs[1]
        changed = KnowledgeChunk(
            id=chunks[0].id, item_id=edited.id, chunk_index=0, content="a brand new passage"
        )
        pairs[1] = (edited, [changed, *chunks[1:]])
        refit = index.refit(reuse=True)
        for start in range(0, len(pairs), 5):
            refit.add(pairs[start : start + 5])
        refit.finish()
        assert embedder.embedded == rows + 1
        hits = index.search_chunks("a brand new passage", 1)
        assert hits[0].chunk_id == changed.id and hits[0].score == pytest.approx(1.0, abs=1e-5)
        refit = index.refit()  # without reuse: every row again
        refit.add(pairs)
        refit.finish()
        assert embedder.embedded == 2 * rows + 2  # and the query above


def test_a_cancelled_refit_leaves_the_index_as_it_was(postgres_url: str) -> None:
    pairs = corpus(6)
    with PostgresDenseIndex(postgres_url, FakeEmbedder()) as index:
        index.update(pairs)
        before = index.search_chunks("cat garden", 10)
        refit = index.refit()
        refit.add(pairs[:2])
        refit.cancel()
        assert index.search_chunks("cat garden", 10) == before
        index.update(deletes=[pairs[1][0].id])  # the table is writable again
        assert pairs[1][0].id not in index.indexed_item_ids()


def test_an_embedder_failure_changes_nothing(postgres_url: str) -> None:
    pairs = corpus(6)
    embedder = DocumentsFail()
    with PostgresDenseIndex(postgres_url, embedder) as index:
        index.update(pairs[:3])
        before = (index.chunk_count(), index.item_count(), index.search_items("cat", 10))
        embedder.down = True
        edited = KnowledgeItem(id=pairs[0][0].id, title="new", content="new text")
        with pytest.raises(EmbeddingError, match="service down"):
            index.update([(edited, []), *pairs[3:]], deletes=[pairs[1][0].id])
        assert (index.chunk_count(), index.item_count(), index.search_items("cat", 10)) == before
        embedder.down = False
        query_fails = FakeEmbedder(broken=True)
        index.embedder = query_fails
        index._embedding.embedder = query_fails
        with pytest.raises(EmbeddingError):
            index.search_chunks("cat", 3)


def test_a_write_whose_embedding_fails_is_not_stored(postgres_url: str) -> None:
    embedder = DocumentsFail()
    with KnowledgeAgentCore(backend=postgres_url, embedder=embedder) as core:
        kept = core.add_text("The harbour ferry leaves every hour.", title="Ferry")
        embedder.down = True
        with pytest.raises(EmbeddingError):
            core.add_text("The cat sat on the mat.", title="Cat")
        assert [item.id for item in core.storage.list_items()] == [kept.id]
        assert core.keyword_index.item_count() == 1  # the postings rolled back too
        embedder.down = False
        core.add_text("The cat sat on the mat.", title="Cat")
        assert core.search("cat mat", mode="dense")[0].item.title == "Cat"


NOTES = {
    "account.md": "# Account\n\nSteps to change a lost secret: open the settings page and follow "
    "the recovery link.\n\n## Devices\n\nSign out of every device from the security tab.\n",
    "cat.md": "# Cat\n\nThe cat sat on the mat all afternoon, watching the birds.\n",
    "ferry.md": "# Ferry\n\nThe harbour ferry leaves every hour from pier two.\n",
}
CORE_QUERIES = [
    "how do I reset my forgotten password",
    "reset forgotten password settings zeppelin",
    "ferry pier",
    "birds",
    "sign out devices",
]


def core_answers(core: KnowledgeAgentCore) -> dict:
    found = {}
    for mode in ("dense", "hybrid"):
        for query in CORE_QUERIES:
            found[mode, query] = [
                (
                    result.item.source_uri,
                    [chunk.heading for chunk in result.matched_chunks],
                    round(result.relevance_score, 5),
                    round(result.explanation.dense_score or 0.0, 5),
                    result.explanation.dense_rank,
                )
                for result in core.search(query, mode=mode)
            ]
    return found


def test_the_server_answers_dense_and_hybrid_queries_as_a_data_folder(
    tmp_path: Path, postgres_url: str
) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    for name, text in NOTES.items():
        (notes / name).write_text(text, "utf-8")
    with KnowledgeAgentCore(tmp_path / "data", workers=1, embedder=FakeEmbedder()) as local:
        local.collect_knowledge(notes)
        expected = core_answers(local)
    with KnowledgeAgentCore(backend=postgres_url, workers=1, embedder=FakeEmbedder()) as server:
        server.collect_knowledge(notes)
        assert core_answers(server) == expected
        assert expected["dense", CORE_QUERIES[0]][0][0].endswith("account.md")
        assert server.status().consistent


def test_an_embedder_set_later_or_changed_embeds_every_chunk_once(postgres_url: str) -> None:
    with KnowledgeAgentCore(backend=postgres_url) as core:
        core.add_text("Steps to change a lost secret from the settings page.", title="Account")
        core.add_text("The cat sat on the mat all afternoon.", title="Cat")
        chunks = core.storage.count_chunks()
    first = FakeEmbedder("fake:1")
    with KnowledgeAgentCore(backend=postgres_url, embedder=first) as core:
        dense = core.engine.dense_index
        assert dense is not None and dense.chunk_count() == chunks
        assert first.embedded == chunks
        assert core.search("reset forgotten password", mode="dense")[0].item.title == "Account"
    again = FakeEmbedder("fake:1")
    with KnowledgeAgentCore(backend=postgres_url, embedder=again) as core:
        assert core.search("cat", mode="dense")[0].item.title == "Cat"
        assert again.embedded == 1  # the query: the stored vectors are used as they are
    other = FakeEmbedder("fake:2")
    with KnowledgeAgentCore(backend=postgres_url, embedder=other) as core:
        dense = core.engine.dense_index
        assert dense is not None and dense.embedder_name == "fake:2"
        assert other.embedded == chunks and dense.chunk_count() == chunks
        core._backend.rebuild(reuse_vectors=True)  # for the other indexes' sake
        assert other.embedded == chunks
        core.rebuild_index()
        assert other.embedded == 2 * chunks


def test_a_second_embedder_replaces_the_vectors_and_the_first_is_told(postgres_url: str) -> None:
    pairs = corpus(4)
    with PostgresDenseIndex(postgres_url, FakeEmbedder("fake:1")) as first:
        first.update(pairs)
        with PostgresDenseIndex(postgres_url, FakeEmbedder("fake:2")) as second:
            assert second.chunk_count() == 0 and not second.is_complete()
            with pytest.raises(SearchIndexError, match="another embedder"):
                first.update(pairs[:1])
            with pytest.raises(SearchIndexError, match="another embedder"):
                first.search_chunks("cat", 3)
            second.update(pairs)
            assert second.indexed_item_ids() == {item.id for item, _ in pairs}
