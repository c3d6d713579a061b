"""KnowledgeAgentCore and SearchEngineImpl: the two-stage search end to end (R4–R7)."""

from __future__ import annotations

import json
import logging
import re
import shutil
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from knowledge_agent import KnowledgeAgentCore
from knowledge_agent.errors import ConfigError, QueryError, SearchIndexError
from knowledge_agent.models import KnowledgeChunk, KnowledgeItem, SearchResult
from knowledge_agent.search.config import KeywordIndexConfig, TfidfConfig

FILLER = [
    "The committee reviewed the quarterly budget and approved the new hiring plan.",
    "Rainfall in the northern valleys was above average for the third year running.",
    "The library extended its opening hours during the examination period.",
    "Volunteers repainted the community centre and repaired the playground fence.",
    "The orchestra rehearsed a programme of baroque music for the winter concert.",
    "Local farmers reported a good harvest of apples, pears and late plums.",
]


def long_document(answer: str, position: int = 7, sections: int = 12) -> str:
    """A long markdown document whose one paragraph (in section ``position``) holds ``answer``."""
    parts = ["# Annual report"]
    for index in range(sections):
        parts.append(f"## Section {index}")
        body = " ".join(FILLER[(index + k) % len(FILLER)] for k in range(5))
        parts.append(answer if index == position else body)
        parts.append(" ".join(FILLER[(index + k + 2) % len(FILLER)] for k in range(4)))
    return "\n\n".join(parts)


ANSWER = (
    "The turbine blades are inspected for hairline cracks with an ultrasonic probe "
    "every four hundred flight hours, and any blade with a crack is replaced."
)


@pytest.fixture
def core() -> Iterator[KnowledgeAgentCore]:
    with KnowledgeAgentCore() as knowledge_base:
        yield knowledge_base


@pytest.fixture
def corpus(core: KnowledgeAgentCore) -> dict[str, KnowledgeItem]:
    with core.batch():
        items = {
            "report": core.add_text(
                long_document(ANSWER), title="Annual report", source_uri="docs/report.md"
            ),
            "short": core.add_text(
                "Espresso is brewed by forcing hot water through finely ground coffee.",
                title="Coffee",
                source_uri="notes/coffee.md",
            ),
            "chinese": core.add_text(
                "# 账户帮助\n\n## 如何重置密码\n\n"
                "在登录页面点击忘记密码，输入注册邮箱，系统会发送重置链接。"
                "链接在三十分钟内有效，请尽快设置新的密码。\n\n## 账户锁定\n\n"
                "连续输错五次密码后账户会被锁定十五分钟。"
                "锁定期间无法登录，十五分钟后自动解锁。" * 3,
                title="账户帮助",
                source_uri="zh/account.md",
            ),
        }
        for index in range(5):
            items[f"filler{index}"] = core.add_text(
                long_document(FILLER[index], position=index),
                title=f"Filler {index}",
                source_uri=f"docs/filler{index}.md",
            )
    return items


def test_finds_the_answer_paragraph_in_a_long_document(
    core: KnowledgeAgentCore, corpus: dict[str, KnowledgeItem]
) -> None:
    report = corpus["report"]
    assert len(core.storage.get_chunks_for_item(report.id)) > 5
    results = core.search("how often are turbine blades checked for cracks")
    assert results[0].item.id == report.id
    assert results[0].search_mode == "chunk"
    best = results[0].matched_chunks[0]
    assert "ultrasonic probe" in best.content
    assert best.heading == "Annual report > Section 7"


def test_matched_chunks_carry_exact_positions_r5_4_r6_1(
    core: KnowledgeAgentCore, corpus: dict[str, KnowledgeItem]
) -> None:
    result = core.search("ultrasonic probe turbine")[0]
    item = core.get_item(result.item.id)
    assert item is not None and result.item == item and result.item.content == item.content
    for chunk in result.matched_chunks + result.context_chunks:
        assert item.content[chunk.start_position : chunk.end_position] == chunk.content
        assert chunk.metadata["start_line"] <= chunk.metadata["end_line"]
    stored = core.storage.get_chunk_by_id(result.matched_chunks[0].chunk_id)
    assert stored is not None and stored.item_id == result.item.id


