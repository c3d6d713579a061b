"""Rankings computed in this process from postings read as arrays (:mod:`.term_postings`).

The scores are those of the SQL statements of :mod:`.keyword` and :mod:`.vectors` (the same
formulas, in the same order of operations, the terms summed in query order); the documents
are ranked best first, ties by document number. Only the best ones go back to the database,
to be named (key, item, chunk index) and, when filters are given, tested against them
(:func:`picked`): a block of the best candidates at a time, as many more each round as the
filters or the cap of chunks per item turned away, so a filter that passes most documents
costs one statement and one that passes few costs a few.

Above :data:`MAX_CLIENT_POSTINGS` postings (a query of very common terms over a very large
base) the rankings stay in SQL: the arrays would cost more to send than to sum where they are.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from knowledge_agent.backends.postgres.ranked import DEPTH_PER_RESULT
from knowledge_agent.backends.postgres.statistics import (
    GENERATION_SQL,
    Statistics,
    StatsState,
    generation_of,
)
from knowledge_agent.backends.postgres.term_postings import (
    TermPostings,
    flat_array,
    kb_names,
    term_postings,
)

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "MAX_CLIENT_NORMS",
    "MAX_CLIENT_POSTINGS",
    "DocumentNames",
    "bm25_scores",
    "client_sized",
    "cosine_scores",
    "picked",
    "ranked_here",
    "stored_norms",
    "top_order",
]

MAX_CLIENT_POSTINGS = 2_000_000
"""Postings a query may have (by its terms' document frequencies) to be ranked here."""

MAX_NAMED = 200_000
"""Documents whose names (key, item, chunk index) a process keeps."""

MAX_CLIENT_NORMS = 4_000_000
"""Documents of a level whose stored norms a process keeps (16 bytes each) for TF-IDF."""

Hit = tuple[str, str, int, float]
Ranked = tuple[np.ndarray, np.ndarray, np.ndarray]
"""Documents, their knowledge bases' codes, their scores."""


def ranked_here(
    cur: psycopg.Cursor[Any],
    statistics: Statistics,
    state: StatsState,
    level: int,
    terms: Sequence[str],
    score: Callable[[list[TermPostings]], Ranked | None],
    limit: int,
    cap: int | None,
    condition: tuple[str, dict[str, Any]],
    *,
    head: bool = False,
) -> list[Hit] | None:
    """The best ``limit`` documents of ``level`` by ``score`` (of the postings of ``terms``,
    in their order, with their head field's if ``head``; None when what it read was of
    another generation), as :func:`picked` gives them; None when a write moved the
    generation away from ``state``'s (the caller ranks again)."""
    postings, seen = term_postings(cur, state, level, terms, head=head)
    if seen is not None and not statistics.current(state, seen):
        return None
    ranked = score([postings[term] for term in terms])
    hits = (
        None
        if ranked is None
        else picked(cur, state, statistics.names, ranked, limit, cap, *condition)
    )
    if hits is None:
        statistics.forget()
    return hits


def client_sized(state: StatsState, level: int, terms: Sequence[str]) -> bool:
    """Whether the postings of ``terms`` are few enough to rank here."""
    return sum(sum(state.frequencies(term, level)) for term in terms) <= MAX_CLIENT_POSTINGS


def _summed(
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]],
) -> Ranked:
    """(documents, their knowledge bases' codes, scores) from each term's (documents, codes,
    values): a document's values added in the order of ``parts``, from 0."""
    if not parts:
        empty = np.zeros(0, np.int64)
        return empty, empty.astype(np.int32), empty.astype(np.float64)
    docs = np.concatenate([doc for doc, _, _ in parts])
    unique, inverse = np.unique(docs, return_inverse=True)
    kbs = np.empty(unique.size, np.int32)
    kbs[inverse] = np.concatenate([kb for _, kb, _ in parts])
    scores = np.zeros(unique.size, np.float64)
    start = 0
    for doc, _, values in parts:
        end = start + doc.size
        scores[inverse[start:end]] += values  # a term holds a document once: no repeats
        start = end
    return unique, kbs, scores


