"""The sort-based distinct values equal ``np.unique`` for every option the indexes use."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from knowledge_agent.search.distinct import (
    distinct,
    distinct_counts,
    distinct_first,
    distinct_inverse,
)

# Narrow ranges make repeats (the runs), full ranges reach the packing's overflow fallback.
int64_arrays = st.one_of(
    hnp.arrays(np.int64, st.integers(0, 300), elements=st.integers(-5, 5)),
    hnp.arrays(np.int64, st.integers(0, 300), elements=st.integers(0, 2**40)),
    hnp.arrays(np.int64, st.integers(0, 50)),
)
other_integer_arrays = hnp.arrays(
    st.sampled_from([np.int8, np.int32, np.uint8, np.uint32, np.uint64, np.bool_]),
    st.integers(0, 100),
)
unsorted = st.one_of(int64_arrays, other_integer_arrays)
arrays = st.one_of(unsorted, unsorted.map(np.sort))  # sorted input skips the sort


def _same(got: np.ndarray, expected: np.ndarray) -> None:
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)


@given(arrays)
def test_distinct_is_np_unique(values: np.ndarray) -> None:
    _same(distinct(values), np.unique(values))


@given(arrays)
def test_distinct_counts_is_np_unique_with_counts(values: np.ndarray) -> None:
    found, counts = distinct_counts(values)
    expected, expected_counts = np.unique(values, return_counts=True)
    _same(found, expected)
    _same(counts, expected_counts)


@given(arrays)
def test_distinct_first_is_np_unique_with_index(values: np.ndarray) -> None:
    found, first = distinct_first(values)
    expected, expected_first = np.unique(values, return_index=True)
    _same(found, expected)
    _same(first, expected_first)


@given(arrays)
def test_distinct_inverse_is_np_unique_with_inverse(values: np.ndarray) -> None:
    found, inverse = distinct_inverse(values)
    expected, expected_inverse = np.unique(values, return_inverse=True)
    _same(found, expected)
    _same(inverse, expected_inverse.reshape(-1))
    _same(found[inverse], values)


@given(hnp.arrays(np.int64, hnp.array_shapes(max_dims=3, max_side=6), elements=st.integers(-3, 3)))
def test_a_many_dimensional_array_is_read_flattened(values: np.ndarray) -> None:
    _same(distinct(values), np.unique(values))
    _same(distinct_inverse(values)[1], np.unique(values, return_inverse=True)[1].reshape(-1))


@given(st.lists(st.text(max_size=3), max_size=30), st.sampled_from([str, bytes]))
def test_strings_are_np_unique_too(texts: list[str], kind: type) -> None:
    values = np.array(texts if kind is str else [t.encode() for t in texts], dtype=kind)
    _same(distinct(values), np.unique(values))
    for got, expected in zip(
        distinct_counts(values), np.unique(values, return_counts=True), strict=True
    ):
        _same(got, expected)
    for got, expected in zip(
        distinct_first(values), np.unique(values, return_index=True), strict=True
    ):
        _same(got, expected)
    found, inverse = distinct_inverse(values)
    _same(found[inverse], values)


def test_values_at_the_ends_of_int64_round_trip() -> None:
    edge = np.array([np.iinfo(np.int64).max, np.iinfo(np.int64).min, 0, -1, 0], np.int64)
    top = np.array([2**64 - 1, 2**64 - 3, 2**64 - 1], np.uint64)  # packed above int64's range
    for values in (edge, edge[:1], edge[1:2], top, np.array([2**64 - 1, 2**63, 1], np.uint64)):
        found, first = distinct_first(values)
        expected, expected_first = np.unique(values, return_index=True)
        _same(found, expected)
        _same(first, expected_first)
