"""The rows of a dense index over its segments: the item lookup, maintenance, filters, queries.

Rows are chunk rows (one per chunk) and item rows (one per item without chunks). Per-row
arrays over all segments (live mask, row kind, item entry) and per-entry filter columns are
built lazily after a change; the vectors themselves are never copied for a query: each
segment's block is multiplied in place (memory-mapped or not), or, under a narrow filter,
only its allowed rows are gathered, a bounded block at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from knowledge_agent.backends.local.dense.segments import DenseSegment
from knowledge_agent.backends.local.segments.filters import FIELDS, MetadataCodes, key_mask
from knowledge_agent.backends.local.segments.merge import maintained
from knowledge_agent.search.distinct import distinct, distinct_first
from knowledge_agent.search.filters import SearchFilters
from knowledge_agent.search.topk import best_rows, capped_best_rows

__all__ = ["MIN_SCORE", "DenseCollection", "Merger"]

Merger = Callable[[Sequence[DenseSegment]], DenseSegment]
"""Makes one new segment of the live rows of some segments (in memory, or written)."""

_GATHER_ROWS = 8192  # allowed rows multiplied at once when a filter leaves few of a segment
MIN_SCORE = 1e-6
"""Scores at or below this are not matches: an orthogonal (unrelated) row's float32 dot
product is rounding noise of about 1e-8, not a similarity."""


@dataclass(eq=False)
class _View:
    """Per-row and per-entry arrays over all segments, rebuilt lazily after a change."""

    offsets: np.ndarray  # first global row of each segment, plus the total
    live: np.ndarray  # bool per row
    chunk_live: np.ndarray  # bool per row: a live chunk row
    entry: np.ndarray  # int64 per row: its (segment, item) entry
    codes: dict[str, np.ndarray]  # FIELDS → int32 per entry
    updated: np.ndarray  # float64 per entry


class DenseCollection:
    """Every row of a dense index: segments, the item lookup, query structures."""

    def __init__(self, dimensions: int) -> None:
        self.dimensions = dimensions
        self.segments: list[DenseSegment] = []
        self.n_live = 0
        self.n_live_chunks = 0
        self._where: dict[str, DenseSegment] = {}  # item id → the segment with its live rows
        self._meta = MetadataCodes()
        self._view: _View | None = None

    # -- mutation ------------------------------------------------------------------------

    def add(self, seg: DenseSegment) -> None:
        """Register a segment: its live rows join the counts and the item lookup."""
        live = ~seg.dead
        self.n_live += int(live.sum())
        self.n_live_chunks += int((live & seg.is_chunk).sum())
        for local in distinct(seg.row_item[live]).tolist():
            self._where[str(seg.item_ids[local])] = seg
        seg.codes = self._meta.codes(seg.meta)
        self.segments.append(seg)
        self._view = None

    @property
    def n_items(self) -> int:
        """Items with live rows."""
        return len(self._where)

    def item_ids(self) -> set[str]:
        """Items with live rows (every indexed item has at least one)."""
        return set(self._where)

    def chunk_item_ids(self) -> set[str]:
        """Items with live chunk rows."""
        found: set[str] = set()
        for seg in self.segments:
            rows = ~seg.dead & seg.is_chunk
            found.update(seg.item_ids[distinct(seg.row_item[rows])].tolist())
        return found

    def live_rows(self, item_id: str) -> tuple[DenseSegment, np.ndarray] | None:
        """The segment holding ``item_id``'s live rows, and those rows."""
        seg = self._where.get(item_id)
        return None if seg is None else (seg, seg.live_rows_of(item_id))

    def kill(self, item_ids: Iterable[str]) -> int:
        """Mark every live row of these items dead; returns how many rows died."""
        killed = 0
        for item_id in item_ids:
            seg = self._where.pop(item_id, None)
            if seg is None:
                continue
            rows = seg.live_rows_of(item_id)
            seg.dead[rows] = True
            seg.n_dead += rows.size
            killed += rows.size
            self.n_live_chunks -= int(seg.is_chunk[rows].sum())
        if killed:
            self.n_live -= killed
            self._view = None
        return killed

    def maintain(self, max_segments: int, dead_fraction: float, merge: Merger) -> None:
        """Drop dead segments, rewrite mostly dead ones, merge the tail when too many."""
        kept = maintained(
            self.segments,
            max_segments,
            dead_fraction,
            lambda segments: self._replace(segments, merge),
            "dense",
        )
        if kept is not None:
            self.segments = kept
            self._view = None

    def _replace(self, segments: Sequence[DenseSegment], merge: Merger) -> DenseSegment:
        merged = merge(segments)
        merged.codes = self._meta.codes(merged.meta)
        for item_id in merged.item_ids.tolist():
            self._where[item_id] = merged
        return merged  # the same live rows: the counts do not change

    # -- querying ------------------------------------------------------------------------

    def _refresh(self) -> _View:
        if self._view is not None:
            return self._view
        segs = self.segments
        entry_base = np.cumsum([0] + [seg.item_ids.size for seg in segs])

        def cat(parts: list[np.ndarray], dtype: Any) -> np.ndarray:
            return np.concatenate(parts) if parts else np.empty(0, dtype)

        live = cat([~seg.dead for seg in segs], bool)
        self._view = _View(
            offsets=np.cumsum([0, *(seg.n_rows for seg in segs)]).astype(np.int64),
            live=live,
            chunk_live=live & cat([seg.is_chunk for seg in segs], bool),
            entry=cat(
                [
                    seg.row_item.astype(np.int64) + base
                    for seg, base in zip(segs, entry_base[:-1].tolist(), strict=True)
                ],
                np.int64,
            ),
            codes={name: cat([seg.codes[name] for seg in segs], np.int32) for name in FIELDS},
            updated=cat([seg.updated for seg in segs], np.float64),
        )
        return self._view

    def search(
        self,
        query: np.ndarray,
        top_k: int,
        min_similarity: float,
        filters: SearchFilters | None,
        *,
        per_item: bool,
        cap: int | None = None,
    ) -> list[tuple[DenseSegment, int, float]]:
        """The best rows for a unit ``query`` vector, as (segment, row, cosine), best first.

        Chunk rows only (at most ``cap`` of one item when it is given), or (``per_item``)
        every row with one result per item, its best.
        Filters restrict the rows before anything is ranked; rows scoring :data:`MIN_SCORE`
        or less, below ``min_similarity`` or not finite are left out; ties keep row order.
        """
        if self.n_live == 0 or top_k <= 0:
            return []
        view = self._refresh()
        allowed = view.live if per_item else view.chunk_live
        if filters is not None and not filters.is_empty():
            allowed = allowed & self._meta.entry_mask(filters, view.codes, view.updated)[view.entry]
        rows = np.flatnonzero(allowed)
        if filters is not None and filters.keys is not None:
            rows = rows[key_mask(self.segments, view.offsets, rows, filters.keys)]
        if rows.size == 0:
            return []
        scores = self._scores(query, rows, view.offsets)
        keep = np.isfinite(scores) & (scores > MIN_SCORE) & (scores >= min_similarity)
        rows, scores = rows[keep], np.minimum(scores[keep], 1.0)
        if per_item:
            rows, scores = _best_per_entry(rows, scores, view.entry, top_k)
        elif cap is not None:
            rows, scores = capped_best_rows(rows, scores, view.entry[rows], top_k, cap)
        else:
            rows, scores = best_rows(rows, scores, top_k)
        segment_of = np.searchsorted(view.offsets, rows, side="right") - 1
        return [
            (self.segments[s], int(row - view.offsets[s]), float(score))
            for s, row, score in zip(
                segment_of.tolist(), rows.tolist(), scores.tolist(), strict=True
            )
        ]

    def _scores(self, query: np.ndarray, rows: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        """Cosine (a dot of unit vectors) of the ascending global ``rows``, as float64."""
        scores = np.empty(rows.size, np.float64)
        bounds = np.searchsorted(rows, offsets)
        for s, seg in enumerate(self.segments):
            lo, hi = int(bounds[s]), int(bounds[s + 1])
            if lo == hi:
                continue
            local = rows[lo:hi] - offsets[s]
            if local.size * 4 >= seg.n_rows:  # most of the segment: one product, in place
                scores[lo:hi] = (seg.vectors @ query)[local]
                continue
            for start in range(0, local.size, _GATHER_ROWS):
                part = local[start : start + _GATHER_ROWS]
                scores[lo + start : lo + start + part.size] = seg.vectors[part] @ query
        return scores


def _best_per_entry(
    rows: np.ndarray, scores: np.ndarray, entry: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """The best row of each of the ``k`` entries whose best rows score highest.

    Rows ordered by (score desc, row asc): the first ``k`` distinct entries of that order
    are the answer, and they lie in its shortest prefix holding ``k`` distinct entries, so a
    prefix is ranked and widened only when it holds too few (never a sort of every row).
    """
    size = min(rows.size, max(4 * k, 64))
    while True:
        best, best_scores = best_rows(rows, scores, size)
        _, first = distinct_first(entry[best])
        if first.size >= k or size >= rows.size:
            break
        size = min(rows.size, size * 4)
    first = np.sort(first)[:k]
    return best[first], best_scores[first]
