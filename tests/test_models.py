"""Models: defaults and to_dict / from_dict round trips (R1.1, R1.5, R1.6, R6.1)."""

from __future__ import annotations

import json
import types
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import knowledge_agent
from knowledge_agent.models import (
    ItemSummary,
    KnowledgeChunk,
    KnowledgeItem,
    MatchedChunk,
    Passage,
    ResultItem,
    ScoreExplanation,
    SearchResult,
)
from knowledge_agent.models.knowledge_item import content_hash

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=12,
)
metadata = st.dictionaries(st.text(max_size=10), json_values, max_size=5)
zones = st.one_of(
    st.none(),
    st.builds(lambda minutes: timezone(timedelta(minutes=minutes)), st.integers(-1439, 1439)),
)
datetimes = st.datetimes(timezones=zones)

items = st.builds(
    KnowledgeItem,
    id=st.text(),
    title=st.text(),
    content=st.text(),
    source_type=st.text(),
    source_uri=st.none() | st.text(),
    content_type=st.text(),
    doc_type=st.text(),
    language=st.text(),
    tags=st.lists(st.text(), max_size=5),
    metadata=metadata,
    content_hash=st.text(),
    kb=st.text(),
    created_at=datetimes,
    updated_at=datetimes,
)
chunks = st.builds(
    KnowledgeChunk,
    id=st.text(),
    item_id=st.text(),
    chunk_index=st.integers(min_value=0),
    content=st.text(),
    heading=st.text(),
    start_position=st.integers(min_value=0),
    end_position=st.integers(min_value=0),
    metadata=metadata,
)
passages = st.builds(
    Passage,
    text=st.text(),
    start_position=st.integers(min_value=0),
    end_position=st.integers(min_value=0),
    start_line=st.none() | st.integers(1, 10**6),
    end_line=st.none() | st.integers(1, 10**6),
    page=st.none() | st.integers(1, 1000),
    heading_path=st.lists(st.text(), max_size=4),
    link=st.text(),
    evidence_ref=st.text(),
)
matched = st.builds(
    MatchedChunk,
    chunk_id=st.text(),
    content=st.text(),
    heading=st.text(),
    chunk_index=st.integers(min_value=0),
    start_position=st.integers(min_value=0),
    end_position=st.integers(min_value=0),
    score=st.floats(allow_nan=False),
    metadata=metadata,
    evidence_ref=st.text(),
    passage=st.none() | passages,
)
finite = st.floats(allow_nan=False, allow_infinity=False, min_value=-1e6, max_value=1e6)
explanations = st.builds(
    ScoreExplanation,
    matched_terms=st.lists(st.text(), max_size=5),
    term_frequencies=st.dictionaries(st.text(), st.integers(0, 100), max_size=5),
    keyword_score=finite,
    semantic_score=finite,
    dense_score=st.none() | finite,
    fused_score=finite,
    document_boost=finite,
    recency_boost=finite,
    rerank_delta=finite,
    keyword_rank=st.none() | st.integers(1, 1000),
    semantic_rank=st.none() | st.integers(1, 1000),
    rank_before_rerank=st.none() | st.integers(1, 1000),
    path=st.text(),
    lines=st.text(),
    page=st.none() | st.integers(1, 1000),
    details=metadata,
)
# A result's item as the engine makes it: its text read from a "storage" when first used.
result_items = items.map(lambda item: ResultItem.lazy(ItemSummary.of(item), {item.id: item}.get))
results = st.builds(
    SearchResult,
    item=items | result_items,
    relevance_score=st.floats(allow_nan=False),
    matched_fields=st.lists(st.text(), max_size=3),
    highlights=st.lists(st.text(), max_size=3),
    matched_chunks=st.lists(matched, max_size=3),
    context_chunks=st.lists(matched, max_size=3),
    explanation=st.none() | explanations,
    search_mode=st.sampled_from(["chunk", "item"]),
)


def through_json(data: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(data))


@settings(max_examples=200, deadline=None)
@given(item=items)
def test_item_round_trip(item: KnowledgeItem) -> None:
    assert KnowledgeItem.from_dict(item.to_dict()) == item
    assert KnowledgeItem.from_dict(through_json(item.to_dict())) == item


@settings(max_examples=200, deadline=None)
@given(item=items)
def test_an_item_summary_keeps_everything_but_the_text(item: KnowledgeItem) -> None:
    summary = ItemSummary.of(item)
    whole, brief = item.to_dict(), summary.to_dict()
    assert brief.pop("content_chars") == len(whole.pop("content"))
    assert brief == whole
    assert ItemSummary.from_dict(through_json(summary.to_dict())) == summary


