"""The distinct values of an array by sorting, as ``np.unique`` returns them.

numpy 2.3+ answers a plain ``np.unique`` through a hash table, tens of times slower than a
sort on large int64 arrays (1M keys: seconds against 0.1 s), and ``return_index`` /
``return_inverse`` through an ``argsort`` several times slower than ``np.sort``. Here every
variant is one ``np.sort``: of the values, or, for first positions and the inverse, of each
value packed with its position into one int64 when the two fit (an argsort otherwise).
Strings hash slowly too (100K ids: 0.4 s against a 0.08 s sort): their values and counts
sort here, their first positions and inverse take ``np.unique``'s own argsort, as do all
other dtypes. Arrays are read flattened.
"""

from __future__ import annotations

import numpy as np

__all__ = ["distinct", "distinct_counts", "distinct_first", "distinct_inverse"]

_INT64_MAX = int(np.iinfo(np.int64).max)
_SORTED = "iubUS"  # dtype kinds whose values and counts come from np.sort here
_PACKED = "iub"  # and whose first positions and inverse do


def distinct(values: np.ndarray) -> np.ndarray:
    """The distinct values, ascending: ``np.unique(values)``."""
    values = np.ravel(values)
    if values.dtype.kind not in _SORTED:
        return np.unique(values)
    ordered = _ascending(values)
    return ordered[_starts(ordered)]


def distinct_counts(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct values, ascending, and how often each occurs:
    ``np.unique(values, return_counts=True)``."""
    values = np.ravel(values)
    if values.dtype.kind not in _SORTED:
        return np.unique(values, return_counts=True)
    ordered = _ascending(values)
    starts = np.flatnonzero(_starts(ordered))
    return ordered[starts], np.diff(np.append(starts, ordered.size))


def distinct_first(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct values, ascending, and the position of each one's first occurrence:
    ``np.unique(values, return_index=True)``."""
    values = np.ravel(values)
    if values.dtype.kind not in _PACKED:
        return np.unique(values, return_index=True)
    ordered, order = _sorted_with_positions(values)
    starts = _starts(ordered)
    return ordered[starts], order[starts]


def distinct_inverse(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct values, ascending, and for each value the position of its distinct value:
    ``np.unique(values, return_inverse=True)`` (the inverse flat)."""
    values = np.ravel(values)
    if values.dtype.kind not in _PACKED:
        found, inverse = np.unique(values, return_inverse=True)
        return found, inverse.reshape(-1)
    ordered, order = _sorted_with_positions(values)
    starts = _starts(ordered)
    inverse = np.empty(values.size, np.intp)
    inverse[order] = np.cumsum(starts) - 1
    return ordered[starts], inverse


def _is_ascending(values: np.ndarray) -> bool:
    # One pass; callers often hand over sorted arrays (postings in column order), which a sort
    # of packed int64 keys would take longer to sort again than numpy's argsort.
    return values.size < 2 or bool((values[1:] >= values[:-1]).all())


def _ascending(values: np.ndarray) -> np.ndarray:
    return values if _is_ascending(values) else np.sort(values)


def _starts(ordered: np.ndarray) -> np.ndarray:
    """True where a sorted array's run of equal values begins."""
    starts = np.empty(ordered.size, bool)
    if ordered.size:
        starts[0] = True
        np.not_equal(ordered[1:], ordered[:-1], out=starts[1:])
    return starts


def _sorted_with_positions(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``values`` sorted, and the position each came from; equal values keep their order."""
    n = values.size
    if _is_ascending(values):
        return values, np.arange(n, dtype=np.intp)
    if values.dtype.kind == "b":
        order = np.argsort(values, kind="stable")
        return values[order], order
    low, high = int(values.min()), int(values.max())
    if (high - low + 1) * n - 1 > _INT64_MAX:
        order = np.argsort(values, kind="stable")
        return values[order], order
    # (value - low) * n + position: one int64 whose order is (value, position).
    if values.dtype == np.uint64:
        packed = (values - np.uint64(low)).astype(np.int64)
    else:
        packed = values.astype(np.int64) - np.int64(low)  # no overflow: high - low fits
    packed *= n
    packed += np.arange(n, dtype=np.int64)
    packed.sort()
    shifted, order = np.divmod(packed, n)
    ordered = shifted.astype(values.dtype) + values.dtype.type(low)
    return ordered, order.astype(np.intp, copy=False)
