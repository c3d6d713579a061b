"""The age factor, cosine similarity and MMR order, value by value."""

from __future__ import annotations

import math
from collections import Counter

import pytest

from knowledge_agent.search.ranking.boosts import cosine, mmr_order, time_boost


def test_time_boost_multiplies_the_recency_boost_by_the_decay() -> None:
    assert time_boost(30, 1.0, 30, 30) == pytest.approx((1 + math.exp(-1)) * 0.5, rel=1e-12)
    assert time_boost(0, 0.5, 30, 60) == pytest.approx(1.5, rel=1e-12)


def test_recency_over_zero_days_is_off_and_under_a_day_is_on() -> None:
    assert time_boost(0, 0.5, 0, 0) == 1.0
    assert time_boost(3, 0.5, 0, 0) == 1.0
    assert time_boost(0, 0.5, 1, 0) == pytest.approx(1.5, rel=1e-12)
    assert time_boost(0.5, 0.5, 0.5, 0) == pytest.approx(1 + 0.5 * math.exp(-1), rel=1e-12)


def test_a_half_life_of_a_day_or_less_still_decays() -> None:
    assert time_boost(1, 0.0, 30, 1) == pytest.approx(0.5, rel=1e-12)
    assert time_boost(1, 0.0, 30, 0.5) == pytest.approx(0.25, rel=1e-12)


def test_cosine_with_an_empty_or_all_zero_vector_is_zero() -> None:
    terms = Counter({"keys": 2, "vault": 1})
    assert cosine(Counter(), terms) == 0.0
    assert cosine(terms, Counter()) == 0.0
    assert cosine(Counter(), Counter()) == 0.0
    zero = Counter({"keys": 0})  # a term counted and taken away again
    assert cosine(zero, terms) == 0.0
    assert cosine(terms, zero) == 0.0


def test_cosine_of_term_counts() -> None:
    a, b = Counter({"keys": 2, "vault": 1}), Counter({"keys": 1, "disk": 3, "rotate": 1})
    assert cosine(a, b) == pytest.approx(2 / (math.sqrt(5) * math.sqrt(11)), rel=1e-12)
    assert cosine(b, a) == cosine(a, b)
    assert cosine(a, a) == pytest.approx(1.0, rel=1e-12)


def test_mmr_returns_exactly_k_entries_or_all_of_fewer() -> None:
    scores = [3.0, 2.0, 1.0]
    vectors = [Counter({"a": 1}), Counter({"b": 1}), Counter({"c": 1})]
    assert mmr_order(scores, vectors, 0.5, 2) == [0, 1]
    assert mmr_order(scores, vectors, 0.5, 5) == [0, 1, 2]
    assert mmr_order(scores, vectors, 0.5, 0) == []
    assert mmr_order([], [], 0.5, 3) == []


def test_mmr_with_lambda_one_keeps_the_score_order_even_among_copies() -> None:
    scores = [3.0, 2.0, 1.0]
    vectors = [Counter({"keys": 1}), Counter({"keys": 1}), Counter({"vault": 1})]
    assert mmr_order(scores, vectors, 1.0, 3) == [0, 1, 2]


def test_mmr_weighs_relevance_scaled_to_the_best_against_similarity() -> None:
    # After the first, entry 1 (a copy of it, relevance 0.975) loses to entry 2 (unlike it,
    # relevance 0.5): 0.5 · 0.975 − 0.5 · 1 < 0.5 · 0.5 − 0. Unscaled scores would keep it.
    vectors = [Counter({"keys": 1}), Counter({"keys": 1}), Counter({"vault": 1})]
    assert mmr_order([4.0, 3.9, 2.0], vectors, 0.5, 3) == [0, 2, 1]
    # A partial copy (cosine 1/√2) still wins over an unlike entry of low relevance:
    # 0.5 · 0.9 − 0.5 · 0.707 > 0.5 · 0.1.
    partial = [Counter({"a": 1}), Counter({"a": 1, "b": 1}), Counter({"c": 1})]
    assert mmr_order([1.0, 0.9, 0.1], partial, 0.5, 3) == [0, 1, 2]


def test_mmr_of_scores_all_zero_orders_by_dissimilarity() -> None:
    vectors = [Counter({"keys": 1}), Counter({"keys": 1}), Counter({"vault": 1})]
    assert mmr_order([0.0, 0.0, 0.0], vectors, 0.5, 3) == [0, 2, 1]
