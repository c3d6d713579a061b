"""One document, one slot: a document with thousands of matching sections leaves room for the
others, in every mode and in every engine's candidate pool."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_dense_search import FakeEmbedder

from knowledge_agent import KnowledgeAgentCore
from knowledge_agent.backends.local.keyword.index import SearchIndexManager
from knowledge_agent.backends.local.tfidf.index import SemanticSearcher
from knowledge_agent.search.topk import best_rows, capped_best_rows

QUERY = "lifespan events router middleware"
SECTIONS = 2_000


def changelog() -> str:
    # Every section holds every query word twice: each outscores any tutorial's best chunk.
    return "# Changelog\n\n" + "\n\n".join(
        f"## Version 0.{i}\n\nFixed lifespan events in router middleware (case {i}). "
        "Router middleware lifespan events changed again."
        for i in range(SECTIONS)
    )


def tutorial(number: int) -> str:
    return (
        f"# Tutorial {number}\n\nThis tutorial covers lifespan events, and adds a router "
        f"with its middleware.\n\n## Unrelated\n\nTopic {number} is about something else."
    )


@pytest.fixture(scope="module")
def core() -> KnowledgeAgentCore:
    with KnowledgeAgentCore(None, embedder=FakeEmbedder()) as core:
        core.add_text(changelog(), title="Changelog", source_uri="changelog.md")
        for number in range(15):
            core.add_text(tutorial(number), title=f"Tutorial {number}", source_uri=f"t{number}.md")
        # Writes are indexed at the next search: make them visible to the tests that read
        # the engines directly, whichever test of the module runs first.
        core.search(QUERY, limit=1)
        yield core


@pytest.mark.parametrize("mode", ["hybrid", "keyword", "semantic", "dense"])
def test_a_changelog_with_thousands_of_better_sections_leaves_room_for_ten_documents(
    core: KnowledgeAgentCore, mode: str
) -> None:
    results = core.search(QUERY, limit=10, mode=mode)
    paths = [result.item.source_uri for result in results]
    assert len(paths) == len(set(paths)) == 10
    assert "changelog.md" in paths
    tutorials = [result for result in results if result.item.source_uri != "changelog.md"]
    # Each tutorial's best passage is the one about the query, not its unrelated section.
    for result in tutorials:
        assert "lifespan events" in result.matched_chunks[0].content


def test_every_matching_document_is_reachable(core: KnowledgeAgentCore) -> None:
    results = core.search(QUERY, limit=16)
    assert len({result.item.id for result in results}) == 16


def test_the_engines_cap_one_items_share_of_the_pool(core: KnowledgeAgentCore) -> None:
    terms = core.analyzer.terms(QUERY)
    keyword: SearchIndexManager = core.keyword_index
    semantic: SemanticSearcher = core.semantic_searcher
    for hits in (
        keyword.search_chunks(terms, 40, per_item=5),
        semantic.search_chunks(terms, 40, per_item=5),
    ):
        by_item: dict[str, int] = {}
        for hit in hits:
            by_item[hit.item_id] = by_item.get(hit.item_id, 0) + 1
        assert len(hits) == 20  # the changelog's five, then the fifteen tutorials
        assert sorted(by_item.values(), reverse=True)[:2] == [5, 1]
        assert [hit.score for hit in hits] == sorted((hit.score for hit in hits), reverse=True)
    # Without a cap the changelog takes the whole pool.
    uncapped = keyword.search_chunks(terms, 40)
    assert len({hit.item_id for hit in uncapped}) == 1


def _reference(
    rows: list[int], scores: list[float], groups: list[int], k: int, cap: int
) -> list[int]:
    order = sorted(range(len(rows)), key=lambda i: (-scores[i], rows[i]))
    taken: dict[int, int] = {}
    kept = []
    for i in order:
        if taken.get(groups[i], 0) < cap:
            taken[groups[i]] = taken.get(groups[i], 0) + 1
            kept.append(rows[i])
    return kept[:k]


@given(
    st.lists(st.tuples(st.integers(0, 4), st.integers(0, 5)), min_size=0, max_size=60),
    st.integers(1, 20),
    st.integers(1, 6),
)
def test_capped_best_rows_is_the_best_rows_with_at_most_cap_per_group(
    entries: list[tuple[int, int]], k: int, cap: int
) -> None:
    rows = list(range(len(entries)))
    scores = [float(score) for score, _ in entries]  # few values: many ties
    groups = [group for _, group in entries]
    got, got_scores = capped_best_rows(
        np.array(rows, np.int64), np.array(scores), np.array(groups, np.int64), k, cap
    )
    assert got.tolist() == _reference(rows, scores, groups, k, cap)
    assert got_scores.tolist() == [scores[row] for row in got.tolist()]
    if cap >= len(entries):
        plain, _ = best_rows(np.array(rows, np.int64), np.array(scores), k)
        assert got.tolist() == plain.tolist()


def test_the_cap_follows_writes_and_deletes() -> None:
    with KnowledgeAgentCore(None) as core:
        core.add_text(changelog(), title="Changelog", source_uri="changelog.md")
        first = core.add_text(tutorial(0), title="Tutorial 0", source_uri="t0.md")
        terms = core.analyzer.terms(QUERY)
        assert len({result.item.id for result in core.search(QUERY, limit=5)}) == 2
        core.delete_knowledge_item(first.id)
        second = core.add_text(tutorial(1), title="Tutorial 1", source_uri="t1.md")
        core.search(QUERY, limit=1)  # applies the writes
        hits = core.keyword_index.search_chunks(terms, 10, per_item=3)
        assert [hit.item_id for hit in hits].count(second.id) == 1
        assert first.id not in {hit.item_id for hit in hits}
        assert {result.item.source_uri for result in core.search(QUERY, limit=5)} == {
            "changelog.md",
            "t1.md",
        }
