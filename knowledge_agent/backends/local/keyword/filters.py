"""Search filters as masks of allowed docnums over a Whoosh searcher.

Metadata fields are term queries; dates are a range over the ``updated_at`` column read as
one array; paths are matched by walking the ``path`` lexicon (narrowed by the literal prefix
of the prefix / glob) with :meth:`SearchFilters.matches_path` itself, once per distinct path
per segment, so the semantics are the reference ones by construction.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
from whoosh import query as wq
from whoosh.searching import Searcher

from knowledge_agent.backends.local.keyword.internals import column_values
from knowledge_agent.backends.local.keyword.schema import FILTER_FIELDS, safe_text
from knowledge_agent.search.filters import SearchFilters, to_epoch

__all__ = ["filter_mask"]

_GLOB_SPECIALS = "*?["


def glob_literal_prefix(glob: str) -> str:
    """The part of an fnmatch pattern before its first wildcard: every match starts with it."""
    cut = min((i for i in (glob.find(c) for c in _GLOB_SPECIALS) if i >= 0), default=len(glob))
    return glob[:cut]


def mask(size: int, docnums: Iterable[int]) -> np.ndarray:
    mask = np.zeros(size, bool)
    mask[np.fromiter(docnums, np.int64)] = True
    return mask


def date_mask(searcher: Searcher, filters: SearchFilters) -> np.ndarray:
    """A mask of the documents whose ``updated_at`` lies within the filters' inclusive bounds."""
    low = -math.inf if filters.updated_after is None else to_epoch(filters.updated_after)
    high = math.inf if filters.updated_before is None else to_epoch(filters.updated_before)
    parts = []
    for leaf, _ in searcher.leaf_searchers():
        reader = leaf.reader()
        column = reader.column_reader("updated_at", translate=False)
        when = column_values(column, reader.doc_count_all(), ">f8")
        parts.append((when >= low) & (when <= high))
    return np.concatenate(parts) if parts else np.zeros(0, bool)


def filter_mask(searcher: Searcher, filters: SearchFilters) -> np.ndarray:
    """A mask over the searcher's docnums: True where every filter holds."""
    allow = np.ones(searcher.doc_count_all(), bool)
    for name in FILTER_FIELDS:
        values: tuple[str, ...] = getattr(filters, name)
        if values:
            constraint = wq.Or([wq.Term(name, safe_text(v)) for v in sorted(set(values))])
            allow &= mask(allow.size, searcher.docs_for_query(constraint))
    if filters.updated_after is not None or filters.updated_before is not None:
        allow &= date_mask(searcher, filters)
    if (filters.path_prefix or filters.path_glob) and allow.any():
        allow &= mask(allow.size, path_docs(searcher, filters))
    if filters.keys is not None and allow.any():
        allow &= mask(allow.size, key_docs(searcher, filters))
    return allow


def key_docs(searcher: Searcher, filters: SearchFilters) -> set[int]:
    """Docnums of the items holding the chunks the filters name (``chunk_items``) and, in a
    chunk index, of those chunks only (``chunk_ids``)."""
    items = sorted(filters.chunk_items or ())
    if not items:
        return set()
    docs = set(searcher.docs_for_query(wq.Or([wq.Term("item_id", item) for item in items])))
    if "chunk_id" not in searcher.schema.names():
        return docs
    chunks = filters.chunk_ids or frozenset()
    return {doc for doc in docs if searcher.stored_fields(doc).get("chunk_id") in chunks}


def path_docs(searcher: Searcher, filters: SearchFilters) -> set[int]:
    """Docnums whose ``path`` passes ``filters.matches_path`` — the reference semantics —
    tested once per distinct path per segment, over the lexicon slice that can match."""
    path_field = searcher.schema["path"]
    verdicts: dict[bytes, bool] = {}
    docs: set[int] = set()
    for start in _lexicon_starts(filters):
        for leaf, offset in searcher.leaf_searchers():
            reader = leaf.reader()
            for raw in reader.expand_prefix("path", start):
                ok = verdicts.get(raw)
                if ok is None:
                    ok = verdicts[raw] = filters.matches_path(path_field.from_bytes(raw))
                if ok:
                    docs.update(offset + d for d in reader.postings("path", raw).all_ids())
    return docs


def _lexicon_starts(filters: SearchFilters) -> list[str]:
    """The path prefixes whose lexicon slices can hold a match: each prefix narrowed by a
    glob's fixed start where the two agree (a pair that disagrees can match nothing)."""
    prefixes = filters.path_prefix or ("",)
    literals = [glob_literal_prefix(glob) for glob in filters.path_glob] or [""]
    starts = {
        literal if literal.startswith(prefix) else prefix
        for prefix in prefixes
        for literal in literals
        if literal.startswith(prefix) or prefix.startswith(literal)
    }
    # A start inside another's slice is already covered by it.
    return [s for s in starts if not any(s != o and s.startswith(o) for o in starts)]
