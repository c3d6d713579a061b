"""Which item each document of the keyword chunk index belongs to, as arrays.

Capping a candidate pool per item needs the item of every matching chunk; reading stored
fields costs tens of microseconds a document, too slow when one changelog matches with
thousands of sections. The ``item_id`` lexicon gives the same answer a term at a time.
"""

from __future__ import annotations

import numpy as np
from whoosh.searching import Searcher

from knowledge_agent.backends.local.keyword.internals import postings

__all__ = ["ItemGroups"]


class ItemGroups:
    """docnum → item code, one array per segment, built when a segment is first needed and
    kept while it exists: a segment never changes (a deletion only hides documents, which
    the scorer leaves out anyway), so a new searcher after a write reuses the arrays of the
    segments it still has. Codes are comparable within one searcher's arrays only."""

    def __init__(self, fieldname: str = "item_id") -> None:
        self.fieldname = fieldname
        self._by_segment: dict[str, np.ndarray] = {}

    def of(self, searcher: Searcher) -> np.ndarray:
        """The item code of each of the searcher's docnums (-1 for a document without one)."""
        parts: list[np.ndarray] = []
        alive: set[str] = set()
        base = 0
        for leaf, _ in searcher.leaf_searchers():
            reader = leaf.reader()
            key = reader.segment().segment_id()
            alive.add(key)
            local = self._by_segment.get(key)
            if local is None:
                local = self._by_segment[key] = self._codes(reader)
            parts.append(np.where(local >= 0, local + base, -1))
            base += int(local.max(initial=-1)) + 1
        for gone in self._by_segment.keys() - alive:
            del self._by_segment[gone]
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)

    def _codes(self, reader: object) -> np.ndarray:
        codes = np.full(reader.doc_count_all(), -1, np.int64)  # type: ignore[attr-defined]
        for code, btext in enumerate(reader.lexicon(self.fieldname)):  # type: ignore[attr-defined]
            ids, _ = postings(reader, self.fieldname, btext)  # type: ignore[arg-type]
            codes[ids] = code
        return codes
