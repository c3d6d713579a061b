"""The item side of a segment, shared by the TF-IDF and dense segments.

A segment stores the metadata of its items once per item (:data:`FIELDS` strings and the
update time) and each row points at its item (``row_item``); a segment holds every live row
of each of its items, so an item's rows are found, killed and merged within one segment.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from knowledge_agent.backends.local.segments.filters import FIELDS
from knowledge_agent.models.knowledge_item import KnowledgeItem
from knowledge_agent.search.distinct import distinct
from knowledge_agent.search.filters import to_epoch

__all__ = [
    "ItemColumns",
    "ItemGroups",
    "LiveRows",
    "SegmentRows",
    "cat",
    "checked_array",
    "item_columns",
    "merge_items",
    "read_items",
]


class _Segment(Protocol):
    row_item: np.ndarray
    item_ids: np.ndarray
    meta: dict[str, np.ndarray]
    updated: np.ndarray
    dead: np.ndarray


@dataclass
class ItemColumns:
    """Per-item arrays of a segment: ids (unique), ``FIELDS`` strings, epoch seconds."""

    item_ids: np.ndarray
    meta: dict[str, np.ndarray]
    updated: np.ndarray


@dataclass
class LiveRows:
    """The live rows of one segment being merged, and their item in the merged segment."""

    segment: Any
    rows: np.ndarray
    row_item: np.ndarray


def cat(parts: list[np.ndarray], dtype: Any) -> np.ndarray:
    """``np.concatenate``, or an empty array of ``dtype`` for no parts."""
    return np.concatenate(parts) if parts else np.empty(0, dtype)


def item_columns(items: Sequence[KnowledgeItem]) -> ItemColumns:
    """The per-item arrays of a new segment of ``items``' rows."""
    meta_values = {
        "kb": [item.kb for item in items],
        "source_type": [item.source_type for item in items],
        "doc_type": [item.doc_type for item in items],
        "language": [item.language for item in items],
        "path": [item.source_uri or "" for item in items],
    }
    return ItemColumns(
        item_ids=np.array([item.id for item in items], dtype=str),
        meta={name: np.array(values, dtype=str) for name, values in meta_values.items()},
        updated=np.array([to_epoch(item.updated_at) for item in items], dtype=np.float64),
    )


def checked_array(arrays: dict[str, np.ndarray], name: str, kind: str) -> np.ndarray:
    """``arrays[name]``, refused unless one-dimensional of a dtype kind in ``kind``."""
    value = arrays[name]
    if value.dtype.kind not in kind or value.ndim != 1:
        raise ValueError(f"array {name!r} has dtype {value.dtype} and {value.ndim} dims")
    return value


def read_items(arrays: dict[str, np.ndarray]) -> tuple[np.ndarray, ItemColumns]:
    """The ``row_item`` and per-item arrays of a segment file's ``arrays``, checked against
    each other (the caller checks ``row_item`` against its own rows)."""
    items = ItemColumns(
        item_ids=checked_array(arrays, "item_ids", "U"),
        meta={name: checked_array(arrays, f"meta_{name}", "U") for name in FIELDS},
        updated=checked_array(arrays, "updated", "f").astype(np.float64, copy=False),
    )
    row_item = checked_array(arrays, "row_item", "iu").astype(np.int32, copy=False)
    n_items = items.item_ids.size
    if (
        items.updated.size != n_items
        or any(value.size != n_items for value in items.meta.values())
        or (row_item.size and (row_item.min() < 0 or row_item.max() >= n_items))
        or distinct(items.item_ids).size != n_items
    ):
        raise ValueError("inconsistent row or item metadata arrays")
    return row_item, items


def merge_items(segments: Sequence[_Segment]) -> tuple[list[LiveRows], ItemColumns]:
    """The live rows of ``segments``, in order, each pointed at its item among the items
    they keep (an item without live rows is dropped with its metadata)."""
    parts: list[LiveRows] = []
    item_ids, updated = [], []
    meta: dict[str, list[np.ndarray]] = {name: [] for name in FIELDS}
    n_items = 0
    for seg in segments:
        live = np.flatnonzero(~seg.dead)
        if live.size == 0:
            continue
        used = distinct(seg.row_item[live])  # items with live rows keep their metadata
        remap = np.full(seg.item_ids.size, -1, np.int32)
        remap[used] = np.arange(used.size, dtype=np.int32) + n_items
        n_items += used.size
        parts.append(LiveRows(seg, live, remap[seg.row_item[live]]))
        item_ids.append(seg.item_ids[used])
        updated.append(seg.updated[used])
        for name in FIELDS:
            meta[name].append(seg.meta[name][used])
    columns = ItemColumns(
        item_ids=cat(item_ids, str),
        meta={name: cat(values, str) for name, values in meta.items()},
        updated=cat(updated, np.float64),
    )
    return parts, columns


class ItemGroups:
    """The rows of each item of a segment, grouped once (a segment never gains rows)."""

    def __init__(self, row_item: np.ndarray, item_ids: np.ndarray) -> None:
        self._order = np.argsort(row_item, kind="stable")
        self._bounds = np.searchsorted(row_item[self._order], np.arange(item_ids.size + 1))
        self._position = {k: i for i, k in enumerate(item_ids.tolist())}

    def live_rows(self, item_id: str, dead: np.ndarray) -> np.ndarray:
        """Rows of ``item_id`` that are not ``dead``."""
        local = self._position.get(item_id)
        if local is None:
            return np.empty(0, np.int64)
        rows = self._order[self._bounds[local] : self._bounds[local + 1]]
        return rows[~dead[rows]]


class SegmentRows:
    """Row counts and the rows of an item, for a segment dataclass with ``keys`` (one per
    row), ``row_item``, ``item_ids``, a ``dead`` mask, ``n_dead`` and ``_groups``."""

    keys: np.ndarray
    row_item: np.ndarray
    item_ids: np.ndarray
    dead: np.ndarray
    n_dead: int
    _groups: ItemGroups | None

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
            self._groups = ItemGroups(self.row_item, self.item_ids)
        return self._groups.live_rows(item_id, self.dead)
