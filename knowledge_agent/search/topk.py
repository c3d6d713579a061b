"""The k best rows of a score array, deterministically."""

from __future__ import annotations

import numpy as np

__all__ = ["best_rows"]


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
