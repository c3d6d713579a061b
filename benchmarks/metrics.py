"""Small pure retrieval metrics. ``ranked`` is a list of doc ids, best first."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping

_SPACE_RE = re.compile(r"\s+")


def ndcg_at_k(ranked: list[str], gains: Mapping[str, float], k: int) -> float:
    """nDCG@k with linear gains (gain = qrels score) and a log2 discount."""
    dcg = sum(gains.get(doc, 0.0) / math.log2(rank + 2) for rank, doc in enumerate(ranked[:k]))
    ideal = sorted(gains.values(), reverse=True)[:k]
    idcg = sum(gain / math.log2(rank + 2) for rank, gain in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def reciprocal_rank_at_k(ranked: list[str], relevant: Iterable[str], k: int) -> float:
    """1 / rank of the first relevant document within the top k, else 0."""
    relevant = set(relevant)
    for rank, doc in enumerate(ranked[:k], start=1):
        if doc in relevant:
            return 1.0 / rank
    return 0.0


def recall_at_k(ranked: list[str], relevant: Iterable[str], k: int) -> float:
    """Share of the relevant documents found within the top k."""
    relevant = set(relevant)
    if not relevant:
        return 0.0
    return len(relevant.intersection(ranked[:k])) / len(relevant)


def normalize_text(text: str) -> str:
    """Casefold and collapse whitespace, for answer matching."""
    return _SPACE_RE.sub(" ", text).strip().casefold()


def contains_answer(passage: str | None, answers: Iterable[str]) -> bool:
    """Whether ``passage`` contains one of ``answers`` (case-insensitive, whitespace-normalised)."""
    if not passage:
        return False
    haystack = normalize_text(passage)
    return any(needle and needle in haystack for needle in map(normalize_text, answers))


def mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0
