"""Pure helpers that describe why a result matched: which fields, which terms, how often."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence

from knowledge_agent.analysis import TextAnalyzer

__all__ = ["FieldMatches"]


class FieldMatches:
    """Query-term counts per field of one result, from one analysis of each field."""

    def __init__(
        self,
        analyzer: TextAnalyzer,
        query_terms: Collection[str],
        fields: Mapping[str, str],
        analysed: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        """``analysed`` holds the terms of those fields the caller has analysed already."""
        wanted = set(query_terms)
        known = analysed or {}
        self._counts = {
            name: Counter(
                term
                for term in (known[name] if name in known else analyzer.terms(text))
                if term in wanted
            )
            for name, text in fields.items()
        }

    def fields(self) -> list[str]:
        """The fields holding at least one query term, in the given order."""
        return [name for name, counts in self._counts.items() if counts]

    def terms(self, *names: str) -> dict[str, int]:
        """How often each query term occurs in the named fields together."""
        total: Counter[str] = Counter()
        for name in names:
            total.update(self._counts[name])
        return dict(sorted(total.items()))
