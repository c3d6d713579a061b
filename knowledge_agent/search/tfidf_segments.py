"""TF-IDF segments: immutable batches of rows (term counts, keys, item metadata).

A segment holds the raw term counts of its rows as a CSR matrix, the key of every row (chunk
id, or item id for item rows) and the metadata of its items; only its dead-row mask changes
after it is built. :class:`Postings` is the per-column (CSC) view queries read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from knowledge_agent.models.knowledge_item import KnowledgeItem
from knowledge_agent.search.filters import to_epoch

__all__ = ["FIELDS", "Postings", "Segment", "build_segment", "merge_segments", "tf_weights"]

FIELDS = ("kb", "source_type", "doc_type", "language", "path")  # string metadata per item


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
            cols, starts = np.unique(counts.indices[order], return_index=True)
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
class Segment:
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
            **{f"meta_{name}": self.meta[name] for name in FIELDS},
        }

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], n_features: int) -> Segment:
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
        meta = {name: get(f"meta_{name}", "U") for name in FIELDS}
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


def build_segment(
    counts: sp.csr_matrix,
    keys: list[str],
    chunk_index: list[int],
    row_item: list[int],
    items: list[KnowledgeItem],
) -> Segment:
    meta_values = {
        "kb": [item.kb for item in items],
        "source_type": [item.source_type for item in items],
        "doc_type": [item.doc_type for item in items],
        "language": [item.language for item in items],
        "path": [item.source_uri or "" for item in items],
    }
    return Segment(
        counts=counts,
        keys=np.array(keys, dtype=str),
        chunk_index=np.array(chunk_index, dtype=np.int32),
        row_item=np.array(row_item, dtype=np.int32),
        item_ids=np.array([item.id for item in items], dtype=str),
        meta={name: np.array(values, dtype=str) for name, values in meta_values.items()},
        updated=np.array([to_epoch(item.updated_at) for item in items], dtype=np.float64),
        dead=np.zeros(len(keys), bool),
    )


def merge_segments(segments: Sequence[Segment], n_features: int) -> Segment:
    """One new segment with the live rows of ``segments``, in order."""
    blocks, keys, chunk_index, row_item = [], [], [], []
    item_ids, updated = [], []
    meta: dict[str, list[np.ndarray]] = {name: [] for name in FIELDS}
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
        for name in FIELDS:
            meta[name].append(seg.meta[name][used])

    def cat(parts: list[np.ndarray], dtype: Any) -> np.ndarray:
        return np.concatenate(parts) if parts else np.empty(0, dtype)

    if blocks:
        counts = sp.vstack(blocks, format="csr", dtype=np.float32)
        counts.indices = counts.indices.astype(np.int32, copy=False)
    else:
        counts = sp.csr_matrix((0, n_features), dtype=np.float32)
    keys_all = cat(keys, str)
    return Segment(
        counts=counts,
        keys=keys_all,
        chunk_index=cat(chunk_index, np.int32),
        row_item=cat(row_item, np.int32),
        item_ids=cat(item_ids, str),
        meta={name: cat(parts, str) for name, parts in meta.items()},
        updated=cat(updated, np.float64),
        dead=np.zeros(keys_all.size, bool),
    )
