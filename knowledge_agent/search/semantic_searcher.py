"""TF-IDF cosine search over chunks (R4.2), and over whole items for the fallback.

Refitting a ``TfidfVectorizer`` per update is O(corpus). Instead the feature space is fixed
(``HashingVectorizer`` over :class:`~knowledge_agent.analysis.TextAnalyzer` terms: raw counts,
no fitting) and document frequencies are counted incrementally, so an update only vectorises
its own rows::

    tf     = 1 + log(count)            (count itself when sublinear_tf is off)
    idf    = log((1 + N) / (1 + df)) + 1   (smooth idf over the N live rows; a vector, cheap)
    score  = Σ_t q_t · tf_dt · idf_t² / (‖d‖ · ‖q‖)   with q_t = tf(query count) · idf_t

This gives exactly the scores of a fresh fit over the same rows. Row norms depend on idf, so
they are recomputed lazily (one sparse mat-vec) before the first query after a change. A query
reads only the postings of its own terms (a per-segment CSC copy), then applies the filter
mask and min_similarity *before* the top-k, ties broken by row order.

Storage is log structured. Each :meth:`SemanticSearcher.update` appends one segment per
collection (chunk rows, item rows) and marks replaced rows dead; small segments are merged,
and a segment more than a quarter dead is rewritten without its dead rows. On disk::

    {index_dir}/manifest.json        format, config, applied_seq, segments + dead-row bitmaps;
                                     replaced atomically after the segments
    {index_dir}/chunks-00000007.npz  one segment: CSR term counts, row keys, item metadata
    {index_dir}/items-00000008.npz

Every file is written under a unique temporary name, fsynced, then renamed, so a reader in
another process sees either the old manifest or the new one, never a torn file. A segment file
never changes once written; a manifest names the segments of one generation.
:meth:`SemanticSearcher.refresh` notices a newer manifest (its inode, size and mtime) and loads
it, reusing the segments it already holds. Opening never writes: a directory without a
manifest is an empty index until the first update creates it. One process writes an index
directory at a time (the data folder's write lock); readers may be many.

Only ``.npz`` (loaded with ``allow_pickle=False``) and JSON are read: an index directory from
elsewhere cannot execute code.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import logging
import os
import re
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp

from knowledge_agent.analysis import TextAnalyzer
from knowledge_agent.errors import ConfigError, SearchIndexError
from knowledge_agent.models.knowledge_chunk import KnowledgeChunk
from knowledge_agent.models.knowledge_item import KnowledgeItem
from knowledge_agent.search.filters import SearchFilters, to_epoch
from knowledge_agent.search.hashing import feature_column
from knowledge_agent.search.hits import ChunkHit, ItemHit
from knowledge_agent.search.topk import best_rows

if TYPE_CHECKING:
    from sklearn.feature_extraction.text import HashingVectorizer

__all__ = ["SemanticSearcher"]

logger = logging.getLogger(__name__)

_FORMAT = "knowledge_agent.tfidf/1"
_MANIFEST = "manifest.json"
_SEGMENT_RE = re.compile(r"^(chunks|items)-\d{8}\.npz$")
_TEMP_RE = re.compile(r"^(?:(?:chunks|items)-\d{8}\.npz|manifest\.json)\.[0-9a-f]{32}\.tmp$")
_LOAD_ATTEMPTS = 5  # a writer may sweep a segment between our manifest read and its load
_KINDS = ("chunks", "items")
_FIELDS = ("kb", "source_type", "doc_type", "language", "path")  # string metadata per item
_FIT_BATCH = 2048  # rows vectorised at once by fit_chunks: bounds the texts held in memory
_PATH_CACHE_LIMIT = 64

_Pair = tuple[KnowledgeItem, Sequence[KnowledgeChunk]]


def _bump(df: np.ndarray, cols: np.ndarray, sign: int) -> None:
    """Add ``sign`` to the document frequency of every column in ``cols``."""
    if cols.size == 0:
        return
    if cols.size * 16 < df.size:  # a small batch: don't pay for a dense n_features pass
        np.add.at(df, cols, sign)
    else:
        df += sign * np.bincount(cols, minlength=df.size).astype(df.dtype)


def _merge_start(sizes: Sequence[int]) -> int:
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


# --------------------------------------------------------------------------- segments


@dataclass(eq=False)
class _Postings:
    """A compact CSC view of a segment: the rows and tf weights of each present column."""

    cols: np.ndarray  # sorted column ids present in the segment
    ptr: np.ndarray  # postings of cols[i] are rows[ptr[i]:ptr[i + 1]]
    rows: np.ndarray
    weights: np.ndarray  # tf weight (float32) of each posting

    @classmethod
    def build(cls, counts: sp.csr_matrix, sublinear: bool) -> _Postings:
        csc = counts.tocsc()
        cols = np.flatnonzero(np.diff(csc.indptr))
        ptr = np.append(csc.indptr[cols], csc.nnz).astype(np.int64)
        return cls(cols, ptr, csc.indices, _tf(csc.data, sublinear))


def _tf(counts: np.ndarray, sublinear: bool) -> np.ndarray:
    if not sublinear:
        return counts.astype(np.float32, copy=False)
    return (np.log(counts, dtype=np.float32) + np.float32(1.0)).astype(np.float32, copy=False)


@dataclass(eq=False)
class _Segment:
    """An immutable batch of rows plus a mutable dead-row mask.

    Metadata is stored per item (a segment holds all live rows of each of its items) and
    rows point at their item; the derived fields are filled in by the owning collection.
    """

    counts: sp.csr_matrix  # raw term counts, rows × n_features, float32, canonical format
    keys: np.ndarray  # str: chunk id (item id for item rows)
    chunk_index: np.ndarray  # int32
    row_item: np.ndarray  # int32 index into item_ids
    item_ids: np.ndarray  # str, unique
    meta: dict[str, np.ndarray]  # _FIELDS → str per item
    updated: np.ndarray  # float64 epoch seconds per item
    dead: np.ndarray  # bool per row
    name: str | None = None  # file name, once written
    n_dead: int = 0
    codes: dict[str, np.ndarray] = field(default_factory=dict)  # _FIELDS → int32 per item
    sq: sp.csr_matrix | None = None  # tf² per nonzero, for the row norms
    postings: _Postings | None = None
    norms: np.ndarray | None = None
    _groups: tuple[dict[str, int], np.ndarray, np.ndarray] | None = None

    def __post_init__(self) -> None:
        self.n_dead = int(self.dead.sum())

    @property
    def n_rows(self) -> int:
        return int(self.keys.shape[0])

    @property
    def n_live(self) -> int:
        return self.n_rows - self.n_dead

    def live_rows_of(self, item_id: str) -> np.ndarray:
        """Rows of ``item_id`` that are still live."""
        if self._groups is None:
            order = np.argsort(self.row_item, kind="stable")
            bounds = np.searchsorted(self.row_item[order], np.arange(self.item_ids.size + 1))
            self._groups = ({k: i for i, k in enumerate(self.item_ids.tolist())}, order, bounds)
        position, order, bounds = self._groups
        local = position.get(item_id)
        if local is None:
            return np.empty(0, np.int64)
        rows = order[bounds[local] : bounds[local + 1]]
        return rows[~self.dead[rows]]

    def live_columns(self, rows: np.ndarray) -> np.ndarray:
        """The column ids of ``rows``, concatenated (one per nonzero)."""
        indptr, indices = self.counts.indptr, self.counts.indices
        parts = [indices[indptr[r] : indptr[r + 1]] for r in rows.tolist()]
        return np.concatenate(parts) if parts else np.empty(0, np.int32)

    def arrays(self) -> dict[str, np.ndarray]:
        """What a segment file holds (the dead mask lives in the manifest)."""
        return {
            "data": self.counts.data,
            "indices": self.counts.indices,
            "indptr": self.counts.indptr,
            "keys": self.keys,
            "chunk_index": self.chunk_index,
            "row_item": self.row_item,
            "item_ids": self.item_ids,
            "updated": self.updated,
            **{f"meta_{name}": self.meta[name] for name in _FIELDS},
        }

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], n_features: int) -> _Segment:
        """Rebuild a segment from :meth:`arrays`, checking every invariant we rely on."""

        def get(name: str, kind: str, ndim: int = 1) -> np.ndarray:
            value = arrays[name]
            if value.dtype.kind not in kind or value.ndim != ndim:
                raise ValueError(f"array {name!r} has dtype {value.dtype} and {value.ndim} dims")
            return value

        data = get("data", "f").astype(np.float32, copy=False)
        indices = get("indices", "iu").astype(np.int32, copy=False)
        indptr = get("indptr", "iu").astype(np.int64, copy=False)
        keys = get("keys", "U")
        n_rows = keys.shape[0]
        if (
            indptr.size != n_rows + 1
            or data.size != indices.size
            or (indptr.size and (indptr[0] != 0 or indptr[-1] != indices.size))
            or np.any(np.diff(indptr) < 0)
            or (indices.size and (indices.min() < 0 or indices.max() >= n_features))
            or not np.all(np.isfinite(data))
            or np.any(data <= 0)
        ):
            raise ValueError("inconsistent sparse term-count arrays")
        counts = sp.csr_matrix((data, indices, indptr), shape=(n_rows, n_features))
        if not counts.has_canonical_format:
            raise ValueError("term counts are not in canonical CSR format")
        item_ids = get("item_ids", "U")
        row_item = get("row_item", "iu").astype(np.int32, copy=False)
        chunk_index = get("chunk_index", "iu").astype(np.int32, copy=False)
        updated = get("updated", "f").astype(np.float64, copy=False)
        meta = {name: get(f"meta_{name}", "U") for name in _FIELDS}
        n_items = item_ids.size
        if (
            row_item.size != n_rows
            or chunk_index.size != n_rows
            or updated.size != n_items
            or any(value.size != n_items for value in meta.values())
            or (row_item.size and (row_item.min() < 0 or row_item.max() >= n_items))
            or np.unique(item_ids).size != n_items
        ):
            raise ValueError("inconsistent row or item metadata arrays")
        return cls(
            counts, keys, chunk_index, row_item, item_ids, meta, updated, np.zeros(n_rows, bool)
        )


def _build_segment(
    counts: sp.csr_matrix,
    keys: list[str],
    chunk_index: list[int],
    row_item: list[int],
    items: list[KnowledgeItem],
) -> _Segment:
    meta_values = {
        "kb": [item.kb for item in items],
        "source_type": [item.source_type for item in items],
        "doc_type": [item.doc_type for item in items],
        "language": [item.language for item in items],
        "path": [item.source_uri or "" for item in items],
    }
    return _Segment(
        counts=counts,
        keys=np.array(keys, dtype=str),
        chunk_index=np.array(chunk_index, dtype=np.int32),
        row_item=np.array(row_item, dtype=np.int32),
        item_ids=np.array([item.id for item in items], dtype=str),
        meta={name: np.array(values, dtype=str) for name, values in meta_values.items()},
        updated=np.array([to_epoch(item.updated_at) for item in items], dtype=np.float64),
        dead=np.zeros(len(keys), bool),
    )


def _merge_segments(segments: Sequence[_Segment], n_features: int) -> _Segment:
    """One new segment with the live rows of ``segments``, in order."""
    blocks, keys, chunk_index, row_item = [], [], [], []
    item_ids, updated = [], []
    meta: dict[str, list[np.ndarray]] = {name: [] for name in _FIELDS}
    n_items = 0
    for seg in segments:
        live = np.flatnonzero(~seg.dead)
        if live.size == 0:
            continue
        used = np.unique(seg.row_item[live])  # items with live rows keep their metadata
        remap = np.full(seg.item_ids.size, -1, np.int32)
        remap[used] = np.arange(used.size, dtype=np.int32) + n_items
        n_items += used.size
        blocks.append(seg.counts[live] if seg.n_dead else seg.counts)
        keys.append(seg.keys[live])
        chunk_index.append(seg.chunk_index[live])
        row_item.append(remap[seg.row_item[live]])
        item_ids.append(seg.item_ids[used])
        updated.append(seg.updated[used])
        for name in _FIELDS:
            meta[name].append(seg.meta[name][used])

    def cat(parts: list[np.ndarray], dtype: Any) -> np.ndarray:
        return np.concatenate(parts) if parts else np.empty(0, dtype)

    if blocks:
        counts = sp.vstack(blocks, format="csr", dtype=np.float32)
        counts.indices = counts.indices.astype(np.int32, copy=False)
    else:
        counts = sp.csr_matrix((0, n_features), dtype=np.float32)
    keys_all = cat(keys, str)
    return _Segment(
        counts=counts,
        keys=keys_all,
        chunk_index=cat(chunk_index, np.int32),
        row_item=cat(row_item, np.int32),
        item_ids=cat(item_ids, str),
        meta={name: cat(parts, str) for name, parts in meta.items()},
        updated=cat(updated, np.float64),
        dead=np.zeros(keys_all.size, bool),
    )


# --------------------------------------------------------------------------- collections


class _Strings:
    """A growing table of distinct strings, so metadata filters compare small integers."""

    def __init__(self) -> None:
        self.values: list[str] = []
        self._index: dict[str, int] = {}

    def codes(self, values: np.ndarray) -> np.ndarray:
        distinct, inverse = np.unique(values, return_inverse=True)
        table = np.empty(distinct.size, np.int32)
        for i, value in enumerate(distinct.tolist()):
            code = self._index.get(value)
            if code is None:
                code = self._index[value] = len(self.values)
                self.values.append(value)
            table[i] = code
        return table[inverse.reshape(-1)]

    def lookup(self, value: str) -> int | None:
        return self._index.get(value)


@dataclass(eq=False)
class _View:
    """Per-row arrays over all segments, rebuilt lazily after a change."""

    offsets: np.ndarray  # first global row of each segment, plus the total
    live: np.ndarray
    norms: np.ndarray  # float64 row norms under the current idf
    entry: np.ndarray  # global row → (segment, item) entry
    codes: dict[str, np.ndarray]  # per entry
    updated: np.ndarray  # per entry
    idf: np.ndarray  # float32, n_features


class _Collection:
    """One kind of row (chunk rows or item rows): segments, df counts, query structures."""

    def __init__(self, n_features: int, sublinear: bool) -> None:
        self.n_features = n_features
        self.sublinear = sublinear
        self.segments: list[_Segment] = []
        self.df = np.zeros(n_features, np.int32)  # live rows containing each column
        self.n_live = 0
        self._where: dict[str, _Segment] = {}  # item id → the one segment with its live rows
        self._strings = {name: _Strings() for name in _FIELDS}
        self._path_ok: dict[tuple[str | None, str | None], np.ndarray] = {}
        self._view: _View | None = None

    # -- mutation ------------------------------------------------------------------------

    def add(self, seg: _Segment) -> None:
        """Register a segment: its live rows join df, N and the item lookup."""
        live = np.flatnonzero(~seg.dead)
        cols = seg.counts.indices
        if seg.n_dead:  # a segment loaded from disk: only its live rows count
            cols = cols[np.repeat(~seg.dead, np.diff(seg.counts.indptr))]
        _bump(self.df, cols, 1)
        self.n_live += live.size
        for local in np.unique(seg.row_item[live]).tolist():
            self._where[seg.item_ids[local]] = seg
        seg.codes = {name: self._strings[name].codes(seg.meta[name]) for name in _FIELDS}
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
            _bump(self.df, np.concatenate(cols), -1)
            self.n_live -= killed
            self._view = None
        return killed

    def maintain(self, max_segments: int, dead_fraction: float) -> None:
        """Drop dead segments, rewrite mostly dead ones, merge the tail when too many."""
        kept: list[_Segment] = []
        for seg in self.segments:
            if seg.n_live == 0:
                continue
            if seg.n_dead > dead_fraction * seg.n_rows:
                logger.info(
                    "compacting a TF-IDF segment: %d of %d rows dead", seg.n_dead, seg.n_rows
                )
                seg = self._replace([seg])
            kept.append(seg)
        if len(kept) > max(max_segments, 1):
            start = _merge_start([seg.n_rows for seg in kept])
            logger.debug("merging %d TF-IDF segments", len(kept) - start)
            kept[start:] = [self._replace(kept[start:])]
        if len(kept) != len(self.segments) or any(
            a is not b for a, b in zip(kept, self.segments, strict=True)
        ):
            self.segments = kept
            self._view = None

    def merge_all(self) -> None:
        """Rewrite every live row into a single segment (end of a full rebuild)."""
        if len(self.segments) > 1 or (self.segments and self.segments[0].n_dead):
            self.segments = [self._replace(self.segments)]
            self._view = None

    def _replace(self, segments: Sequence[_Segment]) -> _Segment:
        merged = _merge_segments(segments, self.n_features)
        merged.codes = {name: self._strings[name].codes(merged.meta[name]) for name in _FIELDS}
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
        idf = (np.log((1.0 + self.n_live) / (1.0 + self.df)) + 1.0).astype(np.float32)
        idf2 = idf * idf
        for seg in self.segments:
            if seg.postings is None:
                seg.postings = _Postings.build(seg.counts, self.sublinear)
            if seg.sq is None:
                counts = seg.counts
                tf = _tf(counts.data, self.sublinear)
                seg.sq = sp.csr_matrix((tf * tf, counts.indices, counts.indptr), counts.shape)
            seg.norms = np.sqrt(seg.sq @ idf2)
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
            codes={name: cat([seg.codes[name] for seg in segs], np.int32) for name in _FIELDS},
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
    ) -> list[tuple[_Segment, int, float]]:
        """The best live rows for a hashed query, as (segment, row, cosine)."""
        if self.n_live == 0 or cols.size == 0:
            return []
        view = self._refresh()
        known = self.df[cols] > 0  # a term no row contains is not part of the query vector
        cols, counts = cols[known], counts[known]
        if cols.size == 0:
            return []
        idf = view.idf[cols].astype(np.float64)
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
            rows = rows[self._entry_mask(filters, view)[view.entry[rows]]]
        scores = np.clip(dots[rows] / (view.norms[rows] * query_norm), 0.0, 1.0)
        keep = (scores > 0.0) & (scores >= min_similarity)
        rows, scores = best_rows(rows[keep], scores[keep], top_k)
        segment_of = np.searchsorted(view.offsets, rows, side="right") - 1
        return [
            (self.segments[s], int(row - view.offsets[s]), float(score))
            for s, row, score in zip(
                segment_of.tolist(), rows.tolist(), scores.tolist(), strict=True
            )
        ]

    def _entry_mask(self, filters: SearchFilters, view: _View) -> np.ndarray:
        """Which (segment, item) entries pass the filters: AND of every field."""
        mask = np.ones(view.updated.size, bool)
        for name in ("kb", "source_type", "doc_type", "language"):
            allowed = getattr(filters, name)
            if allowed:
                table = self._strings[name]
                codes = [code for code in map(table.lookup, allowed) if code is not None]
                mask &= np.isin(view.codes[name], np.array(codes, np.int32))
        if filters.path_prefix is not None or filters.path_glob is not None:
            mask &= self._paths_matching(filters)[view.codes["path"]]
        # Same comparisons as SearchFilters.matches_time, vectorised over the entries.
        if filters.updated_after is not None:
            mask &= view.updated >= to_epoch(filters.updated_after)
        if filters.updated_before is not None:
            mask &= view.updated <= to_epoch(filters.updated_before)
        return mask

    def _paths_matching(self, filters: SearchFilters) -> np.ndarray:
        """``matches_path`` of every distinct path, evaluated once per path and remembered."""
        key = (filters.path_prefix, filters.path_glob)
        paths = self._strings["path"].values
        known = self._path_ok.get(key)
        done = 0 if known is None else known.size
        if known is None or done < len(paths):
            fresh = np.fromiter(
                (filters.matches_path(path) for path in paths[done:]), bool, len(paths) - done
            )
            known = fresh if known is None else np.concatenate([known, fresh])
            if len(self._path_ok) >= _PATH_CACHE_LIMIT:
                self._path_ok.clear()
            self._path_ok[key] = known
        return known


# --------------------------------------------------------------------------- the searcher


class SemanticSearcher:
    """TF-IDF cosine search over chunk rows and item rows, updated without refitting.

    ``index_dir=None`` keeps everything in memory; otherwise the state lives in that
    directory (created by the first update) and is loaded on open. A directory that cannot
    be read, or was written with another ``n_features``, ``include_title``,
    ``include_heading`` or analyzer configuration, raises :class:`SearchIndexError`:
    rebuild it from SQLite.
    Thread-safe; one process writes a directory at a time, others :meth:`refresh`.
    """

    #: more segments than this per collection triggers a merge of the newest ones
    max_segments: int = 16
    #: a segment with more dead rows than this fraction is rewritten without them
    compact_dead_fraction: float = 0.25

    def __init__(
        self,
        index_dir: str | os.PathLike[str] | None = None,
        analyzer: TextAnalyzer | None = None,
        *,
        n_features: int = 2**20,
        sublinear_tf: bool = True,
        include_title: bool = False,
        include_heading: bool = True,
    ) -> None:
        if isinstance(n_features, bool) or not isinstance(n_features, int):
            raise ConfigError(f"n_features must be an integer, got {n_features!r}")
        if not 1 <= n_features < 2**31:
            raise ConfigError(f"n_features must be between 1 and 2**31 - 1, got {n_features}")
        if analyzer is not None and not isinstance(analyzer, TextAnalyzer):
            raise ConfigError(f"analyzer must be a TextAnalyzer, got {type(analyzer).__name__}")
        self.analyzer = analyzer if analyzer is not None else TextAnalyzer()
        self.n_features = n_features
        self.sublinear_tf = bool(sublinear_tf)
        self.include_title = bool(include_title)
        self.include_heading = bool(include_heading)
        self.index_dir = None if index_dir is None else Path(index_dir)
        self._lock = threading.RLock()
        self._closed = False
        self._applied_seq = 0
        self._next_file = 1
        self._vectorizer: HashingVectorizer | None = None  # built on first indexing
        self._collections = self._empty_collections()
        self._on_disk: tuple[int, int, int] | None = None  # the manifest this state reflects
        if self.index_dir is not None:
            self._load()

    def _hashing(self, analyzer: Any) -> HashingVectorizer:
        # Imported here: scikit-learn takes a second to import, and opening a knowledge base
        # or answering a query does not need it.
        from sklearn.feature_extraction.text import HashingVectorizer

        return HashingVectorizer(
            analyzer=analyzer,
            token_pattern=None,  # unused with a callable analyzer; None avoids a warning
            n_features=self.n_features,
            alternate_sign=False,
            norm=None,
            dtype=np.float32,
        )

    def _empty_collections(self) -> dict[str, _Collection]:
        return {kind: _Collection(self.n_features, self.sublinear_tf) for kind in _KINDS}

    # -- lifecycle -----------------------------------------------------------------------

    def close(self) -> None:
        """Release the in-memory index; everything is already on disk. Idempotent."""
        with self._lock:
            self._closed = True
            self._collections = self._empty_collections()

    def __enter__(self) -> SemanticSearcher:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise SearchIndexError("the TF-IDF index is closed")

    # -- updates -------------------------------------------------------------------------

    def update(self, upserts: Sequence[_Pair] = (), deletes: Iterable[str] = ()) -> None:
        """Replace the rows of each upserted item, drop the rows of each deleted item id.

        Only the new rows are vectorised. Replaying an update is harmless; an id both
        upserted and deleted in one call ends up deleted. One call is one persisted batch.
        """
        with self._lock:
            self._check_open()
            started = time.perf_counter()
            if not self._apply(self._collections, upserts, deletes):
                return
            for collection in self._collections.values():
                collection.maintain(self.max_segments, self.compact_dead_fraction)
            self._persist()
            logger.debug("TF-IDF update applied in %.1f ms", (time.perf_counter() - started) * 1e3)

    def update_chunks_for_item(self, item: KnowledgeItem, chunks: Sequence[KnowledgeChunk]) -> None:
        """Replace one item's rows: ``update(upserts=[(item, chunks)])``."""
        self.update(upserts=[(item, chunks)])

    def remove_chunks_for_item(self, item_id: str) -> None:
        """Drop one item's rows: ``update(deletes=[item_id])``."""
        self.update(deletes=[item_id])

    def fit_chunks(self, pairs: Iterable[_Pair]) -> int:
        """Rebuild from scratch, streaming ``pairs`` in batches; returns the chunk count.

        The old index stays in place until the new one is complete. ``applied_seq`` is reset
        to 0: call :meth:`set_applied_seq` with the journal position the data reflects.
        """
        with self._lock:
            self._check_open()
            started = time.perf_counter()
            # Memory: the old rows stay until the new ones are complete, their query
            # structures (as big again) need not.
            for collection in self._collections.values():
                collection.release()
            fresh = self._empty_collections()
            batch: list[_Pair] = []
            rows = 0
            for item, chunks in pairs:
                chunks = list(chunks)
                batch.append((item, chunks))
                rows += len(chunks) + 1
                if rows >= _FIT_BATCH:
                    self._apply(fresh, batch, ())
                    batch, rows = [], 0
            if batch:
                self._apply(fresh, batch, ())
            for collection in fresh.values():
                collection.merge_all()
            self._collections = fresh  # frees the old rows before the new query structures
            for collection in fresh.values():
                collection.prepare()  # a rebuild is slow anyway: spare the first query
            self._applied_seq = 0
            self._persist()
            count = fresh["chunks"].n_live
            logger.info(
                "TF-IDF index rebuilt: %d chunks, %d items in %.1f s",
                count,
                fresh["items"].n_live,
                time.perf_counter() - started,
            )
            return count

    def _apply(
        self,
        collections: dict[str, _Collection],
        upserts: Iterable[_Pair],
        deletes: Iterable[str],
    ) -> bool:
        """Vectorise the new rows, then kill the replaced ones and add the new segments.

        Vectorising first means an exception (a bad chunk, the analyzer) changes nothing.
        Returns whether any row was added or removed.
        """
        latest: dict[str, tuple[KnowledgeItem, list[KnowledgeChunk]]] = {}
        for item, chunks in upserts:
            latest.pop(item.id, None)  # the last version of an item wins, in its position
            latest[item.id] = (item, list(chunks))
        gone = [deletes] if isinstance(deletes, str) else list(deletes)
        for item_id in gone:
            latest.pop(item_id, None)
        chunk_segment = self._chunk_segment(list(latest.values()))
        item_segment = self._item_segment([item for item, _ in latest.values()])
        changed = item_segment is not None
        for kind, segment in (("chunks", chunk_segment), ("items", item_segment)):
            collection = collections[kind]
            changed = collection.kill([*latest, *gone]) > 0 or changed
            if segment is not None:
                collection.add(segment)
        return changed

    def _chunk_segment(
        self, pairs: list[tuple[KnowledgeItem, list[KnowledgeChunk]]]
    ) -> _Segment | None:
        texts: list[str] = []
        keys: list[str] = []
        chunk_index: list[int] = []
        row_item: list[int] = []
        items: list[KnowledgeItem] = []
        for item, chunks in pairs:
            if not chunks:
                continue
            title = item.title if self.include_title else ""
            for chunk in chunks:
                heading = chunk.heading if self.include_heading else ""
                texts.append("\n".join(part for part in (title, heading, chunk.content) if part))
                keys.append(chunk.id)
                chunk_index.append(chunk.chunk_index)
                row_item.append(len(items))
            items.append(item)
        if not texts:
            return None
        return _build_segment(self._vectorize(texts), keys, chunk_index, row_item, items)

    def _item_segment(self, items: list[KnowledgeItem]) -> _Segment | None:
        if not items:
            return None
        texts = ["\n".join(part for part in (item.title, item.content) if part) for item in items]
        keys = [item.id for item in items]
        return _build_segment(
            self._vectorize(texts), keys, [0] * len(items), list(range(len(items))), items
        )

    def _vectorize(self, texts: list[str]) -> sp.csr_matrix:
        if self._vectorizer is None:
            self._vectorizer = self._hashing(self.analyzer)
        counts = self._vectorizer.transform(texts)
        counts.sum_duplicates()  # canonical rows: df counts each column once per row
        counts.indices = counts.indices.astype(np.int32, copy=False)
        return counts

    # -- queries -------------------------------------------------------------------------

    def search_chunks(
        self,
        terms: Sequence[str],
        top_k: int,
        min_similarity: float = 0.0,
        filters: SearchFilters | None = None,
    ) -> list[ChunkHit]:
        """The ``top_k`` chunks most similar to the analysed query ``terms``, best first."""
        with self._lock:
            self._check_open()
            found = self._search("chunks", terms, top_k, min_similarity, filters)
            return [
                ChunkHit(
                    chunk_id=str(seg.keys[row]),
                    item_id=str(seg.item_ids[seg.row_item[row]]),
                    chunk_index=int(seg.chunk_index[row]),
                    score=score,
                )
                for seg, row, score in found
            ]

    def search_items(
        self,
        terms: Sequence[str],
        top_k: int,
        min_similarity: float = 0.0,
        filters: SearchFilters | None = None,
    ) -> list[ItemHit]:
        """The ``top_k`` whole items (title + content) most similar to ``terms``."""
        with self._lock:
            self._check_open()
            found = self._search("items", terms, top_k, min_similarity, filters)
            return [ItemHit(item_id=str(seg.keys[row]), score=score) for seg, row, score in found]

    def _search(
        self,
        kind: str,
        terms: Sequence[str],
        top_k: int,
        min_similarity: float,
        filters: SearchFilters | None,
    ) -> list[tuple[_Segment, int, float]]:
        if top_k <= 0:
            return []
        if terms is None:
            return []
        if isinstance(terms, str):  # a bare string is one term, not a list of characters
            terms = [terms]
        clean = [term for term in terms if isinstance(term, str) and term]
        if not clean:
            return []
        # The same columns as the indexing vectorizer, without importing it (hashing.py).
        frequency = Counter(feature_column(term, self.n_features) for term in clean)
        cols = np.array(sorted(frequency), dtype=np.int64)
        counts = np.array([frequency[col] for col in cols], dtype=np.float64)
        threshold = float(min_similarity) if min_similarity == min_similarity else 0.0  # NaN
        return self._collections[kind].search(cols, counts, int(top_k), threshold, filters)

    # -- state ---------------------------------------------------------------------------

    def has_chunks(self) -> bool:
        """Whether any chunk row is indexed."""
        return self.chunk_count() > 0

    def chunk_count(self) -> int:
        """Live chunk rows."""
        with self._lock:
            self._check_open()
            return self._collections["chunks"].n_live

    def item_count(self) -> int:
        """Live item rows."""
        with self._lock:
            self._check_open()
            return self._collections["items"].n_live

    def indexed_item_ids(self) -> set[str]:
        """The id of every item with a live item row."""
        with self._lock:
            self._check_open()
            return self._collections["items"].item_ids()

    @property
    def applied_seq(self) -> int:
        """The storage journal position this index reflects."""
        with self._lock:
            return self._applied_seq

    def set_applied_seq(self, seq: int) -> None:
        """Record (and persist) the journal position the index now reflects."""
        if isinstance(seq, bool) or not isinstance(seq, int) or seq < 0:
            raise ConfigError(f"applied_seq must be a non-negative integer, got {seq!r}")
        with self._lock:
            self._check_open()
            if seq != self._applied_seq:
                self._applied_seq = seq
                self._persist()

    # -- persistence ---------------------------------------------------------------------

    def _config(self) -> dict[str, Any]:
        return {
            "n_features": self.n_features,
            "sublinear_tf": self.sublinear_tf,
            "include_title": self.include_title,
            "include_heading": self.include_heading,
            "analyzer": self.analyzer.config.to_dict(),
        }

    def _persist(self) -> None:
        """Write unwritten segments, then the manifest, then sweep files no longer named.

        Each file goes to a unique temporary name, is fsynced, then renamed into place.
        """
        if self.index_dir is None:
            return
        directory = self.index_dir
        path = directory
        try:
            directory.mkdir(parents=True, exist_ok=True)
            entries: dict[str, list[dict[str, Any]]] = {}
            for kind, collection in self._collections.items():
                entries[kind] = []
                for seg in collection.segments:
                    if seg.name is None:
                        name = f"{kind}-{self._next_file:08d}.npz"
                        self._next_file += 1
                        path = directory / name
                        _write_atomically(path, lambda fh, seg=seg: np.savez(fh, **seg.arrays()))
                        seg.name = name  # only once complete: a failed write is retried
                    dead = base64.b64encode(np.packbits(seg.dead).tobytes()).decode("ascii")
                    entries[kind].append({"file": seg.name, "rows": seg.n_rows, "dead": dead})
            manifest = {
                "format": _FORMAT,
                "config": self._config(),
                "applied_seq": self._applied_seq,
                "next_file": self._next_file,
                "segments": entries,
            }
            data = json.dumps(manifest, separators=(",", ":")).encode("utf-8")
            path = directory / _MANIFEST
            _write_atomically(path, lambda fh: fh.write(data))
            _fsync_directory(directory)
            self._on_disk = _signature(path)
        except (OSError, ValueError) as exc:
            raise SearchIndexError(f"cannot write TF-IDF index {path}: {exc}") from exc
        self._sweep({entry["file"] for kind in entries.values() for entry in kind})

    def _sweep(self, referenced: set[str]) -> None:
        """Delete segment files the manifest no longer names (merged, or left by a crash)
        and temporary files of writes that never completed (only writers sweep)."""
        assert self.index_dir is not None
        try:
            names = os.listdir(self.index_dir)
        except OSError as exc:
            logger.warning("cannot list TF-IDF index %s: %s", self.index_dir, exc)
            return
        for name in names:
            stale = _SEGMENT_RE.match(name) and name not in referenced
            if stale or _TEMP_RE.match(name):
                try:
                    os.unlink(self.index_dir / name)
                except OSError as exc:  # harmless: it is swept again after the next write
                    logger.warning("cannot remove %s: %s", self.index_dir / name, exc)

    def refresh(self) -> bool:
        """Load the manifest on disk if another process replaced it since; True if so.

        Segments already held are reused (they never change once written). An unreadable
        new generation raises :class:`SearchIndexError` and leaves the current state alone.
        """
        if self.index_dir is None:
            return False
        with self._lock:
            self._check_open()
            if _signature(self.index_dir / _MANIFEST) == self._on_disk:
                return False
            self._load()
            return True

    def _load(self) -> None:
        """Read the current manifest and its segments into a fresh state.

        A segment swept by a writer between reading the manifest and loading the segment
        (a newer generation replaced it) makes the load start again from the new manifest.
        """
        assert self.index_dir is not None
        for attempt in range(_LOAD_ATTEMPTS):
            try:
                self._load_once()
                return
            except _SegmentGone:
                if attempt == _LOAD_ATTEMPTS - 1:
                    raise SearchIndexError(
                        f"TF-IDF index {self.index_dir} kept changing while it was read"
                    ) from None
                time.sleep(0.01 * (attempt + 1))

    def _load_once(self) -> None:
        assert self.index_dir is not None
        path = self.index_dir / _MANIFEST
        try:
            signature = _signature(path)
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            try:
                names = os.listdir(self.index_dir)
            except FileNotFoundError:
                names = []
            except OSError as exc:
                raise SearchIndexError(f"cannot read TF-IDF index {self.index_dir}: {exc}") from exc
            if any(_SEGMENT_RE.match(name) for name in names):
                raise SearchIndexError(f"TF-IDF index {path} is missing") from None
            # A new index: empty until the first update writes it.
            self._collections = self._empty_collections()
            self._applied_seq, self._next_file, self._on_disk = 0, 1, None
            return
        except (OSError, ValueError) as exc:
            raise SearchIndexError(f"cannot read TF-IDF index {path}: {exc}") from exc
        try:
            manifest = json.loads(text)
            _check(isinstance(manifest, dict) and manifest.get("format") == _FORMAT, "format")
            stored = manifest["config"]
            _check(isinstance(stored, dict), "config")
            wanted = json.loads(json.dumps(self._config()))
            for key, value in wanted.items():
                if key != "sublinear_tf" and stored.get(key) != value:  # counts are raw: free
                    raise SearchIndexError(
                        f"TF-IDF index {path} was built with {key}={stored.get(key)!r}, "
                        f"not {value!r}: rebuild it"
                    )
            seq, next_file = manifest["applied_seq"], manifest["next_file"]
            for value in (seq, next_file):
                _check(type(value) is int and value >= 0, "applied_seq/next_file")
            segments = manifest["segments"]
            _check(isinstance(segments, dict), "segments")
        except SearchIndexError:
            raise
        except (ValueError, KeyError, TypeError) as exc:
            raise SearchIndexError(f"corrupt TF-IDF index {path}: {exc}") from exc
        held = {
            seg.name: seg
            for collection in self._collections.values()
            for seg in collection.segments
            if seg.name is not None
        }
        collections = self._empty_collections()
        for kind in _KINDS:
            entries = segments.get(kind, [])
            if not isinstance(entries, list):
                raise SearchIndexError(f"corrupt TF-IDF index {path}: segments.{kind}")
            for entry in entries:
                collections[kind].add(self._read_segment(entry, held))
        self._collections = collections
        self._applied_seq = seq
        self._next_file = next_file
        self._on_disk = signature
        logger.debug(
            "opened TF-IDF index %s: %d chunks, %d items",
            self.index_dir,
            collections["chunks"].n_live,
            collections["items"].n_live,
        )

    def _read_segment(self, entry: Any, held: dict[str, _Segment]) -> _Segment:
        """One manifest entry as a segment: a held one shares its arrays, else the file."""
        assert self.index_dir is not None
        path = self.index_dir / _MANIFEST
        try:
            name = entry["file"]
            # A name from the manifest never leaves the directory (no "../", no absolute path).
            _check(isinstance(name, str) and _SEGMENT_RE.match(name) is not None, "file name")
            path = self.index_dir / name
            old = held.get(name)
            if old is not None:
                # Immutable arrays and idf-free query structures carry over; the dead mask,
                # norms and string codes belong to the new state.
                segment = replace(old, dead=np.zeros(old.n_rows, bool), norms=None, codes={})
            else:
                try:
                    with np.load(path, allow_pickle=False) as npz:
                        arrays = {key: npz[key] for key in npz.files}
                except FileNotFoundError:
                    raise _SegmentGone(name) from None
                segment = _Segment.from_arrays(arrays, self.n_features)
            rows = entry["rows"]
            _check(type(rows) is int and rows == segment.n_rows, "row count")
            bits = np.frombuffer(base64.b64decode(entry["dead"], validate=True), np.uint8)
            _check(bits.size == (rows + 7) // 8, "dead-row bitmap")
            segment.dead = np.unpackbits(bits, count=rows).astype(bool)
            segment.n_dead = int(segment.dead.sum())
        except (SearchIndexError, _SegmentGone):
            raise
        except (OSError, ValueError, KeyError, TypeError, EOFError, binascii.Error) as exc:
            raise SearchIndexError(f"cannot read TF-IDF index {path}: {exc}") from exc
        except Exception as exc:  # zipfile, numpy and scipy have more ways to reject a bad file
            raise SearchIndexError(f"corrupt TF-IDF index {path}: {exc}") from exc
        segment.name = name
        return segment


class _SegmentGone(Exception):
    """A segment named by the manifest was deleted by a writer before it could be read."""


def _signature(path: Path) -> tuple[int, int, int] | None:
    """What identifies one version of a file that is only ever replaced by rename."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def _write_atomically(path: Path, write: Any) -> None:
    """``write(fh)`` into a unique temporary file beside ``path``, fsync, rename over it."""
    tmp = path.with_name(f"{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        with open(tmp, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())  # never rename an incomplete file into place
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _check(condition: bool, what: str) -> None:
    if not condition:
        raise ValueError(f"invalid {what}")


def _fsync_directory(directory: Path) -> None:
    """Make a rename durable (POSIX); a no-op where directories cannot be opened."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
