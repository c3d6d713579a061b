"""Fusion of the keyword and semantic rankings."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from knowledge_agent.search.ranking.fusion import (
    fuse,
    reciprocal_rank_fusion,
    weighted_score_fusion,
)


def test_rrf_rewards_agreement_and_scales_to_one() -> None:
    fused = reciprocal_rank_fusion([["a", "b", "c"], ["a", "c"]], [1.0, 1.0], k=60)
    assert fused["a"] == pytest.approx(1.0)
    assert fused["c"] > fused["b"], "found by both engines beats found by one"
    assert set(fused) == {"a", "b", "c"}


def test_rrf_weights_shift_the_balance() -> None:
    rankings = [["keyword_top", "semantic_top"], ["semantic_top", "keyword_top"]]
    keyword_heavy = reciprocal_rank_fusion(rankings, [2.0, 1.0])
    semantic_heavy = reciprocal_rank_fusion(rankings, [1.0, 2.0])
    assert keyword_heavy["keyword_top"] > keyword_heavy["semantic_top"]
    assert semantic_heavy["semantic_top"] > semantic_heavy["keyword_top"]


def test_weighted_fusion_normalises_each_engine() -> None:
    fused = weighted_score_fusion([{"a": 20.0, "b": 10.0}, {"b": 0.9, "c": 0.45}], [1.0, 1.0])
    assert fused == pytest.approx({"a": 0.5, "b": 0.75, "c": 0.25})


def test_zero_weights_and_empty_engines() -> None:
    assert weighted_score_fusion([{}, {"a": 1.0}], [1.0, 0.0]) == {}
    assert reciprocal_rank_fusion([["a"], []], [0.0, 0.0]) == {}
    assert fuse("weighted", [{"a": 3.0}, {}], [1.0, 1.0]) == pytest.approx({"a": 0.5})


rankings = st.lists(st.text(max_size=3), max_size=20, unique=True)
weights = st.floats(0.01, 5)


@given(keyword=rankings, semantic=rankings, w1=weights, w2=weights)
def test_fused_scores_lie_in_unit_interval(
    keyword: list[str], semantic: list[str], w1: float, w2: float
) -> None:
    for method in ("rrf", "weighted"):
        scores = [{key: 1.0 / (i + 1) for i, key in enumerate(r)} for r in (keyword, semantic)]
        fused = fuse(method, scores, [w1, w2])
        assert set(fused) == set(keyword) | set(semantic)
        assert all(0.0 < value <= 1.0 + 1e-9 for value in fused.values())


def test_an_engine_that_scores_nothing_above_zero_adds_nothing() -> None:
    # A dense engine whose cosines are all 0 must neither divide by its zero maximum nor
    # bring its keys into the fusion.
    fused = weighted_score_fusion([{"a": 0.0, "b": 0.0}, {"c": 2.0, "d": 1.0}], [1.0, 1.0])
    assert fused == pytest.approx({"c": 0.5, "d": 0.25})


@pytest.mark.parametrize("method", ["rrf", "weighted"])
def test_a_weight_per_engine_is_required(method: str) -> None:
    # One weight too few would silently drop an engine's ranking.
    with pytest.raises(ValueError, match="zip"):
        fuse(method, [{"a": 1.0}, {"b": 1.0}], [1.0])


def test_rrf_uses_the_constant_60_unless_told_otherwise() -> None:
    # "a" is first in one ranking only; "b" second in one and first in the other.
    both_first = 2 / 61
    expected = {"a": (1 / 61) / both_first, "b": (1 / 62 + 1 / 61) / both_first}
    rankings = [["a", "b"], ["b"]]
    assert reciprocal_rank_fusion(rankings, [1.0, 1.0]) == pytest.approx(expected, rel=1e-12)
    scores = [{"a": 2.0, "b": 1.0}, {"b": 1.0}]
    assert fuse("rrf", scores, [1.0, 1.0]) == pytest.approx(expected, rel=1e-12)


def test_fuse_ranks_with_the_rrf_constant_it_is_given() -> None:
    both_first = 2 / 6
    expected = {"a": (1 / 6) / both_first, "b": (1 / 7 + 1 / 6) / both_first}
    scores = [{"a": 2.0, "b": 1.0}, {"b": 1.0}]
    assert fuse("rrf", scores, [1.0, 1.0], rrf_k=5) == pytest.approx(expected, rel=1e-12)


def test_rrf_leaves_out_the_keys_of_an_engine_weighted_zero() -> None:
    # A switched-off engine must not bring its keys in, not even with a score of 0.
    assert reciprocal_rank_fusion([["a"], ["b", "c"]], [1.0, 0.0]) == {"a": 1.0}
    assert fuse("rrf", [{"a": 1.0}, {"b": 2.0}], [1.0, 0.0]) == {"a": 1.0}