@settings(max_examples=200, deadline=None)
@given(chunk=chunks)
def test_chunk_round_trip_r1_6(chunk: KnowledgeChunk) -> None:
    assert KnowledgeChunk.from_dict(chunk.to_dict()) == chunk
    assert KnowledgeChunk.from_dict(through_json(chunk.to_dict())) == chunk


@settings(max_examples=200, deadline=None)
@given(result=results)
def test_search_result_round_trip(result: SearchResult) -> None:
    assert SearchResult.from_dict(result.to_dict()) == result
    assert SearchResult.from_dict(through_json(result.to_dict())) == result
    # The dict names the document without its text, and making it never read the text.
    assert "content" not in result.to_dict()["item"]
    assert not isinstance(result.item, ResultItem) or not result.item.content_loaded


def test_chunk_has_exactly_the_r1_1_fields_and_defaults() -> None:
    chunk = KnowledgeChunk()
    assert list(chunk.to_dict()) == [
        "id",
        "item_id",
        "chunk_index",
        "content",
        "heading",
        "start_position",
        "end_position",
        "metadata",
    ]
    assert uuid.UUID(chunk.id).version == 4
    assert chunk.metadata == {}
    assert KnowledgeChunk().id != chunk.id
    other = KnowledgeChunk()
    other.metadata["x"] = 1
    assert chunk.metadata == {}, "metadata defaults are not shared"


def test_to_dict_does_not_share_nested_state() -> None:
    chunk = KnowledgeChunk(metadata={"lines": [1, 2]})
    data = chunk.to_dict()
    data["metadata"]["lines"].append(3)
    assert chunk.metadata == {"lines": [1, 2]}


def test_item_defaults_and_content_hash() -> None:
    item = KnowledgeItem(title="t", content="hello")
    assert item.content_hash == content_hash("hello")
    assert item.kb == "default"
    assert item.created_at.tzinfo is not None
    assert KnowledgeItem(content="hello", content_hash="given").content_hash == "given"
    assert KnowledgeItem(content="a").content_hash != KnowledgeItem(content="b").content_hash


def test_item_from_dict_accepts_partial_data_and_timestamps() -> None:
    item = KnowledgeItem.from_dict(
        {"title": "x", "created_at": 0, "updated_at": "2024-05-01T12:00"}
    )
    assert item.title == "x"
    assert item.created_at == datetime(1970, 1, 1, tzinfo=timezone.utc)
    assert item.updated_at == datetime(2024, 5, 1, 12, 0)


def test_matched_chunk_from_chunk_copies_position_fields_r6_1() -> None:
    chunk = KnowledgeChunk(
        item_id="i",
        chunk_index=3,
        content="c",
        heading="H",
        start_position=10,
        end_position=11,
        metadata={"start_line": 2},
    )
    view = MatchedChunk.from_chunk(chunk, score=0.5)
    assert view.to_dict() == {
        "chunk_id": chunk.id,
        "content": "c",
        "heading": "H",
        "chunk_index": 3,
        "start_position": 10,
        "end_position": 11,
        "score": 0.5,
        "metadata": {"start_line": 2},
        "evidence_ref": "",
        "explanation": None,
        "passage": None,
    }


def test_the_final_score_is_fused_times_boosts_plus_the_rerank_delta() -> None:
    explained = ScoreExplanation(
        fused_score=0.8, document_boost=1.5, recency_boost=1.2, rerank_delta=-0.1
    )
    assert explained.final_score == pytest.approx(0.8 * 1.5 * 1.2 - 0.1)
    assert explained.to_dict()["final_score"] == pytest.approx(explained.final_score)


def test_an_explanation_of_the_older_shape_still_reads() -> None:
    old = {"matched_terms": {"crack": 2}, "keyword_score": 3.0, "fused_score": 1.0}
    read = ScoreExplanation.from_dict(old)
    assert read.matched_terms == ["crack"] and read.term_frequencies == {"crack": 2}


def test_search_result_keeps_item_level_fields_r6_3_r6_4() -> None:
    result = SearchResult(item=KnowledgeItem(title="t"), relevance_score=1.0)
    data = result.to_dict()
    for name in ("item", "relevance_score", "matched_fields", "highlights"):
        assert name in data
    assert data["matched_chunks"] == [] and data["context_chunks"] == []


def test_public_api_is_exactly_all() -> None:
    public = {
        name
        for name in dir(knowledge_agent)
        if not name.startswith("_")
        and not isinstance(getattr(knowledge_agent, name), types.ModuleType)
    }
    assert public | {"errors"} == set(knowledge_agent.__all__)