def test_item_score_is_its_best_chunk_score_r5_2(
    core: KnowledgeAgentCore, corpus: dict[str, KnowledgeItem]
) -> None:
    results = core.search("harvest apples orchestra rehearsed", limit=10)
    assert len(results) > 2
    for result in results:
        scores = [chunk.score for chunk in result.matched_chunks]
        assert result.relevance_score == max(scores)
        assert scores == sorted(scores, reverse=True)
        assert 1 <= len(scores) <= 3
    relevance = [result.relevance_score for result in results]
    assert relevance == sorted(relevance, reverse=True)
    assert len({result.item.id for result in results}) == len(results), "one result per item"


def test_context_window_gives_same_item_neighbours_r5_3(
    core: KnowledgeAgentCore, corpus: dict[str, KnowledgeItem]
) -> None:
    report = corpus["report"]
    result = core.search("ultrasonic probe turbine blades", limit=1, context_window=1)[0]
    matched = {chunk.chunk_index for chunk in result.matched_chunks}
    context = [chunk.chunk_index for chunk in result.context_chunks]
    assert context == sorted(context)
    assert not matched & set(context)
    expected = {i + d for i in matched for d in (-1, 1)} - matched
    count = len(core.storage.get_chunks_for_item(report.id))
    assert set(context) == {i for i in expected if 0 <= i < count}
    own = {chunk.id for chunk in core.storage.get_chunks_for_item(report.id)}
    assert {chunk.chunk_id for chunk in result.context_chunks} <= own

    wide = core.search("ultrasonic probe turbine blades", limit=1, context_window=2)[0]
    assert len(wide.context_chunks) > len(result.context_chunks)
    none = core.search("ultrasonic probe turbine blades", limit=1, context_window=0)[0]
    assert none.context_chunks == []


def test_chinese_query_finds_the_paragraph(
    core: KnowledgeAgentCore, corpus: dict[str, KnowledgeItem]
) -> None:
    results = core.search("重置密码")
    assert results[0].item.id == corpus["chinese"].id
    assert "重置" in results[0].matched_chunks[0].content
    assert "**" in results[0].highlights[0]


def test_explanation_highlights_and_matched_fields(
    core: KnowledgeAgentCore, corpus: dict[str, KnowledgeItem]
) -> None:
    # A word no text has keeps the query from being a known item: both engines rank it.
    result = core.search("ultrasonic cracks zeppelin")[0]
    explanation = result.explanation
    assert explanation is not None
    assert explanation.matched_terms == ["crack", "ultrason"]
    assert explanation.term_frequencies == {"crack": 2, "ultrason": 1}
    assert explanation.keyword_score > 0 and explanation.semantic_score > 0
    assert "known_item" not in explanation.details
    # The fused score: the rank fusion plus what the passage and document evidence added;
    # the final score: that times the boosts plus the rerank delta.
    details = explanation.details
    assert details["passage_bonus"] > 0 and details["document_bonus"] > 0
    assert explanation.fused_score == pytest.approx(
        details["rank_fusion"] + details["passage_bonus"] + details["document_bonus"]
    )
    assert result.relevance_score == pytest.approx(explanation.final_score)
    assert explanation.path == "docs/report.md"
    assert re.fullmatch(r"L\d+-L\d+", explanation.lines)
    assert details["confidence"] == result.confidence
    assert explanation.keyword_rank == 1
    assert "**ultrasonic**" in result.highlights[0]
    assert result.matched_fields == ["content"]
    heading_hit = core.search("section 7 annual report", limit=1)[0]
    assert "heading" in heading_hit.matched_fields
    title_hit = core.search("coffee", limit=1)[0]
    assert "title" in title_hit.matched_fields


def test_a_known_item_query_is_ranked_by_keywords_alone(
    corpus: dict[str, KnowledgeItem],
) -> None:
    with KnowledgeAgentCore() as core:
        for item in corpus.values():
            core.add_text(item.content, title=item.title, source_uri=item.source_uri)
        known = core.search("ultrasonic cracks")[0].explanation
        assert known is not None
        assert known.details["known_item"] is True and known.details["mode"] == "hybrid"
        assert known.keyword_score > 0 and known.semantic_score == 0.0
    with KnowledgeAgentCore(search_config={"known_item_share": 0}) as core:
        for item in corpus.values():
            core.add_text(item.content, title=item.title, source_uri=item.source_uri)
        fused = core.search("ultrasonic cracks")[0].explanation
        assert fused is not None
        assert "known_item" not in fused.details and fused.semantic_score > 0


