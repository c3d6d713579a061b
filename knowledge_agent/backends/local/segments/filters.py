"""Filters as masks over item entries, shared by the TF-IDF and dense collections.

A segment stores its items' string metadata (:data:`FIELDS`); a collection turns them into
small integer codes through one :class:`MetadataCodes` per collection, so a filter is a few
vectorised comparisons over the (segment, item) entries instead of a Python loop per row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from knowledge_agent.search.distinct import distinct_inverse
from knowledge_agent.search.filters import SearchFilters, to_epoch

__all__ = ["FIELDS", "MetadataCodes", "key_mask"]

FIELDS = ("kb", "source_type", "doc_type", "language", "path")  # string metadata per item

_PATH_CACHE_LIMIT = 64  # distinct path filters whose verdicts per path are remembered


class _Strings:
    """A growing table of distinct strings, so metadata filters compare small integers."""

    def __init__(self) -> None:
        self.values: list[str] = []
        self._index: dict[str, int] = {}

    def codes(self, values: np.ndarray) -> np.ndarray:
        found, inverse = distinct_inverse(values)
        table = np.empty(found.size, np.int32)
        for i, value in enumerate(found.tolist()):
            code = self._index.get(value)
            if code is None:
                code = self._index[value] = len(self.values)
                self.values.append(value)
            table[i] = code
        return table[inverse]

    def lookup(self, value: str) -> int | None:
        return self._index.get(value)


class MetadataCodes:
    """The string tables of one collection's item metadata, and the filter masks over them."""

    def __init__(self) -> None:
        self._strings = {name: _Strings() for name in FIELDS}
        self._path_ok: dict[tuple[str | None, str | None], np.ndarray] = {}

    def codes(self, meta: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The int32 code of every item's value of each field (``FIELDS`` → str per item)."""
        return {name: self._strings[name].codes(meta[name]) for name in FIELDS}

    def entry_mask(
        self, filters: SearchFilters, codes: dict[str, np.ndarray], updated: np.ndarray
    ) -> np.ndarray:
        """Which entries (``codes`` and ``updated`` per entry) pass the filters:
        ``SearchFilters.matches``, vectorised over the entries (an AND of every field)."""
        mask = np.ones(updated.size, bool)
        for name in ("kb", "source_type", "doc_type", "language"):
            allowed = getattr(filters, name)
            if allowed:
                table = self._strings[name]
                found = [code for code in map(table.lookup, allowed) if code is not None]
                mask &= np.isin(codes[name], np.array(found, np.int32))
        if filters.path_prefix or filters.path_glob:
            mask &= self._paths_matching(filters)[codes["path"]]
        # Same comparisons as SearchFilters.matches_time, vectorised over the entries.
        if filters.updated_after is not None:
            mask &= updated >= to_epoch(filters.updated_after)
        if filters.updated_before is not None:
            mask &= updated <= to_epoch(filters.updated_before)
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


def key_mask(
    segments: Sequence[Any], offsets: np.ndarray, rows: np.ndarray, keys: frozenset[str]
) -> np.ndarray:
    """Which of the global ``rows`` (ascending) have a key (chunk id, or item id for an
    item row) among ``keys``: the chunk restriction of the ``symbol`` / ``references``
    filters."""
    allowed = np.array(sorted(keys), dtype=str)
    out = np.zeros(rows.size, bool)
    bounds = np.searchsorted(rows, offsets)
    for index, segment in enumerate(segments):
        lo, hi = int(bounds[index]), int(bounds[index + 1])
        if lo < hi:
            out[lo:hi] = np.isin(segment.keys[rows[lo:hi] - offsets[index]], allowed)
    return out
