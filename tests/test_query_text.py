"""Every index's search_chunks / search_items given the query's text (a plain string, as the
spec calls them) analyses it with the index's analyzer: the same hits as its terms, on both
backends."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from knowledge_agent.analysis import AnalyzerConfig, TextAnalyzer
from knowledge_agent.backends.local.keyword.index import SearchIndexManager
from knowledge_agent.backends.local.tfidf.index import SemanticSearcher
from knowledge_agent.chunking import ChunkConfig, ContentChunker
from knowledge_agent.models import KnowledgeChunk, KnowledgeItem

ANALYZER = TextAnalyzer(AnalyzerConfig())
TEXTS = {
    "login": "How to reset a forgotten password on the login page.",
    "hashing": "Passwords are hashed with a salt before they are stored.",
    "migrate": "Run the migration command to upgrade the database schema.",
    "zh": "如何重置密码：打开设置页面，点击忘记密码。",
}
QUERIES = ("Resetting forgotten passwords", "database migrations", "重置密码", "PASSWORD")


def _pairs() -> list[tuple[KnowledgeItem, list[KnowledgeChunk]]]:
    chunker = ContentChunker(ChunkConfig(min_chunk_size=10, max_chunk_size=200))
    pairs = []
    for name, text in TEXTS.items():
        item = KnowledgeItem(id=name, title=name, content=text)
        chunks = chunker.chunk(text, title=name)
        for chunk in chunks:
            chunk.item_id = item.id
        pairs.append((item, chunks))
    return pairs


@pytest.fixture(params=["local", "postgresql"])
def indexes(request: pytest.FixtureRequest) -> Iterator[tuple[Any, Any]]:
    """(keyword index, TF-IDF index) of one backend, holding :data:`TEXTS`."""
    if request.param == "local":
        opened: tuple[Any, Any] = (
            SearchIndexManager(None, ANALYZER),
            SemanticSearcher(None, ANALYZER),
        )
    else:
        from knowledge_agent.backends.postgres.keyword import PostgresKeywordIndex
        from knowledge_agent.backends.postgres.vectors import PostgresTfidfIndex

        url = request.getfixturevalue("postgres_url")
        opened = (PostgresKeywordIndex(url, ANALYZER), PostgresTfidfIndex(url, ANALYZER))
    pairs = _pairs()
    for index in opened:
        index.update(pairs)
    yield opened
    for index in opened:
        index.close()


@pytest.mark.parametrize("engine", ["keyword", "tfidf"])
def test_query_text_is_searched_as_its_analysed_terms(
    indexes: tuple[Any, Any], engine: str
) -> None:
    index = indexes[0] if engine == "keyword" else indexes[1]
    for query in QUERIES:
        terms = ANALYZER.terms(query)
        from_text = index.search_chunks(query, 10)
        assert from_text == index.search_chunks(terms, 10)
        assert from_text, f"{engine}: {query!r} found nothing"
        assert index.search_items(query, 10) == index.search_items(terms, 10)
    # Query text, not one term: a phrase no chunk holds word for word still matches.
    assert {hit.item_id for hit in index.search_chunks("Resetting forgotten passwords", 10)} >= {
        "login"
    }
    assert index.search_chunks("", 10) == [] and index.search_chunks("the of a", 10) == []
