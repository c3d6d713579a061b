"""Search results: the matched item, its best chunks and their context (R5.4, R6.1)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from knowledge_agent.models._serialize import copy_json
from knowledge_agent.models.item_summary import ItemSummary
from knowledge_agent.models.knowledge_chunk import KnowledgeChunk
from knowledge_agent.models.knowledge_item import KnowledgeItem
from knowledge_agent.models.result_item import ResultItem

__all__ = ["MatchedChunk", "Passage", "ScoreExplanation", "SearchResult"]


@dataclass
class ScoreExplanation:
    """Why a chunk (or, at item level, a document) ranked where it did.

    ``fused_score`` is the engines' fused score with what the passage and document evidence
    added (``details`` has the parts); the final score is ``fused_score × document_boost ×
    recency_boost + rerank_delta`` (:attr:`final_score`): ``document_boost`` is the weight of
    the document's type, ``recency_boost`` its age's factor (recency boost × temporal decay),
    ``rerank_delta`` what a reranker added. ``path``, ``lines`` (``L45-L68``) and ``page`` say
    where the text is.
    """

    matched_terms: list[str] = field(default_factory=list)
    term_frequencies: dict[str, int] = field(default_factory=dict)
    keyword_score: float = 0.0
    semantic_score: float = 0.0
    dense_score: float | None = None
    fused_score: float = 0.0
    document_boost: float = 1.0
    recency_boost: float = 1.0
    rerank_delta: float = 0.0
    keyword_rank: int | None = None
    semantic_rank: int | None = None
    dense_rank: int | None = None
    rank_before_rerank: int | None = None
    rank_after_rerank: int | None = None
    path: str = ""
    lines: str = ""
    page: int | None = None
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def final_score(self) -> float:
        """``fused_score × document_boost × recency_boost + rerank_delta``."""
        return self.fused_score * self.document_boost * self.recency_boost + self.rerank_delta

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field, and the final score."""
        data = {name: getattr(self, name) for name in _EXPLANATION_FIELDS}
        data["matched_terms"] = list(self.matched_terms)
        data["term_frequencies"] = dict(self.term_frequencies)
        data["details"] = copy_json(self.details)
        data["final_score"] = self.final_score
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ScoreExplanation:
        """Build an explanation from ``to_dict`` output."""
        values = {name: data[name] for name in _EXPLANATION_FIELDS if name in data}
        terms = values.get("matched_terms") or []
        if isinstance(terms, dict):  # the older shape: term → count
            values.setdefault("term_frequencies", dict(terms))
            terms = list(terms)
        values["matched_terms"] = list(terms)
        values["term_frequencies"] = dict(values.get("term_frequencies") or {})
        values["details"] = copy_json(values.get("details") or {})
        return cls(**values)


_EXPLANATION_FIELDS = (
    "matched_terms", "term_frequencies", "keyword_score", "semantic_score", "dense_score",
    "fused_score", "document_boost", "recency_boost", "rerank_delta", "keyword_rank",
    "semantic_rank", "dense_rank", "rank_before_rerank", "rank_after_rerank", "path", "lines",
    "page", "details",
)  # fmt: skip


@dataclass
class Passage:
    """The part of a matched chunk that answers best: the paragraph (or whole code block)
    around the chunk's strongest line of evidence for the query, and where it is.

    ``start_position``/``end_position`` are offsets into the item's content, so ``text`` is
    ``content[start_position:end_position]``; ``start_line``/``end_line`` are lines of the
    stored text (PDF: ``page``). ``heading_path`` is the section it sits in, outermost first
    (text before the first heading: the document's title). ``link`` is what a reader opens:
    for a crawled page its URL with the anchor of the nearest heading before the passage
    that has an id, else "". ``evidence_ref`` cites it: its ``#L…`` part is always a line
    range of the stored text, never a page anchor (that is ``link``).
    """

    text: str
    start_position: int
    end_position: int
    start_line: int | None = None
    end_line: int | None = None
    page: int | None = None
    heading_path: list[str] = field(default_factory=list)
    link: str = ""
    evidence_ref: str = ""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field."""
        data = {name: getattr(self, name) for name in _PASSAGE_FIELDS}
        data["heading_path"] = list(self.heading_path)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Passage:
        """Build a passage from ``to_dict`` output."""
        values = {name: data[name] for name in _PASSAGE_FIELDS if name in data}
        values["heading_path"] = list(values.get("heading_path") or [])
        return cls(**values)


_PASSAGE_FIELDS = (
    "text", "start_position", "end_position", "start_line", "end_line", "page", "heading_path",
    "link", "evidence_ref",
)  # fmt: skip


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
    evidence_ref: str = ""
    """``kb:<chunk_id>:<path>#L<start>-L<end>@<hash>``: where the text is and what it said."""
    explanation: ScoreExplanation | None = None
    """Why a matched chunk ranked where it did (None for context chunks)."""
    passage: Passage | None = None
    """Where in a matched chunk the evidence is strongest (None for context chunks)."""

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
            "evidence_ref": self.evidence_ref,
            "explanation": None if self.explanation is None else self.explanation.to_dict(),
            "passage": None if self.passage is None else self.passage.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MatchedChunk:
        """Build a matched chunk from ``to_dict`` output."""
        kwargs = {
            name: data[name]
            for name in ("heading", "chunk_index", "start_position", "end_position", "score")
            if name in data
        }
        explanation = data.get("explanation")
        passage = data.get("passage")
        return cls(
            chunk_id=data["chunk_id"],
            passage=None if passage is None else Passage.from_dict(passage),
            content=data["content"],
            metadata=copy_json(data.get("metadata") or {}),
            evidence_ref=data.get("evidence_ref") or "",
            explanation=None if explanation is None else ScoreExplanation.from_dict(explanation),
            **kwargs,
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
    """The document: a :class:`~knowledge_agent.models.result_item.ResultItem`, whose
    ``content`` is read from the storage when first used."""
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
        """A JSON-ready dict; nested models become dicts too, the item a summary without its
        text (:class:`ItemSummary`: ``content_chars`` instead)."""
        return {
            "item": ItemSummary.of(self.item).to_dict(),
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
        """Build a result from ``to_dict`` output. Its item's text is not there (reading
        ``content`` raises ``NotFoundError``) unless the item's dict has its ``content``."""
        explanation = data.get("explanation")
        return cls(
            item=_item_from_dict(data["item"]),
            relevance_score=data["relevance_score"],
            confidence=data.get("confidence", 0.0),
            matched_fields=list(data.get("matched_fields") or []),
            highlights=list(data.get("highlights") or []),
            matched_chunks=[MatchedChunk.from_dict(c) for c in data.get("matched_chunks") or []],
            context_chunks=[MatchedChunk.from_dict(c) for c in data.get("context_chunks") or []],
            explanation=None if explanation is None else ScoreExplanation.from_dict(explanation),
            search_mode=data.get("search_mode", "chunk"),
        )


def _item_from_dict(data: dict[str, Any]) -> ResultItem:
    if isinstance(data.get("content"), str):
        return ResultItem.of_item(KnowledgeItem.from_dict(data))
    return ResultItem.lazy(ItemSummary.from_dict(data), None)
