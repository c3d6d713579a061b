"""A query term's postings read into this process as arrays, kept for one generation.

Summing tens of thousands of postings in SQL costs about a microsecond each (unnest, sort,
aggregate); the same rows sent as arrays in binary format and scored with numpy cost a tenth
of that (:mod:`.client_rank`). A term's rows (one per knowledge base and segment) are read in
one statement, each array as ``array_send`` bytes: a one-dimensional array without NULLs is a
20-byte header, then each element as its length and its big-endian value, so a column of
every row is gathered at once from their bytes joined (:func:`flat_array`).

What is read is kept in the :class:`~.statistics.StatsState` of the generation it belongs
to (a write starts a new generation, and with it an empty cache), up to
:data:`MAX_KEPT_POSTINGS` postings; the statement that reads them names the generation of its
snapshot, and its caller ranks again when that is not the one its statistics came from.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from knowledge_agent.backends.postgres.statistics import (
    GENERATION_SQL,
    Generation,
    StatsState,
    generation_of,
)
from knowledge_agent.errors import SearchIndexError

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "MAX_KEPT_POSTINGS",
    "TermPostings",
    "array_sizes",
    "flat_array",
    "kb_code",
    "kb_names",
    "term_postings",
]

MAX_KEPT_POSTINGS = 2_000_000
"""Postings a generation keeps at most (about 30 bytes each); past it, the least recently
read terms go."""

_HEADER = 20  # ndim, has-nulls flag, element type, then the one dimension's size and bound
_COLUMNS: tuple[tuple[str, str], ...] = (
    ("doc", ">i8"),
    ("tf", ">i4"),
    ("w_vec", ">f4"),
    ("norm_len", ">i4"),
)
# Read only when a head field (a chunk's heading, an item's title) is weighed: most
# configurations give it no weight, and each column read costs as much as the others.
_HEAD_COLUMNS: tuple[tuple[str, str], ...] = (("tf_head", ">i4"), ("norm_len_head", ">i4"))


def _read_sql(head: bool) -> str:
    columns = _COLUMNS + (_HEAD_COLUMNS if head else ())
    return f"""
        WITH {GENERATION_SQL}
        SELECT g.changes, g.norms_at, g.rows, p.term, p.kb,
            {", ".join(f"array_send(p.{name})" for name, _ in columns)}
        FROM generation g
        LEFT JOIN kw_postings p ON p.level = %(level)s AND p.term = ANY(%(terms)s::text[])
    """


_READ = {head: _read_sql(head) for head in (False, True)}


@dataclass(frozen=True, eq=False)
class TermPostings:
    """Every posting of one term at one level, in no particular order of documents: the
    document numbers, the code of each one's knowledge base (:func:`kb_code`) and its
    per-posting values (as :mod:`.postings` stores them; the head field's None when they
    were not read)."""

    doc: np.ndarray  # int64
    kb: np.ndarray  # int32 codes
    tf: np.ndarray  # int32
    w_vec: np.ndarray  # float32
    norm_len: np.ndarray  # int32
    tf_head: np.ndarray | None = None  # int32
    norm_len_head: np.ndarray | None = None  # int32

    @property
    def size(self) -> int:
        return int(self.doc.size)


_EMPTY = TermPostings(*(np.zeros(0, kind) for kind in ("i8", "i4", "i4", "f4", "i4", "i4", "i4")))


def kb_code(state: StatsState, name: str) -> int:
    """The code of a knowledge base's name in ``state`` (its postings name it by code)."""
    codes = state.kb_codes
    found = codes.get(name)
    if found is None:
        with state.lock:
            found = codes.setdefault(name, len(codes))
    return found


def kb_names(state: StatsState) -> list[str]:
    """The knowledge bases' names by code."""
    with state.lock:
        names = [""] * len(state.kb_codes)
        for name, code in state.kb_codes.items():
            names[code] = name
    return names


def array_sizes(blobs: Sequence[bytes], kind: str) -> np.ndarray:
    """How many values of fixed-width ``kind`` each ``array_send`` blob holds."""
    lengths = np.fromiter(map(len, blobs), np.int64, len(blobs))
    return np.maximum(lengths - _HEADER, 0) // (4 + np.dtype(kind).itemsize)


