"""The passages ``knowledge_semantic_search`` answers with, counted one by one.

A search result is a document with its best matched chunks. The tool counts passages, not
documents: :func:`ranked_passages` flattens every result's matched chunks into passages,
best first across documents, and :func:`deduplicated` drops the repeats — the same source
and text, or text of one source that is near-identical to a better passage's
(:data:`NEAR_IDENTICAL`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from knowledge_agent.models import MatchedChunk, SearchResult
from knowledge_agent.models.result_view import item_path

__all__ = [
    "NEAR_IDENTICAL",
    "FoundPassage",
    "deduplicated",
    "near_identical",
    "passage_relevance",
    "ranked_passages",
]

NEAR_IDENTICAL = 0.9
"""Two passages of one source are near-identical when the Jaccard similarity of their sets
of analysed terms (shared terms over all terms) is at least this."""


@dataclass
class FoundPassage:
    """A passage of a recalled document: where it is from, its whole text, its relevance
    (0-1, comparable across queries), and ``rank_score``, what orders it within this query."""

    source: str
    text: str
    relevance: float
    rank_score: float
    chunk_id: str | None = None
    rerank_score: float | None = None


def passage_relevance(chunk: MatchedChunk, result: SearchResult) -> float:
    """The matched chunk's own confidence, when the engine gave it one, else its result's."""
    details = chunk.explanation.details if chunk.explanation is not None else {}
    value = details.get("confidence")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return result.confidence


def ranked_passages(
    results: Iterable[SearchResult], whole_text: Callable[[str], str]
) -> list[FoundPassage]:
    """Every matched chunk of ``results`` as a passage, best first across documents.

    Passages are ordered by their chunk's score (the fused ranking score, comparable within
    one query); each document's passages keep the engine's order among themselves — its
    best passage first — by taking its scores best first in that order. Ties keep the order
    of ``results``. A result without matched chunks (the item-level search, when there is
    no chunk index) is one passage: its document's text, ``whole_text(item_id)``.
    """
    passages: list[FoundPassage] = []
    for result in results:
        source = item_path(result.item)
        chunks = result.matched_chunks
        if not chunks:
            text = whole_text(result.item.id).strip()
            passages.append(FoundPassage(source, text, result.confidence, result.relevance_score))
            continue
        scores = sorted((chunk.score for chunk in chunks), reverse=True)
        for chunk, score in zip(chunks, scores, strict=True):
            relevance = passage_relevance(chunk, result)
            passages.append(
                FoundPassage(source, chunk.content.strip(), relevance, score, chunk.chunk_id)
            )
    # A stable sort: equal scores keep the recall order.
    return sorted(passages, key=lambda passage: -passage.rank_score)


def near_identical(first: frozenset[str], second: frozenset[str]) -> bool:
    """Whether two sets of terms are near-identical (:data:`NEAR_IDENTICAL`); an empty set
    is near-identical to nothing."""
    if not first or not second:
        return False
    return len(first & second) / len(first | second) >= NEAR_IDENTICAL


def deduplicated(
    passages: Iterable[FoundPassage], terms: Callable[[str], list[str]]
) -> Iterator[FoundPassage]:
    """``passages`` without repeats, the first of each kept, as they are read: a passage
    whose source and text are an earlier one's, or whose text is near-identical to an
    earlier passage of the same source (its ``terms`` — the analysed words — compared by
    :func:`near_identical`), is left out."""
    seen: set[tuple[str, str]] = set()
    by_source: dict[str, list[frozenset[str]]] = {}
    for passage in passages:
        if (passage.source, passage.text) in seen:
            continue
        words = frozenset(terms(passage.text))
        earlier = by_source.setdefault(passage.source, [])
        if any(near_identical(words, other) for other in earlier):
            continue
        seen.add((passage.source, passage.text))
        earlier.append(words)
        yield passage
