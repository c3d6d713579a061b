"""The search engine's behaviour, stated through the public ``KnowledgeAgentCore`` API only.

Every test opens its knowledge bases through one fixture, ``open_kb``, parametrised by
backend: a second backend runs this whole suite by adding its name to :data:`BACKENDS` and
an opener to :data:`_OPENERS`. Nothing here reaches past the public API (no storage, no
index objects), so what passes here is what any backend must do: results and their fields,
grouping per item (an item scores as its best chunk, 003 R5.2), context chunks (R5.3),
filters applied before ranking, explanations, citations and confidence.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from knowledge_agent import KnowledgeAgentCore, SearchResult
from knowledge_agent.errors import QueryError
from knowledge_agent.models.evidence import EvidenceRef, chunk_hash
from knowledge_agent.search.config import SearchConfig
from knowledge_agent.search.ranking.fusion import fuse, reciprocal_rank_fusion

OpenKb = Callable[..., KnowledgeAgentCore]

BACKENDS = ("local", "postgresql")


def _open_local(request: pytest.FixtureRequest, folder: Path, **options: Any) -> KnowledgeAgentCore:
    """The default backend: a data folder (SQLite, Whoosh, TF-IDF)."""
    return KnowledgeAgentCore(folder, **options)


def _open_postgresql(
    request: pytest.FixtureRequest, folder: Path, **options: Any
) -> KnowledgeAgentCore:
    """A database of its own on the test session's PostgreSQL server."""
    server = request.getfixturevalue("postgres_server")
    return KnowledgeAgentCore(backend=server.new_database(), **options)


_OPENERS: dict[str, Callable[..., KnowledgeAgentCore]] = {
    "local": _open_local,
    "postgresql": _open_postgresql,
}


