"""Confidence: how surely a result answers its query, and the known-item gate.

``confidence`` and ``unseen_share`` are stated on exact values; the engine's use of them
(the keyword share over the best BM25 the query could reach, the passage evidence, the
query as asked) and the known-item gate through ``KnowledgeAgentCore``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_engine_behaviour import WIDEN_ALWAYS

from knowledge_agent import KnowledgeAgentCore, SearchResult
from knowledge_agent.search.ranking.passages import PassageEvidence, confidence, unseen_share

OpenKb = Callable[..., KnowledgeAgentCore]

# BM25's k1 and the idf of a term held by the only chunk of a base (Lucene's idf, N = df = 1).
_K1 = 1.2
_IDF_ONE_OF_ONE = math.log(1.0 + (1 - 1 + 0.5) / (1 + 0.5))


@pytest.fixture
def open_kb(tmp_path: Path) -> Iterator[OpenKb]:
    """Opens a new knowledge base with these options; every one opened is closed after."""
    opened: list[KnowledgeAgentCore] = []

    def open_(**options: Any) -> KnowledgeAgentCore:
        core = KnowledgeAgentCore(tmp_path / f"kb{len(opened)}", **options)
        opened.append(core)
        return core

    yield open_
    for core in opened:
        core.close()


def _details(result: SearchResult) -> dict[str, Any]:
    explanation = result.matched_chunks[0].explanation
    assert explanation is not None
    return explanation.details


# -- confidence() --------------------------------------------------------------------------------


def test_a_result_without_passage_or_keyword_evidence_has_confidence_0() -> None:
    assert confidence(None, None) == 0.0
    assert confidence(0.0, None) == 0.0
    assert confidence(0.5, None) == 0.5
    assert confidence(0.5, None, unseen_share=0.5) == 0.25


@given(
    keyword=st.one_of(st.none(), st.floats(-2, 3)),
    coverage=st.floats(0, 1),
    proximity=st.floats(0, 1),
    unseen=st.floats(-2, 3),
    with_passage=st.booleans(),
)
def test_confidence_stays_within_0_and_1_whatever_the_shares(
    keyword: float | None, coverage: float, proximity: float, unseen: float, with_passage: bool
) -> None:
    evidence = PassageEvidence(coverage, proximity, 0, 1) if with_passage else None
    assert 0.0 <= confidence(keyword, evidence, unseen) <= 1.0


def test_a_query_wholly_unseen_or_more_has_confidence_0() -> None:
    whole = PassageEvidence(1.0, 1.0, 0, 5)
    assert confidence(1.0, whole, unseen_share=1.0) == 0.0
    assert confidence(1.0, whole, unseen_share=1.5) == 0.0
    assert confidence(1.0, None, unseen_share=1.5) == 0.0


# -- unseen_share() ------------------------------------------------------------------------------


def test_the_unseen_share_is_weighted_by_idf() -> None:
    assert unseen_share(["a", "b"], {"a": 0.5, "b": 0.25}, {"a"}) == 0.5 / 0.75
    assert unseen_share(["a", "b", "a"], {"a": 0.5, "b": 0.25}, {"b"}) == 0.25 / 1.25
    assert unseen_share(["a"], {"a": 0.5}, {"a"}) == 1.0


def test_a_term_without_an_idf_weighs_nothing() -> None:
    assert unseen_share(["a", "b"], {"a": 2.0}, {"a"}) == 1.0
    assert unseen_share(["a", "b"], {"a": 2.0}, {"a", "b"}) == 1.0
    assert unseen_share(["a", "b"], {"a": 2.0}, {"b"}) == 0.0


def test_a_query_whose_terms_weigh_nothing_has_no_unseen_share() -> None:
    assert unseen_share(["a"], {"a": 0.0}, {"a"}) == 0.0
    assert unseen_share(["a"], {"a": -1.0}, {"a"}) == 0.0
    assert unseen_share([], {}, {"a"}) == 0.0
    assert unseen_share(["a"], {"a": 0.5}, set()) == 0.0


# -- the engine's confidence ---------------------------------------------------------------------


def test_keyword_confidence_is_the_bm25_over_the_best_the_query_could_reach(
    open_kb: OpenKb,
) -> None:
    """0.7 × BM25 / (idf · (k1 + 1)) + 0.3 × the passage's mean coverage and proximity."""
    kb = open_kb()
    kb.add_text("The turbine blades are inspected every week.", title="Blades", source_uri="b.md")
    (result,) = kb.search("turbine", mode="keyword")
    explanation = result.matched_chunks[0].explanation
    assert explanation is not None
    share = explanation.keyword_score / (_IDF_ONE_OF_ONE * (_K1 + 1))
    assert 0.0 < share < 1.0
    passage = (1.0 + 0.0) / 2  # the one term found, no pair to find together
    assert result.confidence == pytest.approx(0.7 * share + 0.3 * passage, rel=1e-12)


