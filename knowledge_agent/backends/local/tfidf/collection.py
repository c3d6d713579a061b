"""A TF-IDF collection: one kind of row (chunks or items) over its segments.

It keeps the live-row document frequencies (so idf is a vector computed in one pass), the
item → segment lookup that replacing an item needs, segment maintenance (compaction and tiered
merges) and the per-row query structures (idf, row norms, metadata codes), rebuilt lazily
after a change. Queries are hashed term columns; filters are masks over item entries.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from knowledge_agent.backends.local.segments.filters import FIELDS, MetadataCodes, key_mask
from knowledge_agent.backends.local.segments.merge import maintained
from knowledge_agent.backends.local.tfidf.segments import (
    Postings,
    Segment,
    merge_segments,
    tf_weights,
)
from knowledge_agent.search.distinct import distinct, distinct_counts
from knowledge_agent.search.filters import SearchFilters
from knowledge_agent.search.topk import best_rows, capped_best_rows

__all__ = ["Collection", "bump"]

_SMALL = 8  # a collection with under n_features / _SMALL postings keeps idf per held column


def bump(df: np.ndarray, cols: np.ndarray, sign: int) -> None:
    """Add ``sign`` to the document frequency of every column in ``cols``."""
    if cols.size == 0:
        return
    if cols.size * 16 < df.size:  # a small batch: don't pay for a dense n_features pass
        present, counts = distinct_counts(cols)  # np.add.at is 10x slower
        df[present] += (sign * counts).astype(df.dtype)
    else:
        df += sign * np.bincount(cols, minlength=df.size).astype(df.dtype)


@dataclass(eq=False)
class _View:
    """Per-row arrays over all segments, rebuilt lazily after a change."""

    offsets: np.ndarray  # first global row of each segment, plus the total
    live: np.ndarray
    norms: np.ndarray  # float64 row norms under the current idf
    entry: np.ndarray  # global row → (segment, item) entry
    codes: dict[str, np.ndarray]  # per entry
    updated: np.ndarray  # per entry
    idf: _Idf


@dataclass(eq=False)
class _Idf:
    """The float32 idf of every column (``columns`` None), or of the sorted ``columns`` the
    segments hold: a small collection has no n_features-long array to fill (4 MB at the
    default size, and page faults, for every refresh of a knowledge base of a few notes)."""

    values: np.ndarray
    columns: np.ndarray | None = None

    def of(self, cols: np.ndarray) -> np.ndarray:
        """The idf of ``cols`` (columns some segment holds)."""
        if self.columns is None:
            return self.values[cols]
        return self.values[np.searchsorted(self.columns, cols)]

    def norms(self, sq: sp.csr_matrix) -> np.ndarray:
        """Row norms ``sqrt(Σ tf² · idf²)`` of the squared-tf rows ``sq``."""
        idf2 = self.values * self.values
        if self.columns is not None:  # the same mat-vec over the held columns only
            local = np.searchsorted(self.columns, sq.indices)
            sq = sp.csr_matrix((sq.data, local, sq.indptr), (sq.shape[0], self.columns.size))
        return np.sqrt(sq @ idf2)


class Collection:
    """One kind of row (chunk rows or item rows): segments, df counts, query structures."""

    def __init__(self, n_features: int, sublinear: bool) -> None:
        self.n_features = n_features
        self.sublinear = sublinear
        self.segments: list[Segment] = []
        self.df = np.zeros(n_features, np.int32)  # live rows containing each column
        self.n_live = 0
        self._where: dict[str, Segment] = {}  # item id → the one segment with its live rows
        self._meta = MetadataCodes()
        self._view: _View | None = None

    # -- mutation ------------------------------------------------------------------------

    def add(self, seg: Segment) -> None:
        """Register a segment: its live rows join df, N and the item lookup."""
        live = np.flatnonzero(~seg.dead)
        cols = seg.counts.indices
        if seg.n_dead:  # a segment loaded from disk: only its live rows count
            cols = cols[np.repeat(~seg.dead, np.diff(seg.counts.indptr))]
        bump(self.df, cols, 1)
        self.n_live += live.size
        for local in distinct(seg.row_item[live]).tolist():
            self._where[seg.item_ids[local]] = seg
        seg.codes = self._meta.codes(seg.meta)
        self.segments.append(seg)
        self._view = None

    def item_ids(self) -> set[str]:
        """Items with live rows."""
        return set(self._where)

    def kill(self, item_ids: Iterable[str]) -> int:
        """Mark every live row of these items dead; returns how many rows died."""
        cols, killed = [], 0
        for item_id in item_ids:
            seg = self._where.pop(item_id, None)
            if seg is None:
                continue
            rows = seg.live_rows_of(item_id)
            seg.dead[rows] = True
            seg.n_dead += rows.size
            killed += rows.size
            cols.append(seg.live_columns(rows))
        if killed:
            bump(self.df, np.concatenate(cols), -1)
            self.n_live -= killed
            self._view = None
        return killed

    def maintain(self, max_segments: int, dead_fraction: float) -> None:
        """Drop dead segments, rewrite mostly dead ones, merge the tail when too many."""
        kept = maintained(self.segments, max_segments, dead_fraction, self._replace, "TF-IDF")
        if kept is not None:
            self.segments = kept
            self._view = None

    def merge_all(self) -> None:
        """Rewrite every live row into a single segment (end of a full rebuild)."""
        if len(self.segments) > 1 or (self.segments and self.segments[0].n_dead):
            self.segments = [self._replace(self.segments)]
            self._view = None

    def _replace(self, segments: Sequence[Segment]) -> Segment:
        merged = merge_segments(segments, self.n_features)
        merged.codes = self._meta.codes(merged.meta)
        for item_id in merged.item_ids.tolist():
            self._where[item_id] = merged
        return merged  # same live rows: df and N do not change

    # -- querying ------------------------------------------------------------------------

    def prepare(self) -> None:
        """Build the query structures now rather than on the first query."""
        self._refresh()

    def release(self) -> None:
        """Drop the query structures; the next query rebuilds them."""
        for seg in self.segments:
            seg.postings = seg.sq = seg.norms = None
        self._view = None

    def _refresh(self) -> _View:
        """Recompute idf, row norms and per-row arrays once after a change."""
        if self._view is not None:
            return self._view
        # Only the columns some row holds need a log: the others share the df = 0 value.
        unseen = np.log(1.0 + self.n_live) + 1.0
        nnz = sum(seg.counts.nnz for seg in self.segments)
        if nnz * _SMALL < self.n_features:  # few postings: the columns held, not all of them
            indices = [seg.counts.indices for seg in self.segments]
            held = distinct(np.concatenate(indices)) if indices else np.empty(0, np.int32)
            values = np.full(held.size, unseen, np.float32)
            present = np.flatnonzero(self.df[held] > 0)
            values[present] = np.log((1.0 + self.n_live) / (1.0 + self.df[held[present]])) + 1.0
            idf = _Idf(values, held)
        else:
            values = np.full(self.n_features, unseen, np.float32)
            present = np.flatnonzero(self.df)
            values[present] = np.log((1.0 + self.n_live) / (1.0 + self.df[present])) + 1.0
            idf = _Idf(values)
        for seg in self.segments:
            if seg.postings is None:
                seg.postings = Postings.build(seg.counts, self.sublinear)
            if seg.sq is None:
                counts = seg.counts
                tf = tf_weights(counts.data, self.sublinear)
                seg.sq = sp.csr_matrix((tf * tf, counts.indices, counts.indptr), counts.shape)
            seg.norms = idf.norms(seg.sq)
        sizes = [seg.n_rows for seg in self.segments]
        entry_base = np.cumsum([0] + [seg.item_ids.size for seg in self.segments])
        segs = self.segments

        def cat(parts: list[np.ndarray], dtype: Any) -> np.ndarray:
            return np.concatenate(parts) if parts else np.empty(0, dtype)

        self._view = _View(
            offsets=np.cumsum([0, *sizes]),
            live=cat([~seg.dead for seg in segs], bool),
            norms=cat([seg.norms for seg in segs if seg.norms is not None], np.float32).astype(
                np.float64
            ),
            entry=cat(
                [
                    seg.row_item.astype(np.int64) + base
                    for seg, base in zip(segs, entry_base[:-1], strict=True)
                ],
                np.int64,
            ),
            codes={name: cat([seg.codes[name] for seg in segs], np.int32) for name in FIELDS},
            updated=cat([seg.updated for seg in segs], np.float64),
            idf=idf,
        )
        return self._view

    def search(
        self,
        cols: np.ndarray,
        counts: np.ndarray,
        top_k: int,
        min_similarity: float,
        filters: SearchFilters | None,
        per_item: int | None = None,
    ) -> list[tuple[Segment, int, float]]:
        """The best live rows for a hashed query, as (segment, row, cosine); at most
        ``per_item`` rows of one item when it is given."""
        if self.n_live == 0 or cols.size == 0:
            return []
        view = self._refresh()
        known = self.df[cols] > 0  # a term no row contains is not part of the query vector
        cols, counts = cols[known], counts[known]
        if cols.size == 0:
            return []
        idf = view.idf.of(cols).astype(np.float64)
        query = (1.0 + np.log(counts) if self.sublinear else counts) * idf
        query_norm = float(np.sqrt(query @ query))
        coef = query * idf  # document weight is tf · idf: fold the idf into the query side
        rows_parts: list[np.ndarray] = []
        weight_parts: list[np.ndarray] = []
        for seg, offset in zip(self.segments, view.offsets[:-1].tolist(), strict=True):
            post = seg.postings
            assert post is not None  # built by _refresh
            if post.cols.size == 0:
                continue
            pos = np.minimum(np.searchsorted(post.cols, cols), post.cols.size - 1)
            for j in np.flatnonzero(post.cols[pos] == cols).tolist():
                lo, hi = post.ptr[pos[j]], post.ptr[pos[j] + 1]
                rows_parts.append(post.rows[lo:hi].astype(np.int64) + offset)
                weight_parts.append(post.weights[lo:hi] * coef[j])
        if not rows_parts:
            return []
        total = int(view.offsets[-1])
        dots = np.bincount(
            np.concatenate(rows_parts), weights=np.concatenate(weight_parts), minlength=total
        )
        rows = np.flatnonzero(dots)
        rows = rows[view.live[rows]]
        if filters is not None and not filters.is_empty():
            rows = rows[self._meta.entry_mask(filters, view.codes, view.updated)[view.entry[rows]]]
            if filters.keys is not None:
                rows = rows[key_mask(self.segments, view.offsets, rows, filters.keys)]
        scores = np.clip(dots[rows] / (view.norms[rows] * query_norm), 0.0, 1.0)
        keep = (scores > 0.0) & (scores >= min_similarity)
        rows, scores = rows[keep], scores[keep]
        if per_item is None:
            rows, scores = best_rows(rows, scores, top_k)
        else:
            rows, scores = capped_best_rows(rows, scores, view.entry[rows], top_k, per_item)
        segment_of = np.searchsorted(view.offsets, rows, side="right") - 1
        return [
            (self.segments[s], int(row - view.offsets[s]), float(score))
            for s, row, score in zip(
                segment_of.tolist(), rows.tolist(), scores.tolist(), strict=True
            )
        ]