@pytest.fixture(params=BACKENDS)
def open_kb(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[OpenKb]:
    """Opens a new, empty knowledge base on the backend under test; ``options`` are
    :class:`KnowledgeAgentCore`'s keyword arguments. Every one opened is closed after."""
    opened: list[KnowledgeAgentCore] = []

    def open_(**options: Any) -> KnowledgeAgentCore:
        core = _OPENERS[request.param](request, tmp_path / f"kb{len(opened)}", **options)
        opened.append(core)
        return core

    yield open_
    for core in opened:
        core.close()


@pytest.fixture
def kb(open_kb: OpenKb) -> KnowledgeAgentCore:
    """An empty knowledge base on the backend under test, default settings."""
    return open_kb()


# -- texts -----------------------------------------------------------------------------------

MANUAL = """# Turbine maintenance manual

## Scope

This manual covers routine maintenance of the low-pressure turbine on the regional fleet.
It applies to every engine that has completed its first overhaul at the main base.

## Inspection intervals

The turbine blades are inspected for hairline cracks with an ultrasonic probe every four
hundred flight hours. Any blade with a crack longer than two millimetres is replaced.

## Lubrication

Bearings are greased with a synthetic lubricant at every A check. Old grease is wiped
away first, so that no grit from the hangar floor reaches the bearing races.

## Records

Every inspection is signed in the engine logbook with the serial number of the probe,
the licence number of the inspector and the date on which the work was done.

## Tools

The ultrasonic probe is calibrated each morning against the steel reference block that
is kept in the tool crib, and a probe that fails the calibration is sent for repair.
"""

BREAD = """# Sourdough bread

## Starter

Feed the starter with equal weights of flour and water the evening before baking,
and leave it covered at room temperature until it has doubled and smells sour.

## Dough

Mix the flour, water, salt and a spoon of starter, then fold the dough every half hour
for two hours. Shape it into a round loaf and let it rise in a floured basket overnight.

## Baking

Bake the loaf in a covered pot for twenty minutes, then uncover it and bake until
the crust is deep brown and the bottom sounds hollow when it is tapped.
"""

GARDEN = (
    "Le jardin potager est arrosé chaque soir pendant l'été. Les tomates sont attachées "
    "à des tuteurs et les courgettes sont récoltées tous les deux jours."
)

TURBINE_QUERY = "how often are turbine blades inspected for cracks"

# A query is widened by up to five words of its best results whatever its confidence.
WIDEN_ALWAYS = {
    "expansion_terms": 5,
    "expansion_min_terms": 1,
    "expansion_languages": (),
    "expansion_gate": 1.0,
}


def _add_corpus(core: KnowledgeAgentCore) -> dict[str, str]:
    """The three texts above, in three knowledge bases; their item ids by name."""
    with core.batch():
        manual = core.add_text(
            MANUAL, title="Turbine maintenance manual", source_uri="docs/turbine/manual.md",
            kb="engineering", doc_type="guide",
        )  # fmt: skip
        bread = core.add_text(
            BREAD, title="Sourdough bread", source_uri="notes/kitchen/bread.md", kb="kitchen"
        )
        garden = core.add_text(
            GARDEN, title="Jardin", source_uri="notes/garden/jardin.txt", kb="garden",
            source_type="note", language="fr",
        )  # fmt: skip
    return {"manual": manual.id, "bread": bread.id, "garden": garden.id}


def _refs(results: list[SearchResult]) -> list[str]:
    """Every evidence reference a search returned: of each matched chunk, its passage and
    each context chunk."""
    refs = []
    for result in results:
        for matched in result.matched_chunks:
            refs.append(matched.evidence_ref)
            assert matched.passage is not None
            refs.append(matched.passage.evidence_ref)
        refs.extend(context.evidence_ref for context in result.context_chunks)
    return refs


# -- results (R5.4, R6.1) --------------------------------------------------------------------


def test_the_answer_paragraph_comes_first_with_its_item_heading_and_positions(
    kb: KnowledgeAgentCore,
) -> None:
    ids = _add_corpus(kb)
    results = kb.search(TURBINE_QUERY)
    assert results[0].item.id == ids["manual"]
    assert results[0].item.title == "Turbine maintenance manual"
    assert results[0].search_mode == "chunk"
    best = results[0].matched_chunks[0]
    assert best.heading == "Turbine maintenance manual > Inspection intervals"
    assert "every four\nhundred flight hours" in best.content
    item = kb.get_item(ids["manual"])
    assert item is not None
    for chunk in results[0].matched_chunks + results[0].context_chunks:
        assert item.content[chunk.start_position : chunk.end_position] == chunk.content
        lines = item.content.count("\n", 0, chunk.start_position) + 1
        assert chunk.metadata["start_line"] == lines
    passage = best.passage
    assert passage is not None
    assert item.content[passage.start_position : passage.end_position] == passage.text
    assert best.start_position <= passage.start_position < passage.end_position
    assert passage.end_position <= best.end_position
    assert passage.heading_path == ["Turbine maintenance manual", "Inspection intervals"]


def test_any_query_text_is_searched_as_words(kb: KnowledgeAgentCore) -> None:
    """Query syntax characters are words' neighbours, never syntax: no error, and a query
    with no searchable word gives no results."""
    ids = _add_corpus(kb)
    for query in ("zeppelin quasar", "", "   ", "the of and", "(((", 'AND OR "', "title:*", "*:*"):
        assert kb.search(query) == [], query
    for query in ("probe AND (", 'turbine" blades', "title:turbine"):
        assert [r.item.id for r in kb.search(query)] == [ids["manual"]], query
    assert kb.search("turbine", limit=0) == []


def test_results_are_the_same_every_run_and_after_a_rebuild(kb: KnowledgeAgentCore) -> None:
    _add_corpus(kb)

    def answer() -> list[dict[str, Any]]:
        return [result.to_dict() for result in kb.search("probe bearings flour", limit=5)]

    first = answer()
    assert first == answer()
    kb.rebuild_index()
    rebuilt = answer()
    assert [r["item"]["id"] for r in rebuilt] == [r["item"]["id"] for r in first]
    assert [r["relevance_score"] for r in rebuilt] == pytest.approx(
        [r["relevance_score"] for r in first]
    )
    assert [[c["chunk_id"] for c in r["matched_chunks"]] for r in rebuilt] == [
        [c["chunk_id"] for c in r["matched_chunks"]] for r in first
    ]


# -- writes are seen --------------------------------------------------------------------------


def test_a_search_sees_every_add_replace_and_delete_before_it(kb: KnowledgeAgentCore) -> None:
    first = kb.add_text("The ferry to the island leaves at noon.", title="Ferry")
    assert [r.item.id for r in kb.search("ferry island")] == [first.id]
    kb.add_text("The ferry now leaves at dawn from the new pier.", title="Ferry", item_id=first.id)
    assert [r.item.id for r in kb.search("ferry pier dawn")] == [first.id]
    assert kb.search("noon") == []
    second = kb.add_text("A second ferry runs on Sundays to the island.", title="Sunday ferry")
    assert {r.item.id for r in kb.search("ferry")} == {first.id, second.id}
    assert kb.delete_knowledge_item(first.id)
    assert [r.item.id for r in kb.search("ferry")] == [second.id]
    assert not kb.delete_knowledge_item(first.id)


# -- grouping (R5.2) --------------------------------------------------------------------------

STRONG = "The lighthouse keeper wrote in the logbook every night before the lamp was lit."
WEAK = """# Harbour guide

## Keeper

Each pier has a keeper who opens the gates at dawn and closes them at dusk for the boats.

## Lighthouse

The old lighthouse on the northern cape can be visited on Sundays during the summer months.

## Logbook

Visiting boats sign the harbour logbook at the office beside the fuel station on the quay.
"""


def test_an_item_scores_as_its_best_chunk_not_the_sum_of_its_chunks(open_kb: OpenKb) -> None:
    """One strong chunk in item A against three weak chunks in item B, whose scores sum
    to more than A's: A ranks first, and every item's score is its best chunk's."""
    kb = open_kb(chunk_config={"min_chunk_size": 20, "max_chunk_size": 400})
    strong = kb.add_text(STRONG, title="Lighthouse notes", source_uri="notes/lighthouse.md")
    weak = kb.add_text(WEAK, title="Harbour guide", source_uri="guides/harbour.md")
    query = "lighthouse keeper logbook"
    results = kb.search(query, limit=10)
    assert [r.item.id for r in results] == [strong.id, weak.id]
    a, b = results
    assert len(a.matched_chunks) == 1 and len(b.matched_chunks) == 3
    assert sum(m.score for m in b.matched_chunks) > a.relevance_score  # the sum would win
    for result in results:
        assert result.relevance_score == result.matched_chunks[0].score
        assert result.relevance_score == max(m.score for m in result.matched_chunks)
    # Only the best item is kept when one is asked for: the ranking itself is by the max.
    assert [r.item.id for r in kb.search(query, limit=1)] == [strong.id]


def test_one_result_per_item_with_its_best_chunks_best_first(kb: KnowledgeAgentCore) -> None:
    ids = _add_corpus(kb)
    results = kb.search("ultrasonic probe bearings logbook", limit=10)
    assert [r.item.id for r in results] == [ids["manual"]]
    chunks = results[0].matched_chunks
    assert len(chunks) == SearchConfig().max_chunks_per_item == 3
    assert [c.score for c in chunks] == sorted((c.score for c in chunks), reverse=True)
    assert len({c.chunk_id for c in chunks}) == 3
    one = kb.search("ultrasonic probe bearings logbook", options={"max_chunks_per_item": 1})
    assert [c.chunk_id for c in one[0].matched_chunks] == [chunks[0].chunk_id]


def test_results_are_ordered_by_score(kb: KnowledgeAgentCore) -> None:
    _add_corpus(kb)
    results = kb.search("bake the loaf in the covered pot until the turbine", limit=10)
    assert len(results) >= 2
    scores = [r.relevance_score for r in results]
    assert scores == sorted(scores, reverse=True)


# -- context (R5.3) --------------------------------------------------------------------------


def test_context_chunks_are_the_neighbours_in_document_order(kb: KnowledgeAgentCore) -> None:
    ids = _add_corpus(kb)
    query = "synthetic lubricant grease bearings"
    result = kb.search(query, limit=1, context_window=1)[0]
    assert result.item.id == ids["manual"]
    assert [m.heading for m in result.matched_chunks][:1] == [
        "Turbine maintenance manual > Lubrication"
    ]
    matched = {m.chunk_index for m in result.matched_chunks}
    context = [c.chunk_index for c in result.context_chunks]
    total = len(kb.read_chunk(result.matched_chunks[0].chunk_id, neighbors=99).after) + (
        result.matched_chunks[0].chunk_index + 1
    )
    expected = sorted({i + d for i in matched for d in (-1, 1) if 0 <= i + d < total} - matched)
    assert context == expected
    for chunk in result.context_chunks:
        assert chunk.explanation is None and chunk.passage is None and chunk.score == 0.0
        assert kb.read_chunk(chunk.chunk_id).item.id == ids["manual"]

    assert kb.search(query, limit=1, context_window=0)[0].context_chunks == []
    wide = kb.search(query, limit=1, context_window=2)[0]
    expected_wide = {i + d for i in matched for d in (-2, -1, 1, 2) if 0 <= i + d < total}
    assert [c.chunk_index for c in wide.context_chunks] == sorted(expected_wide - matched)


def test_context_never_comes_from_another_item(open_kb: OpenKb) -> None:
    kb = open_kb(chunk_config={"min_chunk_size": 20, "max_chunk_size": 400})
    only = kb.add_text(STRONG, title="Lighthouse notes")
    kb.add_text(WEAK, title="Harbour guide")
    result = kb.search("lamp lit night", limit=1, context_window=3)[0]
    assert result.item.id == only.id
    assert result.context_chunks == []


# -- filters, before ranking ----------------------------------------------------------------


def test_every_filter_restricts_the_results(kb: KnowledgeAgentCore) -> None:
    ids = _add_corpus(kb)
    query = "the flour probe tomates"  # a word of each text

    def found(**filters: Any) -> set[str]:
        return {r.item.id for r in kb.search(query, limit=10, **filters)}

    assert found() == set(ids.values())
    assert found(kb="kitchen") == {ids["bread"]}
    assert found(kb=["kitchen", "garden"]) == {ids["bread"], ids["garden"]}
    assert found(source_type="note") == {ids["garden"]}
    assert found(doc_type="guide") == {ids["manual"]}
    assert found(language="fr") == {ids["garden"]}
    assert found(path_prefix="notes/") == {ids["bread"], ids["garden"]}
    assert found(path_glob="**/*.txt") == {ids["garden"]}
    now = datetime.now(timezone.utc)
    assert found(updated_after=now - timedelta(days=1)) == set(ids.values())
    assert found(updated_before=now - timedelta(days=1)) == set()
    assert found(kb="kitchen", path_prefix="docs/") == set()
    for level in ("chunk", "item"):
        assert {r.item.id for r in kb.search(query, kb="garden", level=level)} == {ids["garden"]}


def test_filters_restrict_the_candidates_before_ranking(kb: KnowledgeAgentCore) -> None:
    """A narrow scope whose one match would be far down the global ranking is still
    found: the filter is not applied to a global top-k."""
    with kb.batch():
        for n in range(12):
            kb.add_text(
                f"Inspection record {n}: the probe was calibrated and the probe passed.",
                title=f"Record {n}",
                kb="engineering",
            )
        quiet = kb.add_text(BREAD + "\nA probe thermometer reads the loaf.", kb="kitchen")
    options = {"candidates": 1}
    assert quiet.id not in {r.item.id for r in kb.search("probe", limit=2, options=options)}
    results = kb.search("probe", limit=2, kb="kitchen", options=options)
    assert [r.item.id for r in results] == [quiet.id]


# -- explanations ---------------------------------------------------------------------------


def test_an_explanation_adds_up_to_the_score_and_says_where(kb: KnowledgeAgentCore) -> None:
    ids = _add_corpus(kb)
    results = kb.search("ultrasonic probe calibrated", limit=3)
    assert results[0].item.id == ids["manual"]
    for result in results:
        assert result.explanation is result.matched_chunks[0].explanation
        for matched in result.matched_chunks:
            explained = matched.explanation
            assert explained is not None
            assert explained.final_score == pytest.approx(matched.score, rel=1e-12)
            assert explained.details["chunk_id"] == matched.chunk_id
            assert explained.path == "docs/turbine/manual.md"
            start, end = matched.metadata["start_line"], matched.metadata["end_line"]
            assert explained.lines == f"L{start}-L{end}"
            assert set(explained.matched_terms) <= {"ultrason", "probe", "calibr"}
            assert explained.matched_terms, "a matched chunk holds a query term"
            assert explained.fused_score == pytest.approx(
                explained.details["rank_fusion"]
                + explained.details["passage_bonus"]
                + explained.details["document_bonus"],
                rel=1e-12,
            )


def test_a_doc_type_weight_multiplies_the_score(kb: KnowledgeAgentCore) -> None:
    text = "Decision: the fleet moves to synthetic lubricant for all turbine bearings."
    plain = kb.add_text(text, title="Lubricant", source_uri="a.md")
    adr = kb.add_text(text, title="Lubricant", source_uri="b.md", doc_type="adr")
    ranked = kb.search("synthetic lubricant bearings")
    assert [r.item.id for r in ranked] == [adr.id, plain.id]
    results = {r.item.id: r for r in ranked}
    assert results[plain.id].explanation is not None and results[adr.id].explanation is not None
    assert results[plain.id].explanation.document_boost == 1.0
    assert results[adr.id].explanation.document_boost == 1.5  # the documented adr weight
    assert results[adr.id].relevance_score == pytest.approx(
        1.5 * results[adr.id].explanation.fused_score, rel=1e-12
    )
    off = kb.search("synthetic lubricant bearings", options={"doc_type_weights": {}})
    assert {r.explanation.document_boost for r in off if r.explanation} == {1.0}


def test_explain_gives_the_same_explanation_as_the_search(kb: KnowledgeAgentCore) -> None:
    _add_corpus(kb)
    result = kb.search("calibrated probe", limit=1)[0]
    matched = result.matched_chunks[0]
    assert matched.explanation is not None
    explained = kb.explain(matched.chunk_id, "calibrated probe")
    assert explained.to_dict() == matched.explanation.to_dict()

    where = kb.explain(matched.chunk_id)
    assert where.path == "docs/turbine/manual.md"
    assert where.lines == matched.explanation.lines
    assert where.details["content_hash"] == chunk_hash(matched.content)
    unranked = kb.explain(matched.chunk_id, "sourdough starter")
    assert unranked.details["ranked"] is False
    assert unranked.fused_score == unranked.keyword_score == 0.0 and unranked.matched_terms == []


# -- fusion: the RRF constant -----------------------------------------------------------------


def _rrf(k: int, ranks: list[tuple[float, int | None]]) -> float:
    """Σ weight / (k + rank) over the rankings holding the key, over the best possible sum."""
    best = sum(weight / (k + 1) for weight, _ in ranks)
    return sum(weight / (k + rank) / best for weight, rank in ranks if rank is not None)


def test_rrf_fuses_with_the_configured_constant() -> None:
    rankings = [["a", "b", "c"], ["b", "c"]]
    assert reciprocal_rank_fusion(rankings, [2.0, 1.0], k=5) == pytest.approx(
        {"a": (2 / 6) / (3 / 6), "b": (2 / 7 + 1 / 6) / (3 / 6), "c": (2 / 8 + 1 / 7) / (3 / 6)},
        rel=1e-12,
    )
    scores = [{"a": 9.0, "b": 5.0, "c": 1.0}, {"b": 0.9, "c": 0.2}]
    assert fuse("rrf", scores, [2.0, 1.0], rrf_k=5) == reciprocal_rank_fusion(
        rankings, [2.0, 1.0], k=5
    )
    assert fuse("rrf", scores, [2.0, 1.0], rrf_k=5)["b"] == pytest.approx(19 / 21, rel=1e-12)


def test_the_default_rrf_constant_is_60() -> None:
    rankings = [["a", "b"], ["b", "a"]]
    sixty = {"a": (1 / 61 + 1 / 62) / (2 / 61), "b": (1 / 62 + 1 / 61) / (2 / 61)}
    assert reciprocal_rank_fusion(rankings, [1.0, 1.0]) == pytest.approx(sixty, rel=1e-12)
    assert fuse("rrf", [dict.fromkeys(r, 1.0) for r in rankings], [1.0, 1.0]) == pytest.approx(
        sixty, rel=1e-12
    )
    assert SearchConfig().rrf_k == 60


@pytest.mark.parametrize("rrf_k", [5, None])
def test_a_search_fuses_the_engines_ranks_with_its_rrf_constant(
    kb: KnowledgeAgentCore, rrf_k: int | None
) -> None:
    """Each matched chunk's rank fusion is exactly the RRF of its two ranks, with the
    configured constant (5), or the default 60 when none is configured."""
    _add_corpus(kb)
    options: dict[str, Any] = {"known_item_share": 0}  # both engines always vote
    if rrf_k is not None:
        options["rrf_k"] = rrf_k
    k = rrf_k or 60
    results = kb.search(
        "probe calibrated flour loaf", limit=10, options=options,
        weights={"keyword": 2, "semantic": 1},
    )  # fmt: skip
    seen = 0
    for result in results:
        for matched in result.matched_chunks:
            explained = matched.explanation
            assert explained is not None
            expected = _rrf(k, [(2, explained.keyword_rank), (1, explained.semantic_rank)])
            assert explained.details["rank_fusion"] == pytest.approx(expected, rel=1e-12)
            seen += explained.keyword_rank not in (None, 1) or explained.semantic_rank != 1
    assert seen >= 2, "some chunks are ranked below the first, where the constant shows"


# -- citations --------------------------------------------------------------------------------


def test_every_reference_a_search_returns_checks_unchanged(kb: KnowledgeAgentCore) -> None:
    _add_corpus(kb)
    results = kb.search("ultrasonic probe lubricant flour", limit=10, context_window=2)
    refs = _refs(results)
    assert sum(len(r.context_chunks) for r in results) >= 2, "context refs are checked too"
    chunk_refs = {m.evidence_ref: m for r in results for m in r.matched_chunks + r.context_chunks}
    for ref in refs:
        assert ref, "every chunk and passage is cited"
        check = kb.check_citation(ref)
        assert check.status == "unchanged", ref
        assert check.chunk is not None
        assert check.chunk.id == EvidenceRef.parse(ref).chunk_id
        if ref in chunk_refs:
            assert check.current_ref == ref
            assert check.chunk.content == chunk_refs[ref].content
    for result in results:
        for chunk in result.matched_chunks + result.context_chunks:
            cited = EvidenceRef.parse(chunk.evidence_ref)
            assert cited.path == result.item.source_uri
            assert cited.content_hash == chunk_hash(chunk.content)
            start, end = chunk.metadata["start_line"], chunk.metadata["end_line"]
            assert (cited.start_line, cited.end_line) == (start, end)


def test_a_reference_to_text_since_changed_or_deleted_is_stale(kb: KnowledgeAgentCore) -> None:
    ids = _add_corpus(kb)
    result = kb.search("synthetic lubricant grease", limit=1, context_window=1)[0]
    lubrication = result.matched_chunks[0]
    assert lubrication.heading.endswith("Lubrication")
    kept = [c for c in result.context_chunks if "Lubrication" not in c.content]
    assert kept, "a context chunk whose text stays the same"
    edited = MANUAL.replace("synthetic lubricant", "mineral oil")
    kb.add_text(
        edited, title="Turbine maintenance manual", source_uri="docs/turbine/manual.md",
        kb="engineering", item_id=ids["manual"],
    )  # fmt: skip
    changed = kb.check_citation(lubrication.evidence_ref)
    assert changed.status == "changed"
    assert changed.chunk is not None and "mineral oil" in changed.chunk.content
    assert changed.current_ref != lubrication.evidence_ref
    for chunk in kept:
        moved = kb.check_citation(chunk.evidence_ref)
        assert moved.status in ("unchanged", "moved")
        assert moved.chunk is not None and moved.chunk.content == chunk.content

    kb.delete_knowledge_item(ids["manual"])
    for chunk in [lubrication, *kept]:
        gone = kb.check_citation(chunk.evidence_ref)
        assert (gone.status, gone.chunk, gone.current_ref) == ("gone", None, "")
    with pytest.raises(QueryError, match="not an evidence reference"):
        kb.check_citation("docs/turbine/manual.md#L3")


# -- confidence --------------------------------------------------------------------------------


def test_confidence_of_a_chunk_result_is_within_0_and_1(kb: KnowledgeAgentCore) -> None:
    ids = _add_corpus(kb)
    results = kb.search("blades cracks flour", limit=10)
    assert [r.item.id for r in results] == [ids["manual"], ids["bread"]]
    for result in results:
        assert 0.0 < result.confidence < 1.0
        assert result.explanation is not None
        assert result.explanation.details["confidence"] == result.confidence
    assert results[0].confidence > 0.5 > results[1].confidence  # two words of three, one
    best = results[0].confidence
    assert [r.confidence for r in kb.search("blades cracks flour", min_confidence=best)] == [best]
    assert kb.search("blades cracks flour", min_confidence=best + 1e-9) == []
    # Words the base has never seen ("how", "often") lower it: it knows only part of that.
    asked = kb.search("turbine blades inspected for cracks", limit=1)[0].confidence
    assert kb.search(TURBINE_QUERY, limit=1)[0].confidence < asked


def test_confidence_of_a_semantic_only_result_is_its_passage_evidence(
    kb: KnowledgeAgentCore,
) -> None:
    """Without the keyword engine, confidence is the mean of the best line's coverage and
    proximity — 1.0 for a line holding the whole query in order, less for a partial one."""
    _add_corpus(kb)
    whole = kb.search("ultrasonic probe is calibrated", mode="semantic", limit=10)
    for result in whole:
        details = result.matched_chunks[0].explanation.details  # type: ignore[union-attr]
        passage = (details["passage_coverage"] + details["passage_proximity"]) / 2
        assert result.confidence == pytest.approx(passage, rel=1e-12)
    assert whole[0].confidence == 1.0
    partial = kb.search("probe flour", mode="semantic", limit=10)
    assert partial and all(0.0 < r.confidence < 1.0 for r in partial)
    # A query word the base has never seen lowers it: nothing here answers it surely.
    unknown = kb.search("ultrasonic probe is calibrated zeppelin", mode="semantic", limit=1)
    assert unknown[0].item.id == whole[0].item.id
    assert 0.0 < unknown[0].confidence < whole[0].confidence


def test_confidence_of_item_level_results(kb: KnowledgeAgentCore) -> None:
    """At item level there is no passage: the confidence is the keyword evidence alone,
    and 0.0 where the keyword engine gave none."""
    ids = _add_corpus(kb)
    semantic = kb.search(TURBINE_QUERY, level="item", mode="semantic", limit=10)
    assert semantic and {r.search_mode for r in semantic} == {"item"}
    assert [r.confidence for r in semantic] == [0.0] * len(semantic)
    keyword = kb.search(TURBINE_QUERY, level="item", mode="keyword", limit=10)
    assert keyword[0].item.id == ids["manual"]
    assert all(0.0 < r.confidence <= 1.0 for r in keyword)
    hybrid = {r.item.id: r.confidence for r in kb.search(TURBINE_QUERY, level="item")}
    assert hybrid == {r.item.id: r.confidence for r in keyword}


# -- the item-level fallback (R5.5, R6.4) ------------------------------------------------------


def test_item_level_results_have_no_chunk_lists(kb: KnowledgeAgentCore) -> None:
    ids = _add_corpus(kb)
    results = kb.search(TURBINE_QUERY, level="item", limit=10)
    assert results[0].item.id == ids["manual"]
    for result in results:
        assert result.search_mode == "item"
        assert result.matched_chunks == [] and result.context_chunks == []
        assert result.highlights and result.explanation is not None
        assert result.explanation.path == kb.get_item(result.item.id).source_uri  # type: ignore[union-attr]
    scores = [r.relevance_score for r in results]
    assert scores == sorted(scores, reverse=True)


def test_a_short_text_is_one_chunk_found_whole(kb: KnowledgeAgentCore) -> None:
    item = kb.add_text(GARDEN, title="Jardin", language="fr")
    result = kb.search("tomates tuteurs")[0]
    assert result.item.id == item.id
    assert [(c.chunk_index, c.start_position, c.end_position) for c in result.matched_chunks] == [
        (0, 0, len(GARDEN))
    ]
    assert result.context_chunks == []


def test_the_search_result_is_plain_data(kb: KnowledgeAgentCore) -> None:
    _add_corpus(kb)
    for result in kb.search(TURBINE_QUERY, limit=3):
        data = result.to_dict()
        assert json.loads(json.dumps(data)) == data
        assert SearchResult.from_dict(data).to_dict() == data
        assert dataclasses.is_dataclass(result.item)


def test_a_chunk_weighed_late_adds_its_passage_evidence_to_its_fused_score(
    open_kb: OpenKb,
) -> None:
    # passage_depth 1: only the query's best chunk is weighed before grouping; the document's
    # other shown chunks get their passage evidence when their document is shown.
    kb = open_kb(chunk_config={"min_chunk_size": 20, "max_chunk_size": 400})
    _add_corpus(kb)
    options = {"passage_depth": 1, "max_chunks_per_item": 3}
    result = kb.search("ultrasonic probe calibrated", limit=1, options=options)[0]
    late = result.matched_chunks[1:]
    assert late, "the manual shows more than one chunk"
    assert any(m.explanation and m.explanation.details["passage_bonus"] > 0 for m in late)
    for matched in result.matched_chunks:
        explained = matched.explanation
        assert explained is not None
        assert explained.fused_score == pytest.approx(
            explained.details["rank_fusion"]
            + explained.details["passage_bonus"]
            + explained.details["document_bonus"],
            rel=1e-12,
        )


def test_a_pdf_match_is_explained_with_its_page(kb: KnowledgeAgentCore, tmp_path: Path) -> None:
    from test_processors_pdf import make_pdf

    filler = ["The committee met to review the quarterly budget of the department."] * 3
    answer = ["The generator failed because the coolant valve was left closed."] * 3
    (tmp_path / "report.pdf").write_bytes(make_pdf([filler, answer]))
    kb.collect_knowledge(tmp_path / "report.pdf")
    matched = kb.search("coolant valve closed")[0].matched_chunks[0]
    assert matched.metadata.get("page") == 2
    assert matched.explanation is not None and matched.explanation.page == 2


def test_a_widened_query_keeps_the_filters(open_kb: OpenKb) -> None:
    kb = open_kb(search_config=WIDEN_ALWAYS)
    kb.add_text("Zephyr gusts shake the hangar doors.", title="One", source_uri="a.md")
    near = kb.add_text("Strong gusts shake the hangar doors.", title="Two", source_uri="b.md")
    far = kb.add_text("Gusts shake the hangar doors.", title="Three", kb="elsewhere")
    results = kb.search("zephyr", limit=5, kb="default")
    assert "gust" in results[0].explanation.details["expanded_with"]
    assert near.id in {r.item.id for r in results}
    assert far.id not in {r.item.id for r in results}


def test_an_explanation_names_the_fusion_and_the_mode(kb: KnowledgeAgentCore) -> None:
    _add_corpus(kb)
    for fusion in ("rrf", "weighted"):
        for mode in ("hybrid", "keyword", "semantic"):
            result = kb.search(TURBINE_QUERY, mode=mode, options={"fusion": fusion})[0]
            assert result.explanation is not None
            assert result.explanation.details["fusion"] == fusion
            assert result.explanation.details["mode"] == mode
