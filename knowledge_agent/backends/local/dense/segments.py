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
from typing import BinaryIO

import numpy as np

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
class DenseSegment(SegmentRows):
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
    _groups: ItemGroups | None = None

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
            return checked_array(arrays, name, kind)

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
        hashes = get("hashes", "u").astype(np.uint64, copy=False)
        row_item, items = read_items(arrays)
        if vectors.shape[0] != n_rows or any(
            a.size != n_rows for a in (chunk_index, is_chunk, row_item, hashes)
        ):
            raise ValueError("inconsistent row or item metadata arrays")
        return cls(
            vectors=vectors,
            keys=keys,
            chunk_index=chunk_index,
            is_chunk=is_chunk,
            row_item=row_item,
            hashes=hashes,
            item_ids=items.item_ids,
            meta=items.meta,
            updated=items.updated,
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
    columns = item_columns(items)
    return DenseSegment(
        vectors=vectors,
        keys=np.array(keys, dtype=str),
        chunk_index=np.array(chunk_index, dtype=np.int32),
        is_chunk=np.array(is_chunk, dtype=bool),
        row_item=np.array(row_item, dtype=np.int32),
        hashes=np.array(hashes, dtype=np.uint64),
        item_ids=columns.item_ids,
        meta=columns.meta,
        updated=columns.updated,
        dead=np.zeros(len(keys), bool),
    )


def merged_arrays(segments: Sequence[DenseSegment]) -> tuple[dict[str, np.ndarray], int]:
    """The metadata arrays (as :meth:`DenseSegment.arrays`) of the live rows of
    ``segments``, in order, and their row count; the vectors are gathered separately
    (:func:`vector_blocks`), so a merge never holds two copies of them."""
    parts, items = merge_items(segments)
    arrays = {
        "keys": cat([p.segment.keys[p.rows] for p in parts], str),
        "chunk_index": cat([p.segment.chunk_index[p.rows] for p in parts], np.int32),
        "is_chunk": cat([p.segment.is_chunk[p.rows] for p in parts], bool),
        "row_item": cat([p.row_item for p in parts], np.int32),
        "hashes": cat([p.segment.hashes[p.rows] for p in parts], np.uint64),
    }
    arrays["item_ids"] = items.item_ids
    arrays["updated"] = items.updated
    for name in FIELDS:
        arrays[f"meta_{name}"] = items.meta[name]
    return arrays, int(sum(p.rows.size for p in parts))


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