def test_modes_and_explicit_levels(
    core: KnowledgeAgentCore, corpus: dict[str, KnowledgeItem]
) -> None:
    report = corpus["report"].id
    for mode in ("keyword", "semantic", "hybrid"):
        results = core.search("ultrasonic probe turbine", mode=mode)
        assert results[0].item.id == report, mode
    keyword_only = core.search("ultrasonic probe", mode="keyword")[0].explanation
    assert keyword_only is not None and keyword_only.semantic_score == 0.0
    items = core.search("ultrasonic probe turbine", level="item")
    assert items[0].item.id == report
    assert items[0].search_mode == "item"
    assert items[0].matched_chunks == [] and items[0].context_chunks == []


def test_short_document_behaves_like_item_search_r7_2(
    core: KnowledgeAgentCore, corpus: dict[str, KnowledgeItem]
) -> None:
    short = corpus["short"]
    chunks = core.storage.get_chunks_for_item(short.id)
    assert len(chunks) == 1 and chunks[0].content == short.content
    for query in ("espresso", "finely ground coffee", "hot water brewed"):
        chunk_level = core.search(query)
        item_level = core.search(query, level="item")
        assert chunk_level[0].item.id == item_level[0].item.id == short.id
        assert chunk_level[0].matched_chunks[0].content == short.content


def test_fallback_to_items_when_no_chunk_index_r5_5(core: KnowledgeAgentCore) -> None:
    item = KnowledgeItem(title="Legacy", content="Legacy documents about sourdough baking.")
    core.storage.save_item(item)  # stored without chunks: only the item index knows it
    core.engine.sync()
    assert not core.engine.has_chunk_index()
    results = core.search("sourdough")
    assert [r.item.id for r in results] == [item.id]
    assert results[0].search_mode == "item"
    assert results[0].matched_chunks == [] and results[0].context_chunks == []
    assert "**sourdough**" in results[0].highlights[0]