def test_without_the_keyword_engine_confidence_is_the_passage_evidence(open_kb: OpenKb) -> None:
    kb = open_kb()
    kb.add_text(
        "The ultrasonic probe is calibrated each morning.", title="Probe", source_uri="p.md"
    )
    (result,) = kb.search("ultrasonic probe", mode="semantic")
    assert result.confidence == 1.0
    assert _details(result)["confidence"] == 1.0


def test_confidence_does_not_depend_on_the_passage_weights_of_the_ranking(
    open_kb: OpenKb,
) -> None:
    """With the passage re-scoring off, a result's passage evidence is still weighed."""
    kb = open_kb(search_config={"coverage_weight": 0.0, "proximity_weight": 0.0})
    kb.add_text(
        "The ultrasonic probe is calibrated each morning.", title="Probe", source_uri="p.md"
    )
    (result,) = kb.search("ultrasonic probe", mode="semantic")
    assert result.confidence == 1.0
    (keyword,) = kb.search("ultrasonic probe", mode="keyword")
    assert 0.3 < keyword.confidence < 1.0  # the keyword share (< 1) and the whole passage


def test_a_result_found_only_by_the_widened_query_has_confidence_0(open_kb: OpenKb) -> None:
    """Confidence is judged on the query as asked: a text holding none of its words, found
    by the words a widened query added, has no keyword share and no passage."""
    kb = open_kb(search_config=WIDEN_ALWAYS)
    kb.add_text("Zephyr gusts shake the hangar doors.", title="One", source_uri="a.md")
    other = kb.add_text("Strong gusts shake the hangar doors.", title="Two", source_uri="b.md")
    kb.add_text("Bread rises overnight.", title="Three", source_uri="c.md")
    results = kb.search("zephyr", limit=5)
    assert "gust" in _details(results[0])["expanded_with"]
    assert results[0].confidence > 0.0
    widened = [r for r in results if r.item.id == other.id]
    assert len(widened) == 1
    assert widened[0].confidence == 0.0
    assert _details(widened[0])["confidence"] == 0.0


# -- the known-item gate -------------------------------------------------------------------------


def _known_item_ratio(kb: KnowledgeAgentCore) -> float:
    """The one chunk's BM25 for "turbine" over the best BM25 that query could reach."""
    (result,) = kb.search("turbine", mode="keyword")
    explanation = result.matched_chunks[0].explanation
    assert explanation is not None
    return explanation.keyword_score / ((1 * _IDF_ONE_OF_ONE) * ((_K1 + 1) * 1.0))


def test_a_query_held_nearly_whole_is_a_known_item_even_when_its_best_bm25_is_small(
    open_kb: OpenKb,
) -> None:
    kb = open_kb()
    kb.add_text("The turbine blades are inspected every week.", title="Blades", source_uri="b.md")
    assert _IDF_ONE_OF_ONE * (_K1 + 1) < 1.0  # the best BM25 this query could reach
    assert _known_item_ratio(kb) >= 0.4  # the default share
    (result,) = kb.search("turbine")
    assert _details(result)["known_item"] is True
    assert _details(result)["mode"] == "hybrid"


def test_the_known_item_share_is_reached_at_equality(open_kb: OpenKb, tmp_path: Path) -> None:
    first = open_kb()
    first.add_text(
        "The turbine blades are inspected every week.", title="Blades", source_uri="b.md"
    )
    ratio = _known_item_ratio(first)
    assert 0.0 < ratio < 1.0
    at = open_kb(search_config={"known_item_share": ratio})
    above = open_kb(search_config={"known_item_share": math.nextafter(ratio, 1.0)})
    for kb in (at, above):
        kb.add_text(
            "The turbine blades are inspected every week.", title="Blades", source_uri="b.md"
        )
        assert _known_item_ratio(kb) == ratio
    assert _details(at.search("turbine")[0]).get("known_item") is True
    assert "known_item" not in _details(above.search("turbine")[0])


def test_a_heading_only_match_with_the_content_boost_off_is_found_not_divided_by_zero(
    open_kb: OpenKb,
) -> None:
    # The best score a query could reach is over the content field: with its boost 0 that
    # yardstick is 0, so no hit is a known item and no share can be taken of it.
    kb = open_kb(keyword_config={"field_boosts": {"content": 0.0, "heading": 1.0}})
    item = kb.add_text("Bearings are greased at every check.", title="Turbine lubrication")
    (result,) = kb.search("turbine lubrication")
    assert result.item.id == item.id
    assert result.confidence == 0.0
    assert "known_item" not in _details(result)
