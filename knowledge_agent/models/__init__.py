"""Plain data models: what crosses every layer and the package boundary."""

from knowledge_agent.models.facets import SearchFacets
from knowledge_agent.models.item_summary import ItemSummary
from knowledge_agent.models.knowledge_chunk import KnowledgeChunk
from knowledge_agent.models.knowledge_item import KnowledgeItem
from knowledge_agent.models.result_item import ResultItem
from knowledge_agent.models.search_result import (
    MatchedChunk,
    Passage,
    ScoreExplanation,
    SearchResult,
)

__all__ = [
    "ItemSummary",
    "KnowledgeChunk",
    "KnowledgeItem",
    "MatchedChunk",
    "Passage",
    "ResultItem",
    "ScoreExplanation",
    "SearchFacets",
    "SearchResult",
]
