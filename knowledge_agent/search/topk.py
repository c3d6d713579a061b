"""The k best rows of a score array, deterministically."""

from __future__ import annotations

import numpy as np

from knowledge_agent.search.distinct import distinct_counts

__all__ = ["best_rows", "capped_best_rows"]


def best_rows(rows: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best (row, score) pairs, best first; equal scores keep row order.

    ``rows`` must be ascending. Ties at the cut-off are resolved by row too, so the result
    never depends on how ``np.partition`` happened to arrange equal scores.
    """
    if scores.size > k:
        kth = np.partition(scores, scores.size - k)[scores.size - k]
        keep = scores > kth
        keep[np.flatnonzero(scores == kth)[: k - int(keep.sum())]] = True
        rows, scores = rows[keep], scores[keep]
    order = np.lexsort((rows, -scores))
    return rows[order], scores[order]


def capped_best_rows(
    rows: np.ndarray, scores: np.ndarray, groups: np.ndarray, k: int, cap: int
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`best_rows` with at most ``cap`` rows of any one group (``groups[i]`` is the
    group of ``rows[i]``): the best rows of a group past its ``cap`` make way for the next
    rows of other groups, so one large document cannot fill the whole pool."""
    best, best_scores = best_rows(rows, scores, k)
    if cap >= k or best.size == 0:
        return best, best_scores
    chosen = groups[np.searchsorted(rows, best)]  # rows are ascending
    if distinct_counts(chosen)[1].max() <= cap:
        return best, best_scores  # the common case: no group over its cap
    order = np.lexsort((rows, -scores))
    ranked_groups = groups[order]
    by_group = np.argsort(ranked_groups, kind="stable")  # score order kept inside a group
    sorted_groups = ranked_groups[by_group]
    starts = np.flatnonzero(np.r_[True, sorted_groups[1:] != sorted_groups[:-1]])
    lengths = np.diff(np.r_[starts, sorted_groups.size])
    rank = np.empty(order.size, np.int64)
    rank[by_group] = np.arange(order.size) - np.repeat(starts, lengths)
    keep = order[rank < cap][:k]
    return rows[keep], scores[keep]
