"""Pseudo-relevance feedback (RM3): a query widened by the words of its best first hits.

A long, topical question ("what are the structural and aeroelastic problems of ...") often
shares few words with the passages that answer it, while those passages share many words
with the best hits of a first pass. RM3 weighs each word of the first hits by how much of
each hit it makes up and how well that hit scored, keeps the strongest few, and mixes them
into the query. It costs a second keyword search, and it hurts a precise question whose
first pass already found the answer, so it is off by default, and when on the engine uses it
only for long queries whose first pass found no confident match.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

__all__ = ["expanded_query"]


def expanded_query(
    terms: Sequence[str],
    feedback: Sequence[tuple[float, Sequence[str]]],
    expansion_terms: int,
    original_weight: float,
) -> dict[str, float]:
    """Weights of the widened query: the query's own terms keep their counts, and the
    ``expansion_terms`` best words of ``feedback`` ((score, terms) of the first hits) share
    ``(1 - original_weight) / original_weight`` times the query's weight between them."""
    query = Counter(terms)
    total_score = sum(max(score, 0.0) for score, _ in feedback)
    relevance: Counter[str] = Counter()
    if total_score > 0:
        for score, document in feedback:
            if not document or score <= 0:
                continue
            share = score / total_score / len(document)
            for term, count in Counter(document).items():
                if term not in query:
                    relevance[term] += share * count
    weights = {term: float(count) for term, count in query.items()}
    best = relevance.most_common(expansion_terms)
    mass = sum(value for _, value in best)
    if mass <= 0 or not 0 < original_weight < 1:
        return weights
    scale = len(terms) * (1 - original_weight) / original_weight / mass
    for term, value in best:
        weights[term] = value * scale
    return weights