def test_fallback_when_the_chunk_index_is_unavailable(
    core: KnowledgeAgentCore,
    corpus: dict[str, KnowledgeItem],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def unavailable(*args: object, **kwargs: object) -> None:
        raise SearchIndexError("chunk index is corrupt")

    monkeypatch.setattr(core.keyword_index, "search_chunks", unavailable)
    with caplog.at_level(logging.WARNING, logger="knowledge_agent"):
        results = core.search("espresso")
    assert results[0].item.id == corpus["short"].id
    assert results[0].search_mode == "item"
    (warning,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.getMessage() == "chunk index unavailable; searching items"
    assert warning.exc_info and "chunk index is corrupt" in str(warning.exc_info[1])
    with pytest.raises(SearchIndexError):
        core.search("espresso", level="chunk")


def test_delete_removes_from_storage_and_both_indexes_r4_4(
    core: KnowledgeAgentCore, corpus: dict[str, KnowledgeItem]
) -> None:
    report = corpus["report"].id
    assert core.delete_knowledge_item(report) is True
    assert core.get_item(report) is None
    assert core.storage.get_chunks_for_item(report) == []
    for mode in ("keyword", "semantic"):
        for level in ("chunk", "item"):
            found = core.search("ultrasonic probe turbine", mode=mode, level=level)
            assert report not in {r.item.id for r in found}, (mode, level)
    assert not any(
        hit.item_id == report for hit in core.keyword_index.search_chunks(["ultrason"], 50)
    )
    assert core.delete_knowledge_item(report) is False


def test_hits_whose_chunks_are_gone_are_dropped(
    core: KnowledgeAgentCore, corpus: dict[str, KnowledgeItem]
) -> None:
    report = corpus["report"].id
    core.storage.delete_item(report)  # behind the engine's back: the indexes still hold it
    results = core.search("ultrasonic probe turbine")
    assert report not in {r.item.id for r in results}


def test_replacing_an_item_reindexes_it(core: KnowledgeAgentCore) -> None:
    item = core.add_text("Original text about glaciers and fjords.", title="Geo")
    updated = core.add_text("Rewritten text about volcanoes.", title="Geo", item_id=item.id)
    assert updated.created_at == item.created_at
    assert core.search("glaciers") == []
    assert [r.item.id for r in core.search("volcanoes")] == [item.id]
    assert core.storage.count_items() == 1


def test_rebuild_index_gives_the_same_results_r4_5(
    core: KnowledgeAgentCore, corpus: dict[str, KnowledgeItem]
) -> None:
    queries = ["ultrasonic probe", "重置密码", "espresso coffee", "baroque concert winter"]
    before = [[(r.item.id, r.matched_chunks[0].chunk_id) for r in core.search(q)] for q in queries]
    assert core.rebuild_index() == core.storage.count_chunks()
    after = [[(r.item.id, r.matched_chunks[0].chunk_id) for r in core.search(q)] for q in queries]
    assert after == before


def test_results_are_deterministic(
    corpus: dict[str, KnowledgeItem], core: KnowledgeAgentCore
) -> None:
    def run(knowledge_base: KnowledgeAgentCore) -> list[list[str]]:
        return [
            [r.item.title for r in knowledge_base.search(q)]
            for q in ("report section", "the", "music harvest", "账户")
        ]

    first = run(core)
    assert run(core) == first
    with KnowledgeAgentCore() as other:
        with other.batch():
            for item in core.storage.iter_items():
                other.add_text(item.content, title=item.title, source_uri=item.source_uri)
        assert run(other) == first


def test_filters_are_applied_before_ranking(core: KnowledgeAgentCore) -> None:
    strong = "Kubernetes pods restart when the liveness probe fails. " * 3
    with core.batch():
        for index in range(40):
            core.add_text(strong, title=f"Big {index}", kb="big", source_uri=f"big/{index}.md")
        small = core.add_text(
            "A note that mentions kubernetes once, among many other unrelated words.",
            title="Small",
            kb="small",
            source_uri="small/note.md",
        )
    assert small.id not in {r.item.id for r in core.search("kubernetes liveness probe", limit=10)}
    scoped = core.search("kubernetes liveness probe", limit=5, kb="small")
    assert [r.item.id for r in scoped] == [small.id]
    assert [r.item.id for r in core.search("kubernetes", limit=5, path_prefix="small/")] == [
        small.id
    ]
    assert [r.item.id for r in core.search("kubernetes", limit=5, path_glob="*/note.md")] == [
        small.id
    ]
    both = core.search("kubernetes", limit=100, kb=["big", "small"])
    assert len(both) == 41
    # Several prefixes or globs are OR-ed, inside the engines: one search, not one per scope.
    two = core.search("kubernetes", limit=5, path_prefix=["small/", "big/7"])
    assert {r.item.source_uri for r in two} == {"small/note.md", "big/7.md"}
    globbed = core.search("kubernetes", limit=20, path_glob=["*/note.md", "big/3?.md"])
    assert {r.item.source_uri for r in globbed} == {"small/note.md"} | {
        f"big/3{n}.md" for n in range(10)
    }
    items_only = core.search("kubernetes liveness probe", limit=5, kb="small", level="item")
    assert [r.item.id for r in items_only] == [small.id]


def test_every_filter_kind(core: KnowledgeAgentCore) -> None:
    now = datetime.now(timezone.utc)
    text = "Shared words about observability dashboards and alerting."
    guide = core.add_text(
        text, title="Guide", source_type="markdown", doc_type="guide", language="en"
    )
    runbook = core.add_text(
        text, title="Runbook", source_type="pdf", doc_type="runbook", language="en"
    )
    german = core.add_text(
        text, title="German", source_type="markdown", doc_type="guide", language="de"
    )

    def ids(**filters: object) -> set[str]:
        return {r.item.id for r in core.search("observability dashboards", **filters)}  # type: ignore[arg-type]

    assert ids(source_type="pdf") == {runbook.id}
    assert ids(doc_type="guide") == {guide.id, german.id}
    assert ids(language="de") == {german.id}
    assert ids(doc_type="guide", language="en") == {guide.id}
    assert ids(updated_after=now - timedelta(minutes=5)) == {guide.id, runbook.id, german.id}
    assert ids(updated_after=now + timedelta(minutes=5)) == set()
    assert ids(updated_before=(now - timedelta(days=1)).isoformat()) == set()
    assert ids(kb="missing") == set()


def test_reopening_from_disk_and_replaying_the_journal(tmp_path: Path) -> None:
    with KnowledgeAgentCore(tmp_path) as first:
        kept = first.add_text(long_document(ANSWER), title="Report", source_uri="report.md")
    with KnowledgeAgentCore(tmp_path) as second:
        assert second.search("ultrasonic probe")[0].item.id == kept.id
        # A write that reached SQLite but not the indexes (a crash between the two commits).
        orphan = KnowledgeItem(title="Orphan", content="Notes on hydroponic lettuce farming.")
        second.storage.save_item_with_chunks(orphan, second.chunker.chunk(orphan.content))
    with KnowledgeAgentCore(tmp_path) as third:
        assert [r.item.id for r in third.search("hydroponic lettuce")] == [orphan.id]
        assert third.storage.journal_since(0) == [], "the replayed journal is trimmed"


def test_missing_or_corrupt_indexes_are_rebuilt_on_open(tmp_path: Path) -> None:
    with KnowledgeAgentCore(tmp_path) as first:
        item = first.add_text(long_document(ANSWER), title="Report")
    shutil.rmtree(tmp_path / "index" / "whoosh")
    with KnowledgeAgentCore(tmp_path) as second:
        assert second.search("ultrasonic probe", mode="keyword")[0].item.id == item.id
    for path in (tmp_path / "index" / "tfidf").rglob("*"):
        if path.is_file():
            path.write_bytes(b"garbage")
    with KnowledgeAgentCore(tmp_path) as third:
        assert third.search("ultrasonic probe", mode="semantic")[0].item.id == item.id


def test_batch_indexes_at_the_end_even_after_an_error(core: KnowledgeAgentCore) -> None:
    with pytest.raises(RuntimeError), core.batch():
        core.add_text("Penguins live in the southern hemisphere.", title="Penguins")
        raise RuntimeError("stop")
    assert [r.item.title for r in core.search("penguins")] == ["Penguins"]


@pytest.mark.parametrize(
    "kwargs",
    [{"limit": -1}, {"context_window": -2}, {"level": "page"}, {"mode": "vector"}, {"kb": 3}],
)
def test_bad_arguments_raise_query_error(
    core: KnowledgeAgentCore, kwargs: dict[str, object]
) -> None:
    with pytest.raises(QueryError):
        core.search("anything", **kwargs)  # type: ignore[arg-type]


def test_bad_configuration_raises_config_error() -> None:
    with pytest.raises(ConfigError):
        KnowledgeAgentCore(search_config={"fusion": "max"})
    with pytest.raises(ConfigError):
        KnowledgeAgentCore(chunk_config={"min_chunk_size": 0})
    with KnowledgeAgentCore() as core, pytest.raises(ConfigError):
        core.add_text("text", kb="")


def test_update_and_remove_chunk_index_directly(core: KnowledgeAgentCore) -> None:
    item = KnowledgeItem(title="Direct", content="Alpacas graze on the high plateau.")
    chunk = KnowledgeChunk(item_id=item.id, content=item.content, end_position=len(item.content))
    core.storage.save_item_with_chunks(item, [chunk])
    core.engine.update_chunk_index(item.id, [chunk])
    assert [r.item.id for r in core.search("alpacas", level="chunk")] == [item.id]
    core.engine.remove_chunks_from_index(item.id)
    assert core.search("alpacas", level="chunk") == []


ODD_QUERIES = [
    "",
    "   ",
    'AND ( " OR NOT',
    "title:foo content:* heading:[a TO b]",
    "*",
    "?",
    "~2 ^3 \\",
    "\x00\x01\x02\u200b",
    "the and of to",
    "🙂🚀 emoji only",
    "ultrasonic " * 2000,
    "x" * 10_000,
    "重置密码" * 500,
]


@pytest.fixture(scope="module")
def shared_core() -> Iterator[KnowledgeAgentCore]:
    with KnowledgeAgentCore() as knowledge_base:
        knowledge_base.add_text(long_document(ANSWER), title="Report")
        knowledge_base.add_text("在登录页面点击忘记密码，系统会发送重置链接。", title="账户")
        yield knowledge_base


@pytest.mark.parametrize("query", ODD_QUERIES)
def test_odd_queries_never_raise(shared_core: KnowledgeAgentCore, query: str) -> None:
    for level in ("auto", "item"):
        results = shared_core.search(query, level=level)
        assert isinstance(results, list)
        assert all(isinstance(result, SearchResult) for result in results)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(query=st.text(max_size=300))
def test_any_query_string_never_raises(shared_core: KnowledgeAgentCore, query: str) -> None:
    results = shared_core.search(query, limit=3)
    assert isinstance(results, list) and len(results) <= 3


@pytest.mark.parametrize(
    "bad",
    [
        {"fusion": "max"},
        {"keyword_weight": -1},
        {"semantic_weight": "high"},
        {"rrf_k": 0},
        {"candidates": 1.5},
        {"coverage_weight": -0.1},
        {"passage_depth": 0},
        {"expansion_terms": -1},
        {"expansion_terms": True},
        {"expansion_gate": 1.5},
        {"doc_type_weights": [("adr", 2)]},
        {"doc_type_weights": {"adr": -1}},
    ],
)
def test_search_config_rejects_bad_values(bad: dict) -> None:
    with pytest.raises(ConfigError):
        KnowledgeAgentCore(search_config=bad)


@pytest.mark.parametrize("level", ["chunk", "item"])
def test_doc_type_weights_rerank_items(level: str) -> None:
    draft = "Rotate the signing keys every quarter. Rotate keys after an incident. Key rotation."
    adr = "We decided to rotate the signing keys every quarter."

    def order(weights: dict[str, float]) -> list[str]:
        with KnowledgeAgentCore(search_config={"doc_type_weights": weights}) as core:
            core.add_text(draft, title="Draft", doc_type="draft")
            core.add_text(adr, title="Decision", doc_type="adr")
            return [r.item.title for r in core.search("rotate signing keys", level=level)]

    assert order({}) == ["Draft", "Decision"]
    assert order({"draft": 0.1}) == ["Decision", "Draft"]
    assert order({"adr": 3.0})[0] == "Decision"


def test_search_config_with_doc_type_weights_is_hashable() -> None:
    from knowledge_agent.search.search_engine_impl import SearchConfig

    weighted = SearchConfig(doc_type_weights={"adr": 2.0})
    assert {weighted, SearchConfig()}  # usable in sets and as a key of frozen settings
    assert weighted != SearchConfig()


def test_ids_resolve_by_unique_prefix_and_ambiguity_is_an_error() -> None:
    with KnowledgeAgentCore() as core:
        core.add_text("one", item_id="abcdef12-0000-aaaa")
        core.add_text("two", item_id="abcdef12-1111-bbbb")
        assert core.resolve_id("abcdef12-0000-aaaa") == "abcdef12-0000-aaaa"
        assert core.resolve_id("abcdef12-1") == "abcdef12-1111-bbbb"
        assert core.resolve_id("abcdef") is None  # shorter than 8: never a prefix
        assert core.resolve_id("zzzzzzzzzz") is None
        with pytest.raises(QueryError, match="fits several"):
            core.resolve_id("abcdef12")
        assert core.short_id("abcdef12-0000-aaaa") == "abcdef12-000"
        chunk = core.storage.get_chunks_for_item("abcdef12-0000-aaaa")[0].id
        assert core.resolve_id(chunk[:9], "chunk") == chunk


def test_index_configs_are_typed_and_a_tfidf_change_rebuilds_once(tmp_path: Path) -> None:
    def fingerprint(core: KnowledgeAgentCore) -> dict[str, object]:
        return json.loads(core.storage.get_meta("index_fingerprint") or "{}")

    text = "The turbine blades are inspected with an ultrasonic probe every spring."
    with KnowledgeAgentCore(tmp_path) as core:
        core.add_text(text, title="Maintenance calendar")
        core.search("turbine")
        # The defaults record no TF-IDF setting, as before the settings were typed.
        assert fingerprint(core)["semantic"] == {}
    with KnowledgeAgentCore(tmp_path, tfidf_config=TfidfConfig(include_title=True)) as core:
        # Opening with another TF-IDF setting rebuilt the index with it, and recorded it.
        assert fingerprint(core)["semantic"] == {"include_title": True}
        assert core.semantic_searcher.include_title is True
        assert core.search("ultrasonic probe", mode="semantic")[0].item.title == (
            "Maintenance calendar"
        )
    with pytest.raises(ConfigError, match="tfidf_config"):
        KnowledgeAgentCore(tfidf_config={"n_feature": 8})
    with pytest.raises(ConfigError, match="field_boosts"):
        KnowledgeAgentCore(keyword_config=KeywordIndexConfig(field_boosts={"titel": 2.0}))
    with KnowledgeAgentCore(keyword_config={"field_boosts": {"heading": 0.0}}) as core:
        core.add_text("# Rollback\n\nUndo the last deploy with the release tool.", title="Ops")
        assert core.search("deploy")