def _bm25(
    tf: np.ndarray, length: np.ndarray, idf: float, boost: float, avg: float, k1: float, b: float
) -> np.ndarray:
    tf64 = tf.astype(np.float64)
    return idf * ((tf64 * (k1 + 1)) / (tf64 + k1 * ((1 - b) + b * length / avg))) * boost


def bm25_scores(
    postings: Sequence[TermPostings],
    params: dict[str, Any],
    head: bool,
    content: bool,
) -> Ranked:
    """The BM25F score of every document matching a term, with the query parameters of
    :meth:`~.keyword.PostgresKeywordIndex._params` (per term, in query order: ``idf``,
    ``boost``, ``idf_head``, ``boost_head``; ``avg``, ``avg_head``, ``k1``, ``b``)."""
    k1, b = params["k1"], params["b"]
    # The head field's clause first, as the SQL statement and the local index add them.
    fields = (["_head"] if head else []) + ([""] if content else [])
    parts = []
    for i, term in enumerate(postings):
        if term.size == 0:
            continue
        matched = np.zeros(term.size, bool)
        values = np.zeros(term.size, np.float64)
        for field in fields:
            tf = getattr(term, "tf" + field)
            assert tf is not None, "postings read without their head field"
            has = tf > 0
            matched |= has
            clause = _bm25(
                tf,
                getattr(term, "norm_len" + field),
                params["idf" + field][i],
                params["boost" + field][i],
                params["avg" + field],
                k1,
                b,
            )
            values = values + np.where(has, clause, 0.0)
        parts.append((term.doc[matched], term.kb[matched], values[matched]))
    return _summed(parts)


def cosine_scores(
    postings: Sequence[TermPostings],
    coefs: Sequence[float],
    qnorm: float,
    norms: tuple[np.ndarray, np.ndarray],
    minimum: float,
) -> Ranked:
    """The TF-IDF cosine of every document holding a query term in its vector, from the
    query's coefficients (per term: its weight × idf) and norm and the documents' ``norms``
    (sorted documents, their norms: stored or computed here); those scoring 0 or under
    ``minimum`` left out."""
    parts = []
    for term, coef in zip(postings, coefs, strict=True):
        held = term.w_vec > 0
        if held.any():
            parts.append(
                (term.doc[held], term.kb[held], term.w_vec[held].astype(np.float64) * coef)
            )
    docs, kbs, dots = _summed(parts)
    known, norm = norms
    where = np.minimum(np.searchsorted(known, docs), max(known.size - 1, 0))
    stored = norm[where] if known.size else np.full(docs.size, np.nan)
    stored = np.where(known[where] == docs, stored, np.nan) if known.size else stored
    with np.errstate(divide="ignore", invalid="ignore"):
        scores = np.minimum(np.maximum(dots / (stored * qnorm), 0.0), 1.0)
    keep = (scores > 0) & (scores >= minimum)  # NaN (no stored norm) fails both
    return docs[keep], kbs[keep], scores[keep]


def top_order(scores: np.ndarray, docs: np.ndarray, k: int) -> np.ndarray:
    """The positions of the best ``k`` documents, best first, ties by document number."""
    n = scores.size
    if k >= n:
        return np.lexsort((docs, -scores))
    if k <= 0:
        return np.zeros(0, np.int64)
    kth = np.partition(scores, n - k)[n - k]  # the k-th best score
    chosen = np.flatnonzero(scores >= kth)
    return chosen[np.lexsort((docs[chosen], -scores[chosen]))][:k]


_NAMED = f"""
    WITH {GENERATION_SQL}
    SELECT g.changes, g.norms_at, g.rows, d.doc, d.key, d.item_id, d.chunk_index
    FROM generation g LEFT JOIN (
        SELECT d.doc, d.key, d.item_id, d.chunk_index
        FROM unnest(%(kbs)s::text[], %(docs)s::int8[]) AS t(kb, doc)
        JOIN kw_documents d ON d.kb = t.kb AND d.doc = t.doc {{condition}}
    ) d ON true
"""


