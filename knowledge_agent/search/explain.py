"""Pure helpers that describe why a result matched: terms, fields and snippets."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection

from knowledge_agent.analysis import TextAnalyzer

__all__ = ["matched_fields", "matched_terms"]


def matched_terms(
    analyzer: TextAnalyzer, text: str, query_terms: Collection[str]
) -> dict[str, int]:
    """How often each query term occurs in ``text``, for the terms that occur at all."""
    counts = Counter(term for term in analyzer.terms(text) if term in query_terms)
    return dict(sorted(counts.items()))


def matched_fields(
    analyzer: TextAnalyzer, query_terms: Collection[str], fields: dict[str, str]
) -> list[str]:
    """The names of the fields whose text holds at least one query term, in the given order."""
    return [
        name
        for name, text in fields.items()
        if text and any(term in query_terms for term in analyzer.terms(text))
    ]
