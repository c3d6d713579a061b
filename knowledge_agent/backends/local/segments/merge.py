"""Which segments to drop, compact or merge: the maintenance policy both indexes share.

How a segment is rewritten differs (TF-IDF stacks sparse counts in memory; dense streams
vectors to a new file), so the caller passes ``replace``: one new segment of the live rows
of the segments given, its bookkeeping (item lookup, string codes) done.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

__all__ = ["maintained", "merge_start"]

logger = logging.getLogger(__name__)


class _Segment(Protocol):
    @property
    def n_rows(self) -> int: ...

    @property
    def n_live(self) -> int: ...

    n_dead: int


S = TypeVar("S", bound=_Segment)


def merge_start(sizes: Sequence[int]) -> int:
    """First segment of the newest run to merge when there are too many segments.

    The run grows while the next older segment is at most twice the rows gathered so far, so
    a big base segment is only rewritten once the tail has grown comparable to it: each row
    is rewritten O(log n) times, not once per update.
    """
    start = len(sizes) - 2
    total = sizes[-1] + sizes[-2]
    while start > 0 and sizes[start - 1] <= 2 * total:
        start -= 1
        total += sizes[start]
    return start


def maintained(
    segments: Sequence[S],
    max_segments: int,
    dead_fraction: float,
    replace: Callable[[Sequence[S]], S],
    label: str,
) -> list[S] | None:
    """``segments`` without dead ones, mostly dead ones rewritten, the tail merged when
    there are more than ``max_segments``; None when nothing changed. ``label`` ("TF-IDF",
    "dense") names the index in the log."""
    kept: list[S] = []
    for seg in segments:
        if seg.n_live == 0:
            continue
        if seg.n_dead > dead_fraction * seg.n_rows:
            logger.info(
                "compacting a %s segment: %d of %d rows dead", label, seg.n_dead, seg.n_rows
            )
            seg = replace([seg])
        kept.append(seg)
    if len(kept) > max(max_segments, 1):
        start = merge_start([seg.n_rows for seg in kept])
        logger.debug("merging %d %s segments", len(kept) - start, label)
        kept[start:] = [replace(kept[start:])]
    if len(kept) == len(segments) and all(a is b for a, b in zip(kept, segments, strict=True)):
        return None
    return kept