class DocumentNames:
    """The key, item and chunk index of documents named so far, by document number (a number
    never names another document: a changed item's documents get new ones), at most
    :data:`MAX_NAMED` of them. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._names: dict[int, tuple[str, str, int]] = {}

    def __len__(self) -> int:
        return len(self._names)

    def known(self, docs: Sequence[int]) -> dict[int, tuple[str, str, int]]:
        with self._lock:
            names = self._names
            return {doc: found for doc in docs if (found := names.get(doc)) is not None}

    def learn(self, named: dict[int, tuple[str, str, int]]) -> None:
        with self._lock:
            self._names.update(named)
            if len(self._names) > MAX_NAMED:
                keep = list(self._names.items())[len(self._names) - MAX_NAMED // 2 :]
                self._names = dict(keep)


def picked(
    cur: psycopg.Cursor[Any],
    state: StatsState,
    names: DocumentNames,
    ranked: Ranked,
    limit: int,
    cap: int | None,
    condition: str,
    filter_params: dict[str, Any],
) -> list[Hit] | None:
    """The best ``limit`` of the ``ranked`` documents (documents, knowledge base codes,
    scores) that pass the filter ``condition`` (on ``d``, with its parameters), at most
    ``cap`` of one item, as (key, item id, chunk index, score); None when a write moved the
    generation away from ``state``'s (rank again). Without a condition, documents whose
    ``names`` are known are not looked up."""
    docs, kbs, scores = ranked
    sql = _NAMED.format(condition=f"AND {condition}" if condition else "")
    kb_name = np.array(kb_names(state), dtype=object)
    block = limit if cap is None and not condition else DEPTH_PER_RESULT * limit
    hits: list[Hit] = []
    per_item: Counter[str] = Counter()
    done = 0
    while done < docs.size:
        chosen = top_order(scores, docs, done + block)[done:]
        numbers = docs[chosen].tolist()
        named = {} if condition else names.known(numbers)
        asked = chosen if condition else chosen[[n not in named for n in numbers]]
        if asked.size:
            cur.execute(
                sql,
                {
                    "kbs": kb_name[kbs[asked]].tolist(),
                    "docs": docs[asked].tolist(),
                    **filter_params,
                },
            )
            rows = cur.fetchall()
            if generation_of(rows[0]) != state.generation:
                return None
            found = {int(doc): (str(k), str(i), int(c)) for _, _, _, doc, k, i, c in rows if k}
            names.learn(found)
            named.update(found)
        for position, doc in zip(chosen.tolist(), numbers, strict=True):
            if (name := named.get(doc)) is None:
                continue
            key, item_id, index = name
            if cap is not None:
                if per_item[item_id] >= cap:
                    continue
                per_item[item_id] += 1
            hits.append((key, item_id, index, float(scores[position])))
            if len(hits) == limit:
                return hits
        done += chosen.size
        block *= 4
    return hits


_NORMS = f"""
    WITH {GENERATION_SQL}
    SELECT g.changes, g.norms_at, g.rows, n.docs, n.norms
    FROM generation g LEFT JOIN (
        SELECT array_send(array_agg(doc)) AS docs,
            array_send(array_agg(coalesce(norm, 'NaN'::float8))) AS norms
        FROM kw_documents WHERE level = %(level)s
    ) n ON true
"""


def stored_norms(
    cur: psycopg.Cursor[Any], state: StatsState, level: int
) -> tuple[np.ndarray, np.ndarray] | None:
    """Every document of ``level`` (sorted) and its stored TF-IDF norm, kept in ``state``;
    None when the statement saw another generation than ``state``'s."""
    kept = state.norms.get(level)
    if kept is not None:
        return kept  # type: ignore[no-any-return]
    cur.execute(_NORMS, {"level": level}, binary=True)
    row = cur.fetchone()
    if generation_of(row) != state.generation:
        return None
    if row[3] is None:
        norms = (np.zeros(0, np.int64), np.zeros(0, np.float64))
    else:
        docs, values = flat_array([row[3]], ">i8"), flat_array([row[4]], ">f8")
        order = np.argsort(docs, kind="stable")
        norms = (docs[order], values[order])
    state.norms[level] = norms
    return norms
