"""One JSON view of a search result, for every interface: ``search --json`` and its other
data formats, the terminal renderer's locations and the MCP tools.

Chunk first: each matched chunk with its passage (the part that answers best) and where
that passage is (``location``, ``heading``/``heading_path``, lines or page, ``link``), its
evidence ref, score and explanation; the document as a summary without its text.

Where a passage is, by source: a file ``path:12-30``, a PDF ``path p.3``, a crawled page
its link (``https://…/page#section``, the bare page URL before its first anchored heading;
never a line range, which means nothing in a browser). The evidence ref is something else:
its ``#L12-L30`` is always a line range of the stored text, for citing and re-checking.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from knowledge_agent.models.evidence import evidence_ref
from knowledge_agent.models.item_summary import ItemSummary
from knowledge_agent.models.knowledge_item import KnowledgeItem
from knowledge_agent.models.result_item import content_chars
from knowledge_agent.models.search_result import MatchedChunk, Passage, SearchResult

__all__ = [
    "chunk_heading",
    "chunk_location",
    "chunk_view",
    "item_path",
    "item_view",
    "location",
    "result_view",
]

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


def location(path: str, metadata: Mapping[str, Any], passage: Passage | None = None) -> str:
    """Where a chunk's text (or, given, its ``passage``) is, as a reader opens it.

    A crawled page (``url`` in the metadata): the passage's link, else the chunk's
    ``url#section``, else the bare page URL (a PDF from the web: ``url p.3``), never a line
    range; a PDF: ``path p.3`` (or ``p.3-4``); text: ``path:12-30``; else ``path``. What
    the passage does not say is taken from the chunk.
    """
    url = metadata.get("url")
    crawled = isinstance(url, str) and bool(url)
    if crawled:
        link = (passage.link if passage is not None else "") or url
        if "#" in link:
            return link
        path = link
    page, page_end = metadata.get("page"), metadata.get("page_end")
    if passage is not None and passage.page is not None:
        page = page_end = passage.page
    if isinstance(page, int):
        pages = f"{page}-{page_end}" if isinstance(page_end, int) and page_end != page else page
        return f"{path} p.{pages}".strip()
    if crawled:
        return path
    start, end = _lines(metadata, passage)
    if isinstance(start, int):
        lines = f"{start}-{end}" if isinstance(end, int) and end != start else str(start)
        return f"{path}:{lines}"
    return path


def _lines(metadata: Mapping[str, Any], passage: Passage | None) -> tuple[Any, Any]:
    """The first and last line of the passage when it has them, else of the chunk."""
    if passage is not None and passage.start_line is not None:
        return passage.start_line, passage.end_line
    return metadata.get("start_line"), metadata.get("end_line")


def chunk_location(chunk: MatchedChunk, path: str) -> str:
    """Where a matched chunk's passage is (the chunk's own text without one)."""
    return location(path, chunk.metadata, chunk.passage)


def chunk_heading(chunk: MatchedChunk) -> str:
    """The section a matched chunk's passage sits in, ``Outer > Inner`` (the chunk's
    heading without a passage)."""
    return _heading(chunk.heading, chunk.passage)


def _heading(heading: str, passage: Passage | None) -> str:
    if passage is not None and passage.heading_path:
        return " > ".join(passage.heading_path)
    return heading


def _link(metadata: Mapping[str, Any], passage: Passage | None) -> str:
    """What a browser opens: the passage's link, else a crawled chunk's ``url``; "" for
    files."""
    if passage is not None and passage.link:
        return passage.link
    url = metadata.get("url")
    return url if isinstance(url, str) else ""


def chunk_view(
    chunk: MatchedChunk, path: str, *, matched: bool = True, explain: bool = False
) -> dict[str, Any]:
    """A chunk as data. ``location``, ``heading``/``heading_path``, ``start_line``/
    ``end_line`` (``page``), ``link`` and ``evidence_ref`` say where its passage is when it
    has one (``passage``: its text, positions and lines), else where the chunk is;
    ``content`` is the whole chunk. A matched chunk has its ``evidence_ref``, ``score`` and
    ``passage`` (None without one), and its ``explanation`` with ``explain``; a context
    neighbour has none of them."""
    meta, passage = chunk.metadata, chunk.passage if matched else None
    view: dict[str, Any] = {"chunk_id": chunk.chunk_id}
    if matched:
        view["evidence_ref"] = (
            (passage.evidence_ref if passage is not None else "")
            or chunk.evidence_ref
            or evidence_ref(chunk.chunk_id, path, meta, chunk.content)
        )
        view["score"] = round(chunk.score, 6)
    heading = _heading(chunk.heading, passage)
    if passage is not None and passage.heading_path:
        heading_path = list(passage.heading_path)
    else:
        heading_path = [heading] if heading else []
    start, end = _lines(meta, passage)
    view.update(
        location=location(path, meta, passage),
        heading=heading,
        heading_path=heading_path,
        link=_link(meta, passage),
        chunk_index=chunk.chunk_index,
        start_position=chunk.start_position,
        end_position=chunk.end_position,
        start_line=start,
        end_line=end,
    )
    view.update({shown: meta[key] for key, shown in _SHOWN_METADATA.items() if meta.get(key)})
    if passage is not None and passage.page is not None:
        view["page"] = passage.page
        view.pop("page_end", None)
    if matched:
        view["passage"] = None if passage is None else passage.to_dict()
    view["content"] = chunk.content
    if matched and explain and chunk.explanation is not None:
        view["explanation"] = chunk.explanation.to_dict()
    return view


def item_view(item: ItemSummary | KnowledgeItem) -> dict[str, Any]:
    """A document as a result names it: ids, title, path (its file path or URL; None for
    added text), facets, size — not its text."""
    return {
        "item_id": item.id,
        "title": item.title,
        "path": item.source_uri,
        "kb": item.kb,
        "source_type": item.source_type,
        "doc_type": item.doc_type,
        "language": item.language,
        "content_chars": content_chars(item),
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
