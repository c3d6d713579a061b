"""SearchFacets: how many documents match a query in each scope, before any limit."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["FACET_FIELDS", "SearchFacets"]

FACET_FIELDS = ("kb", "doc_type", "source_type")
"""The scopes counted, each also a filter of a search."""


@dataclass
class SearchFacets:
    """The documents matching a query (under the search's filters), counted per knowledge
    base, doc type and source type — the whole match, not the page a limit keeps. Each
    count maps a value to its documents, most first (ties by value); a document without a
    doc type counts under ``""``. ``total`` is the number of documents matching."""

    total: int = 0
    kb: dict[str, int] = field(default_factory=dict)
    doc_type: dict[str, int] = field(default_factory=dict)
    source_type: dict[str, int] = field(default_factory=dict)

    @classmethod
    def count(cls, documents: Iterable[Any]) -> SearchFacets:
        """The facets of ``documents``: objects with ``kb``, ``doc_type`` and
        ``source_type`` attributes (an item, or its facts), each counted once."""
        return cls.from_groups(
            (*(getattr(document, name) for name in FACET_FIELDS), 1) for document in documents
        )

    @classmethod
    def from_groups(cls, groups: Iterable[tuple[str, str, str, int]]) -> SearchFacets:
        """The facets of documents counted by group, as a grouped count gives them:
        ``(kb, doc_type, source_type, documents)`` rows (a triple may come more than once)."""
        counters: dict[str, Counter[str]] = {name: Counter() for name in FACET_FIELDS}
        total = 0
        for *values, documents in groups:
            total += documents
            for counter, value in zip(counters.values(), values, strict=True):
                counter[value or ""] += documents
        ordered = {
            name: dict(sorted(counter.items(), key=lambda entry: (-entry[1], entry[0])))
            for name, counter in counters.items()
        }
        return cls(total=total, **ordered)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: ``total`` and one count per scope."""
        return {"total": self.total, **{name: dict(getattr(self, name)) for name in FACET_FIELDS}}