def flat_array(blobs: Sequence[bytes], kind: str) -> np.ndarray:
    """The values of ``array_send`` blobs of fixed-width ``kind`` (4 or 8 bytes, big-endian,
    e.g. ``">i8"``) one after the other, in native byte order. Every blob is whole 4-byte
    words (a header of five, then each value's length word and value), so the values are
    gathered as words from all the blobs joined: no Python step per blob but its length."""
    for blob in blobs[:1]:
        ndim, nulls = np.frombuffer(blob, ">i4", 2) if len(blob) >= 8 else (0, 0)
        if ndim > 1 or nulls:
            raise SearchIndexError("a postings array is not a flat array without NULLs")
    size = np.dtype(kind).itemsize // 4  # words a value takes
    words = np.frombuffer(b"".join(blobs), np.uint8).reshape(-1, 4)
    lengths = np.fromiter(map(len, blobs), np.int64, len(blobs)) // 4
    counts = array_sizes(blobs, kind)
    first = np.cumsum(lengths) - lengths + _HEADER // 4 + 1  # each blob's first value
    ends = np.cumsum(counts)
    within = np.arange(int(ends[-1]) if ends.size else 0) - np.repeat(ends - counts, counts)
    at = np.repeat(first, counts) + within * (1 + size)
    gathered = np.concatenate([words[at + i] for i in range(size)], axis=1)
    return gathered.view(kind).reshape(-1).astype(kind[1:])


def term_postings(
    cur: psycopg.Cursor[Any],
    state: StatsState,
    level: int,
    terms: Sequence[str],
    *,
    head: bool = False,
) -> tuple[dict[str, TermPostings], Generation | None]:
    """The postings of ``terms`` at ``level`` (with their head field's values if ``head``):
    those ``state`` keeps, the others read in one statement and kept; with the generation
    that statement saw (None when none ran). A term no document holds has no postings."""
    found: dict[str, TermPostings] = {}
    missing: list[str] = []
    for term in dict.fromkeys(terms):
        with state.lock:
            kept = state.postings.pop((level, term), None)
            if kept is not None:
                state.postings[(level, term)] = kept  # the most recently read now
        if kept is not None and (kept.tf_head is not None or not head):
            found[term] = kept
        elif sum(state.frequencies(term, level)) == 0:
            found[term] = _EMPTY
        else:
            missing.append(term)
    if not missing:
        return found, None
    cur.execute(_READ[head], {"level": level, "terms": missing}, binary=True)
    rows = cur.fetchall()
    generation = generation_of(rows[0])
    by_term: dict[str, list[Any]] = {term: [] for term in missing}
    for row in rows:
        if row[3] is not None:
            by_term[row[3]].append(row)
    kinds = [kind for _, kind in _COLUMNS + (_HEAD_COLUMNS if head else ())]
    for term, term_rows in by_term.items():
        if not term_rows:
            found[term] = _EMPTY
            continue
        columns = [
            flat_array([bytes(row[5 + i]) for row in term_rows], kind)
            for i, kind in enumerate(kinds)
        ]
        codes = np.array([kb_code(state, row[4]) for row in term_rows], np.int32)
        codes = np.repeat(codes, array_sizes([row[5] for row in term_rows], ">i8"))
        found[term] = TermPostings(columns[0], codes, *columns[1:])
    _keep(state, level, {term: found[term] for term in missing}, generation)
    return found, generation


def _keep(
    state: StatsState, level: int, read: dict[str, TermPostings], generation: Generation
) -> None:
    """Keep what was read, if it is of ``state``'s generation, within the budget."""
    if generation != state.generation:
        return
    with state.lock:
        for term, postings in read.items():
            old = state.postings.pop((level, term), None)
            state.kept_postings += postings.size - (old.size if old is not None else 0)
            state.postings[(level, term)] = postings
        while state.kept_postings > MAX_KEPT_POSTINGS and state.postings:
            oldest = next(iter(state.postings))
            state.kept_postings -= state.postings.pop(oldest).size
