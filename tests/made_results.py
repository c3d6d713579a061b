"""Helpers of the result view and renderer tests (no tests of its own): search results built
by hand over a stored text, with or without passages, as the engine would return them."""

from __future__ import annotations

from typing import Any

from knowledge_agent.models import ItemSummary, MatchedChunk, Passage, SearchResult
from knowledge_agent.models.evidence import evidence_ref

__all__ = ["chunk", "passage", "result", "span"]


def span(content: str, first: int, last: int) -> tuple[int, int]:
    """The character offsets of lines ``first`` to ``last`` (1-based, inclusive)."""
    lines = content.split("\n")
    start = sum(len(line) + 1 for line in lines[: first - 1])
    end = start + len("\n".join(lines[first - 1 : last]))
    return start, end


def passage(
    content: str,
    first: int,
    last: int,
    *,
    path: str = "docs/guide.md",
    heading_path: tuple[str, ...] = (),
    link: str = "",
    page: int | None = None,
) -> Passage:
    """The passage of lines ``first`` to ``last`` of ``content``, its ref citing them."""
    start, end = span(content, first, last)
    lines = {"start_line": first, "end_line": last}
    return Passage(
        text=content[start:end],
        start_position=start,
        end_position=end,
        start_line=first,
        end_line=last,
        page=page,
        heading_path=list(heading_path),
        link=link,
        evidence_ref=evidence_ref("p-" + str(first), path, lines, content[start:end]),
    )


def chunk(
    content: str,
    first: int,
    last: int,
    *,
    index: int = 0,
    heading: str = "",
    found: Passage | None = None,
    score: float = 0.5,
    **metadata: Any,
) -> MatchedChunk:
    """A matched chunk of lines ``first`` to ``last``, its passage ``found``."""
    start, end = span(content, first, last)
    return MatchedChunk(
        chunk_id=f"c{index}",
        content=content[start:end],
        heading=heading,
        chunk_index=index,
        start_position=start,
        end_position=end,
        score=score,
        metadata={"start_line": first, "end_line": last, **metadata},
        passage=found,
    )


def result(
    path: str | None,
    matched: list[MatchedChunk],
    *,
    title: str = "Guide",
    context: list[MatchedChunk] | None = None,
    highlights: list[str] | None = None,
) -> SearchResult:
    """A result of the document at ``path`` with these matched chunks, best first."""
    return SearchResult(
        item=ItemSummary(id="item-1", title=title, source_uri=path),
        relevance_score=0.8,
        confidence=0.6,
        highlights=highlights or [],
        matched_chunks=matched,
        context_chunks=context or [],
    )
