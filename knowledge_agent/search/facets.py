"""Per-scope counts of a query's matches: documents per knowledge base, doc type and source
type, before any limit.

A document matches when it holds at least one of the query's terms (in its title or text)
and passes the filters: the set every ranking of the query orders, counted whole rather than
the page a limit keeps. The keyword index finds it (its item rows; its chunk rows, one per
item, when it has no item rows); the storage says each document's scopes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from knowledge_agent.models.facets import SearchFacets
from knowledge_agent.search.filters import SearchFilters

if TYPE_CHECKING:
    from knowledge_agent.protocols import KeywordIndex, Storage

__all__ = ["count_facets", "matching_items"]


def matching_items(
    storage: Storage, keyword_index: KeywordIndex, terms: Sequence[str], filters: SearchFilters
) -> list[str]:
    """The ids of every document holding one of ``terms`` that ``filters`` allow."""
    items = storage.count_items()
    if not terms or not items:
        return []
    if keyword_index.has_item_index():
        return [hit.item_id for hit in keyword_index.search_items(terms, items, filters)]
    hits = keyword_index.search_chunks(terms, items, filters, per_item=1)
    return list(dict.fromkeys(hit.item_id for hit in hits))


def count_facets(
    storage: Storage, keyword_index: KeywordIndex, terms: Sequence[str], filters: SearchFilters
) -> SearchFacets:
    """:class:`SearchFacets` of the documents matching ``terms`` under ``filters`` (those
    deleted since the index was written are not counted): one grouped count in the storage."""
    found = matching_items(storage, keyword_index, terms, filters)
    return SearchFacets.from_groups(storage.facet_groups(found))
