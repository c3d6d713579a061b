"""Dense segments: immutable batches of embedded rows (vectors, keys, item metadata).

A segment holds one float32 unit vector per row, the key of every row (a chunk id, or the
item id for the row of an item without chunks), a hash of the text each vector was made
from, and the metadata of its items; only its dead-row mask changes after it is built. A
segment holds every live row of each of its items, so an item's rows are replaced by
killing them in one segment.

On disk a segment is two files: ``{name}.vectors.npy`` (a plain ``(rows, dimensions)``
little-endian float32 array, opened memory-mapped) and ``{name}.meta.npz`` (everything
else). Neither is ever read with pickle allowed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import numpy as np

from knowledge_agent.models.knowledge_item import KnowledgeItem
from knowledge_agent.search.filters import to_epoch
from knowledge_agent.search.tfidf_segments import FIELDS

__all__ = [
    "FIELDS",
    "DenseSegment",
    "build_segment",
    "merged_arrays",
    "text_hash",
    "vector_blocks",
    "write_vectors",
]

_BLOCK_ROWS = 8192  # rows copied at once when vectors are gathered or streamed to a file


def text_hash(text: str) -> int:
    """A 64-bit hash of an embedded text: an unchanged text keeps its vector."""
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "little")


@dataclass(eq=False)
class DenseSegment:
    """An immutable batch of embedded rows plus a mutable dead-row mask.

    ``vectors`` is an in-memory array or a read-only memory map of the segment's file.
    Metadata is stored per item and rows point at their item.
    """

    vectors: np.ndarray  # float32 (rows, dimensions)
    keys: np.ndarray  # str: chunk id, or item id for an item row
    chunk_index: np.ndarray  # int32 (-1 for an item row)
    is_chunk: np.ndarray  # bool: a chunk row (else the row of an item without chunks)
    row_item: np.ndarray  # int32 index into item_ids
    hashes: np.ndarray  # uint64 text_hash of each row's text
    item_ids: np.ndarray  # str, unique
    meta: dict[str, np.ndarray]  # FIELDS → str per item
    updated: np.ndarray  # float64 epoch seconds per item
    dead: np.ndarray  # bool per row
    name: str | None = None  # file stem, once written
    n_dead: int = 0
    codes: dict[str, np.ndarray] = field(default_factory=dict)  # FIELDS → int32 per item
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

    def reopened(self) -> DenseSegment:
        """The same immutable arrays with a fresh dead mask and no collection state."""
        return DenseSegment(
            vectors=self.vectors,
            keys=self.keys,
            chunk_index=self.chunk_index,
            is_chunk=self.is_chunk,
            row_item=self.row_item,
            hashes=self.hashes,
            item_ids=self.item_ids,
            meta=self.meta,
            updated=self.updated,
            dead=np.zeros(self.n_rows, bool),
            name=self.name,
        )

    def arrays(self) -> dict[str, np.ndarray]:
        """What the metadata file holds (the vectors have their own file, the dead mask
        lives in the manifest)."""
        return {
            "keys": self.keys,
            "chunk_index": self.chunk_index,
            "is_chunk": self.is_chunk,
            "row_item": self.row_item,
            "hashes": self.hashes,
            "item_ids": self.item_ids,
            "updated": self.updated,
            **{f"meta_{name}": self.meta[name] for name in FIELDS},
        }

    @classmethod
    def from_arrays(
        cls, arrays: dict[str, np.ndarray], vectors: np.ndarray, dimensions: int
    ) -> DenseSegment:
        """Rebuild a segment from :meth:`arrays` and its vectors, checking every invariant
        we rely on (a ``ValueError`` names the first that fails)."""

        def get(name: str, kind: str) -> np.ndarray:
            value = arrays[name]
            if value.dtype.kind not in kind or value.ndim != 1:
                raise ValueError(f"array {name!r} has dtype {value.dtype} and {value.ndim} dims")
            return value

        if (
            vectors.ndim != 2
            or vectors.dtype.kind != "f"
            or vectors.dtype.itemsize != 4
            or vectors.shape[1] != dimensions
        ):
            raise ValueError(
                f"vectors have dtype {vectors.dtype} and shape {vectors.shape}, "
                f"not float32 (*, {dimensions})"
            )
        if not vectors.dtype.isnative:
            vectors = vectors.astype(np.float32)
        keys = get("keys", "U")
        n_rows = keys.shape[0]
        chunk_index = get("chunk_index", "iu").astype(np.int32, copy=False)
        is_chunk = get("is_chunk", "b")
        row_item = get("row_item", "iu").astype(np.int32, copy=False)
        hashes = get("hashes", "u").astype(np.uint64, copy=False)
        item_ids = get("item_ids", "U")
        updated = get("updated", "f").astype(np.float64, copy=False)
        meta = {name: get(f"meta_{name}", "U") for name in FIELDS}
        n_items = item_ids.size
        if (
            vectors.shape[0] != n_rows
            or any(a.size != n_rows for a in (chunk_index, is_chunk, row_item, hashes))
            or updated.size != n_items
            or any(value.size != n_items for value in meta.values())
            or (row_item.size and (row_item.min() < 0 or row_item.max() >= n_items))
            or np.unique(item_ids).size != n_items
        ):
            raise ValueError("inconsistent row or item metadata arrays")
        return cls(
            vectors=vectors,
            keys=keys,
            chunk_index=chunk_index,
            is_chunk=is_chunk,
            row_item=row_item,
            hashes=hashes,
            item_ids=item_ids,
            meta=meta,
            updated=updated,
            dead=np.zeros(n_rows, bool),
        )


def build_segment(
    vectors: np.ndarray,
    keys: list[str],
    chunk_index: list[int],
    is_chunk: list[bool],
    row_item: list[int],
    hashes: list[int],
    items: Sequence[KnowledgeItem],
) -> DenseSegment:
    """A new (unwritten) segment from per-row lists and the items the rows belong to."""
    meta_values = {
        "kb": [item.kb for item in items],
        "source_type": [item.source_type for item in items],
        "doc_type": [item.doc_type for item in items],
        "language": [item.language for item in items],
        "path": [item.source_uri or "" for item in items],
    }
    return DenseSegment(
        vectors=vectors,
        keys=np.array(keys, dtype=str),
        chunk_index=np.array(chunk_index, dtype=np.int32),
        is_chunk=np.array(is_chunk, dtype=bool),
        row_item=np.array(row_item, dtype=np.int32),
        hashes=np.array(hashes, dtype=np.uint64),
        item_ids=np.array([item.id for item in items], dtype=str),
        meta={name: np.array(values, dtype=str) for name, values in meta_values.items()},
        updated=np.array([to_epoch(item.updated_at) for item in items], dtype=np.float64),
        dead=np.zeros(len(keys), bool),
    )


def merged_arrays(segments: Sequence[DenseSegment]) -> tuple[dict[str, np.ndarray], int]:
    """The metadata arrays (as :meth:`DenseSegment.arrays`) of the live rows of
    ``segments``, in order, and their row count; the vectors are gathered separately
    (:func:`vector_blocks`), so a merge never holds two copies of them."""
    parts: dict[str, list[np.ndarray]] = {
        name: [] for name in ("keys", "chunk_index", "is_chunk", "row_item", "hashes")
    }
    item_ids, updated = [], []
    meta: dict[str, list[np.ndarray]] = {name: [] for name in FIELDS}
    n_items = n_rows = 0
    for seg in segments:
        live = np.flatnonzero(~seg.dead)
        if live.size == 0:
            continue
        used = np.unique(seg.row_item[live])  # items with live rows keep their metadata
        remap = np.full(seg.item_ids.size, -1, np.int32)
        remap[used] = np.arange(used.size, dtype=np.int32) + n_items
        n_items += used.size
        n_rows += live.size
        parts["keys"].append(seg.keys[live])
        parts["chunk_index"].append(seg.chunk_index[live])
        parts["is_chunk"].append(seg.is_chunk[live])
        parts["row_item"].append(remap[seg.row_item[live]])
        parts["hashes"].append(seg.hashes[live])
        item_ids.append(seg.item_ids[used])
        updated.append(seg.updated[used])
        for name in FIELDS:
            meta[name].append(seg.meta[name][used])

    def cat(values: list[np.ndarray], dtype: Any) -> np.ndarray:
        return np.concatenate(values) if values else np.empty(0, dtype)

    dtypes = {"keys": str, "chunk_index": np.int32, "is_chunk": bool, "row_item": np.int32}
    arrays = {name: cat(values, dtypes.get(name, np.uint64)) for name, values in parts.items()}
    arrays["item_ids"] = cat(item_ids, str)
    arrays["updated"] = cat(updated, np.float64)
    for name in FIELDS:
        arrays[f"meta_{name}"] = cat(meta[name], str)
    return arrays, n_rows


def vector_blocks(segments: Sequence[DenseSegment]) -> Iterator[np.ndarray]:
    """The vectors of the live rows of ``segments``, in order, a bounded block at a time."""
    for seg in segments:
        live = None if seg.n_dead == 0 else np.flatnonzero(~seg.dead)
        total = seg.n_rows if live is None else live.size
        for start in range(0, total, _BLOCK_ROWS):
            stop = min(start + _BLOCK_ROWS, total)
            yield seg.vectors[start:stop] if live is None else seg.vectors[live[start:stop]]


def write_vectors(fh: BinaryIO, blocks: Iterator[np.ndarray], n_rows: int, dimensions: int) -> None:
    """Stream ``blocks`` to ``fh`` as one ``.npy`` file of shape ``(n_rows, dimensions)``,
    exactly as ``np.save`` would write the whole array."""
    header = {
        "descr": np.lib.format.dtype_to_descr(np.dtype("<f4")),
        "fortran_order": False,
        "shape": (n_rows, dimensions),
    }
    np.lib.format.write_array_header_1_0(fh, header)
    written = 0
    for block in blocks:
        fh.write(np.ascontiguousarray(block, dtype="<f4").tobytes())
        written += block.shape[0]
    if written != n_rows:
        raise ValueError(f"wrote {written} vector rows, expected {n_rows}")
