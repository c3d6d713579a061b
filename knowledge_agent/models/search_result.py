"""Search results: the matched item, its best chunks and their context (R5.4, R6.1)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from knowledge_agent.models._serialize import copy_json
from knowledge_agent.models.knowledge_chunk import KnowledgeChunk
from knowledge_agent.models.knowledge_item import KnowledgeItem

__all__ = ["MatchedChunk", "ScoreExplanation", "SearchResult"]


@dataclass
class MatchedChunk:
    """A chunk as it appears in a result: a match, or a context neighbour of one."""

    chunk_id: str
    content: str
    heading: str = ""
    chunk_index: int = 0
    start_position: int = 0
    end_position: int = 0
    score: float = 0.0
    metadata: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_chunk(cls, chunk: KnowledgeChunk, score: float = 0.0) -> MatchedChunk:
        """The result view of a stored chunk."""
        return cls(
            chunk_id=chunk.id,
            content=chunk.content,
            heading=chunk.heading,
            chunk_index=chunk.chunk_index,
            start_position=chunk.start_position,
            end_position=chunk.end_position,
            score=score,
            metadata=copy_json(chunk.metadata),
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field."""
        return {
            "chunk_id": self.chunk_id,
            "content": self.content,
            "heading": self.heading,
            "chunk_index": self.chunk_index,
            "start_position": self.start_position,
            "end_position": self.end_position,
            "score": self.score,
            "metadata": copy_json(self.metadata),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MatchedChunk:
        """Build a matched chunk from ``to_dict`` output."""
        kwargs = {
            name: data[name]
            for name in ("heading", "chunk_index", "start_position", "end_position", "score")
            if name in data
        }
        return cls(
            chunk_id=data["chunk_id"],
            content=data["content"],
            metadata=copy_json(data.get("metadata") or {}),
            **kwargs,
        )


@dataclass
class ScoreExplanation:
    """Why a result ranked where it did: the terms that matched and each engine's score."""

    matched_terms: dict[str, int] = field(default_factory=dict)
    keyword_score: float = 0.0
    semantic_score: float = 0.0
    fused_score: float = 0.0
    keyword_rank: int | None = None
    semantic_rank: int | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field."""
        return {
            "matched_terms": dict(self.matched_terms),
            "keyword_score": self.keyword_score,
            "semantic_score": self.semantic_score,
            "fused_score": self.fused_score,
            "keyword_rank": self.keyword_rank,
            "semantic_rank": self.semantic_rank,
            "details": copy_json(self.details),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ScoreExplanation:
        """Build an explanation from ``to_dict`` output."""
        return cls(
            matched_terms=dict(data.get("matched_terms") or {}),
            keyword_score=data.get("keyword_score", 0.0),
            semantic_score=data.get("semantic_score", 0.0),
            fused_score=data.get("fused_score", 0.0),
            keyword_rank=data.get("keyword_rank"),
            semantic_rank=data.get("semantic_rank"),
            details=copy_json(data.get("details") or {}),
        )


@dataclass
class SearchResult:
    """One document in a result list.

    ``matched_chunks`` are the item's best chunks, best first; ``context_chunks``
    their neighbours in document order. ``search_mode`` says which path served the
    query: ``"chunk"`` (two-stage) or ``"item"`` (the item-level fallback, where the
    chunk lists are empty, R6.4).
    """

    item: KnowledgeItem
    relevance_score: float
    confidence: float = 0.0
    """How surely this answers the query, 0-1, comparable across queries (relevance_score
    only orders one query's results)."""
    matched_fields: list[str] = field(default_factory=list)
    highlights: list[str] = field(default_factory=list)
    matched_chunks: list[MatchedChunk] = field(default_factory=list)
    context_chunks: list[MatchedChunk] = field(default_factory=list)
    explanation: ScoreExplanation | None = None
    search_mode: str = "chunk"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; nested models become dicts too."""
        return {
            "item": self.item.to_dict(),
            "relevance_score": self.relevance_score,
            "confidence": self.confidence,
            "matched_fields": list(self.matched_fields),
            "highlights": list(self.highlights),
            "matched_chunks": [chunk.to_dict() for chunk in self.matched_chunks],
            "context_chunks": [chunk.to_dict() for chunk in self.context_chunks],
            "explanation": None if self.explanation is None else self.explanation.to_dict(),
            "search_mode": self.search_mode,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SearchResult:
        """Build a result from ``to_dict`` output."""
        explanation = data.get("explanation")
        return cls(
            item=KnowledgeItem.from_dict(data["item"]),
            relevance_score=data["relevance_score"],
            confidence=data.get("confidence", 0.0),
            matched_fields=list(data.get("matched_fields") or []),
            highlights=list(data.get("highlights") or []),
            matched_chunks=[MatchedChunk.from_dict(c) for c in data.get("matched_chunks") or []],
            context_chunks=[MatchedChunk.from_dict(c) for c in data.get("context_chunks") or []],
            explanation=None if explanation is None else ScoreExplanation.from_dict(explanation),
            search_mode=data.get("search_mode", "chunk"),
        )
