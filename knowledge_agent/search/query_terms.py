"""What an index searches with: a query's analysed terms and the weight of each, as every
keyword index scores them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from knowledge_agent.analysis import TextAnalyzer
from knowledge_agent.errors import QueryError

__all__ = ["analysed", "term_weights"]


def analysed(
    query: str | Sequence[str] | Mapping[str, float], analyzer: TextAnalyzer
) -> Sequence[str] | Mapping[str, float]:
    """A plain string is the query's text: its terms as ``analyzer`` gives them (what the
    engine searches with), never one term; analysed terms (or weights) are returned as
    given."""
    return analyzer.terms(query) if isinstance(query, str) else query


def term_weights(terms: Sequence[str] | Mapping[str, float]) -> dict[str, float]:
    """Each term's weight: its count, or the weight given (a widened query), in the order
    first seen; a term that is not a string, or a weight that is not a number >= 0, is a
    QueryError."""
    if isinstance(terms, Mapping):
        for term, weight in terms.items():
            if not isinstance(term, str) or isinstance(weight, bool):
                raise QueryError(f"a weighted term must be a string with a number: {term!r}")
            if not isinstance(weight, (int, float)) or not weight >= 0:
                raise QueryError(f"the weight of {term!r} must be a number >= 0, got {weight!r}")
        return {term: float(weight) for term, weight in terms.items() if term and weight > 0}
    if isinstance(terms, str):
        raise QueryError("terms must be a sequence of analysed terms, not a single string")
    weights: Counter[str] = Counter()
    for term in terms:
        if not isinstance(term, str):
            raise QueryError(f"every term must be a string, got {term!r}")
        if term:
            weights[term] += 1
    return {term: float(count) for term, count in weights.items()}
