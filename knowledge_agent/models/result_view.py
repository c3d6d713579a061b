"""One JSON view of a search result, for every interface: ``search --json`` and its other
data formats, the terminal renderer's locations and the MCP tools.

Chunk first: each matched passage with where it is (``location``, lines, page, heading),
its evidence ref, score and explanation; the document as a summary without its text.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from knowledge_agent.models.evidence import evidence_ref
from knowledge_agent.models.item_summary import ItemSummary
from knowledge_agent.models.knowledge_item import KnowledgeItem
from knowledge_agent.models.search_result import MatchedChunk, SearchResult

__all__ = ["chunk_view", "item_path", "item_view", "location", "result_view"]

# Chunk metadata a view shows when present, under the name it shows it by.
_SHOWN_METADATA = {
    "page": "page",
    "page_end": "page_end",
    "url": "url",
    "qualified_name": "symbol",
    "symbol_type": "symbol_type",
    "signature": "signature",
}


def item_path(item: ItemSummary | KnowledgeItem) -> str:
    """What a result names as its source: the file path or URL, else the title, else the id."""
    return item.source_uri or item.title or item.id


def location(path: str, metadata: Mapping[str, Any]) -> str:
    """``path:12-30`` for text, ``path p.3`` (or ``p.3-4``) for PDF pages, a crawled page's
    ``url#section``, else ``path``."""
    url = metadata.get("url")
    if isinstance(url, str) and "#" in url:
        return url
    page, page_end = metadata.get("page"), metadata.get("page_end")
    if isinstance(page, int):
        pages = f"{page}-{page_end}" if isinstance(page_end, int) and page_end != page else page
        return f"{path} p.{pages}".strip()
    start, end = metadata.get("start_line"), metadata.get("end_line")
    if isinstance(start, int):
        lines = f"{start}-{end}" if isinstance(end, int) and end != start else str(start)
        return f"{path}:{lines}"
    return path


def chunk_view(
    chunk: MatchedChunk, path: str, *, matched: bool = True, explain: bool = False
) -> dict[str, Any]:
    """A passage as data. A matched one has its ``evidence_ref`` and ``score`` (and its
    ``explanation`` with ``explain``); a context neighbour has neither."""
    meta = chunk.metadata
    view: dict[str, Any] = {"chunk_id": chunk.chunk_id}
    if matched:
        view["evidence_ref"] = chunk.evidence_ref or evidence_ref(
            chunk.chunk_id, path, meta, chunk.content
        )
        view["score"] = round(chunk.score, 6)
    view.update(
        location=location(path, meta),
        heading=chunk.heading,
        chunk_index=chunk.chunk_index,
        start_position=chunk.start_position,
        end_position=chunk.end_position,
        start_line=meta.get("start_line"),
        end_line=meta.get("end_line"),
    )
    view.update({shown: meta[key] for key, shown in _SHOWN_METADATA.items() if meta.get(key)})
    view["content"] = chunk.content
    if matched and explain and chunk.explanation is not None:
        view["explanation"] = chunk.explanation.to_dict()
    return view


def item_view(item: ItemSummary | KnowledgeItem) -> dict[str, Any]:
    """A document as a result names it: ids, title, path (its file path or URL; None for
    added text), facets, size — not its text."""
    chars = item.content_chars if isinstance(item, ItemSummary) else len(item.content)
    return {
        "item_id": item.id,
        "title": item.title,
        "path": item.source_uri,
        "kb": item.kb,
        "source_type": item.source_type,
        "doc_type": item.doc_type,
        "language": item.language,
        "content_chars": chars,
    }


def result_view(
    result: SearchResult, *, explain: bool = False, content: str | None = None
) -> dict[str, Any]:
    """A result as data: the document's summary, score and confidence, its matched passages
    best first and their context neighbours. ``content``: the document's whole text, added
    only when the caller asked for it (``--full``, ``include_content``)."""
    path = item_path(result.item)
    view = item_view(result.item)
    view.update(
        score=round(result.relevance_score, 6),
        confidence=round(result.confidence, 4),
        search_mode=result.search_mode,
        matched_fields=list(result.matched_fields),
        matched_chunks=[
            chunk_view(chunk, path, explain=explain) for chunk in result.matched_chunks
        ],
        context_chunks=[chunk_view(chunk, path, matched=False) for chunk in result.context_chunks],
    )
    if result.search_mode == "item":
        # The item-level fallback has no chunks: its highlights are the only excerpts.
        view["snippets"] = list(result.highlights)
    if explain and result.explanation is not None and not result.matched_chunks:
        # At chunk level the result's explanation is its best chunk's, shown there.
        view["explanation"] = result.explanation.to_dict()
    if content is not None:
        view["content"] = content
    return view
