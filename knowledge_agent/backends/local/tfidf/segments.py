"""TF-IDF segments: immutable batches of rows (term counts, keys, item metadata).

A segment holds the raw term counts of its rows as a CSR matrix, the key of every row (chunk
id, or item id for item rows) and the metadata of its items; only its dead-row mask changes
after it is built. :class:`Postings` is the per-column (CSC) view queries read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from knowledge_agent.backends.local.segments.filters import FIELDS
from knowledge_agent.backends.local.segments.items import (
    ItemGroups,
    SegmentRows,
    cat,
    checked_array,
    item_columns,
    merge_items,
    read_items,
)
from knowledge_agent.models.knowledge_item import KnowledgeItem
from knowledge_agent.search.distinct import distinct_first

__all__ = ["FIELDS", "Postings", "Segment", "build_segment", "merge_segments", "tf_weights"]


@dataclass(eq=False)
class Postings:
    """A compact CSC view of a segment: the rows and tf weights of each present column."""

    cols: np.ndarray  # sorted column ids present in the segment
    ptr: np.ndarray  # postings of cols[i] are rows[ptr[i]:ptr[i + 1]]
    rows: np.ndarray
    weights: np.ndarray  # tf weight (float32) of each posting

    @classmethod
    def build(cls, counts: sp.csr_matrix, sublinear: bool) -> Postings:
        if counts.nnz * 8 < counts.shape[1]:
            # A small segment: sort its postings rather than pass over all n_features
            # columns (a CSC index of 2**20 columns cost 6 ms for a 20-row segment).
            order = np.argsort(counts.indices, kind="stable")  # rows stay ascending
            row_of = np.repeat(np.arange(counts.shape[0], dtype=np.int32), np.diff(counts.indptr))
            rows = row_of[order]
            cols, starts = distinct_first(counts.indices[order])
            ptr = np.append(starts, counts.nnz).astype(np.int64)
            return cls(cols, ptr, rows, tf_weights(counts.data[order], sublinear))
        csc = counts.tocsc()
        cols = np.flatnonzero(np.diff(csc.indptr))
        ptr = np.append(csc.indptr[cols], csc.nnz).astype(np.int64)
        return cls(cols, ptr, csc.indices, tf_weights(csc.data, sublinear))


def tf_weights(counts: np.ndarray, sublinear: bool) -> np.ndarray:
    if not sublinear:
        return counts.astype(np.float32, copy=False)
    return (np.log(counts, dtype=np.float32) + np.float32(1.0)).astype(np.float32, copy=False)


@dataclass(eq=False)
class Segment(SegmentRows):
    """An immutable batch of rows plus a mutable dead-row mask.

    Metadata is stored per item (a segment holds all live rows of each of its items) and
    rows point at their item; the derived fields are filled in by the owning collection.
    """

    counts: sp.csr_matrix  # raw term counts, rows × n_features, float32, canonical format
    keys: np.ndarray  # str: chunk id (item id for item rows)
    chunk_index: np.ndarray  # int32
    row_item: np.ndarray  # int32 index into item_ids
    item_ids: np.ndarray  # str, unique
    meta: dict[str, np.ndarray]  # FIELDS → str per item
    updated: np.ndarray  # float64 epoch seconds per item
    dead: np.ndarray  # bool per row
    name: str | None = None  # file name, once written
    n_dead: int = 0
    codes: dict[str, np.ndarray] = field(default_factory=dict)  # FIELDS → int32 per item
    sq: sp.csr_matrix | None = None  # tf² per nonzero, for the row norms
    postings: Postings | None = None
    norms: np.ndarray | None = None
    _groups: ItemGroups | None = None

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
            **{f"meta_{name}": self.meta[name] for name in FIELDS},
        }

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], n_features: int) -> Segment:
        """Rebuild a segment from :meth:`arrays`, checking every invariant we rely on."""

        def get(name: str, kind: str) -> np.ndarray:
            return checked_array(arrays, name, kind)

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
        row_item, items = read_items(arrays)
        chunk_index = get("chunk_index", "iu").astype(np.int32, copy=False)
        if row_item.size != n_rows or chunk_index.size != n_rows:
            raise ValueError("inconsistent row or item metadata arrays")
        return cls(
            counts,
            keys,
            chunk_index,
            row_item,
            items.item_ids,
            items.meta,
            items.updated,
            np.zeros(n_rows, bool),
        )


def build_segment(
    counts: sp.csr_matrix,
    keys: list[str],
    chunk_index: list[int],
    row_item: list[int],
    items: list[KnowledgeItem],
) -> Segment:
    columns = item_columns(items)
    return Segment(
        counts=counts,
        keys=np.array(keys, dtype=str),
        chunk_index=np.array(chunk_index, dtype=np.int32),
        row_item=np.array(row_item, dtype=np.int32),
        item_ids=columns.item_ids,
        meta=columns.meta,
        updated=columns.updated,
        dead=np.zeros(len(keys), bool),
    )


def merge_segments(segments: Sequence[Segment], n_features: int) -> Segment:
    """One new segment with the live rows of ``segments``, in order."""
    parts, items = merge_items(segments)
    blocks = [p.segment.counts[p.rows] if p.segment.n_dead else p.segment.counts for p in parts]
    if blocks:
        counts = sp.vstack(blocks, format="csr", dtype=np.float32)
        counts.indices = counts.indices.astype(np.int32, copy=False)
    else:
        counts = sp.csr_matrix((0, n_features), dtype=np.float32)
    keys = cat([p.segment.keys[p.rows] for p in parts], str)
    return Segment(
        counts=counts,
        keys=keys,
        chunk_index=cat([p.segment.chunk_index[p.rows] for p in parts], np.int32),
        row_item=cat([p.row_item for p in parts], np.int32),
        item_ids=items.item_ids,
        meta=items.meta,
        updated=items.updated,
        dead=np.zeros(keys.size, bool),
    )
