"""What a bulk segment writer writes: documents as arrays.

A :class:`DocumentBlock` is consecutive documents: each indexed field's (document, term)
rows, held in memory (:class:`FieldTerms`) or read a range of terms at a time when the
segment is written (a :class:`TermSource`: a segment being merged), stored fields, columns
and, where they are not the sum of the frequencies, field lengths.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from knowledge_agent.backends.local.keyword.bulk_columns import StoredValues

__all__ = ["DocumentBlock", "FieldTerms", "TermSource"]


@dataclass(eq=False)
class FieldTerms:
    """One indexed field's terms in a block: row i adds ``freqs[i]`` (default 1) of term
    ``terms[ids[i]]`` to document ``docs[i]``; rows of the same pair add up."""

    terms: Sequence[bytes]
    docs: np.ndarray  # int64, block-local docnums
    ids: np.ndarray  # int64 indexes into terms
    freqs: np.ndarray | None = None  # None: 1 per row (a token stream)
    weights: np.ndarray | None = None  # None: freq × the field's boost
    rank: np.ndarray | None = None  # each term's rank in byte order, if known


class TermSource(Protocol):
    """One field's terms in a block whose postings are read a range of terms at a time: a
    segment being merged, whose postings are never all in memory at once."""

    @property
    def terms(self) -> Sequence[bytes]:
        """The field's terms, ascending."""

    def sizes(self) -> np.ndarray:
        """How many postings each term has (at most)."""

    def read(self, lo: int, hi: int) -> FieldTerms:
        """The rows of terms ``lo`` to ``hi`` (``ids`` index :attr:`terms`)."""


@dataclass(eq=False)
class DocumentBlock:
    """Consecutive documents as arrays.

    A field's terms are in ``fields`` (in memory) or ``sources`` (read when written).
    ``lengths`` holds a scored field's length per document when it is not simply the sum of
    its frequencies (segments read back for a merge); ``columns`` one value per document of
    each column field the documents have (the column's default where one has none).
    """

    count: int
    fields: dict[str, FieldTerms]
    stored: StoredValues
    columns: dict[str, np.ndarray] = field(default_factory=dict)
    lengths: dict[str, np.ndarray] = field(default_factory=dict)
    sources: dict[str, TermSource] = field(default_factory=dict)
