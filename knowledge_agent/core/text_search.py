"""Literal or regular-expression search over the stored text, line by line (like grep)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from knowledge_agent.models import KnowledgeChunk, KnowledgeItem
from knowledge_agent.patterns import Match, TextPattern
from knowledge_agent.search.ranking.locate import link_at

__all__ = ["TextMatch", "compile_pattern", "linked", "matching_lines"]


@dataclass(frozen=True)
class TextMatch:
    """One matching line: where it is (item, path, 1-based line number of the stored text)
    and its text; ``link``, for a line of a crawled page, is what a reader opens: the
    page's URL with the anchor of the section the line is in (see :func:`linked`)."""

    item_id: str
    kb: str
    title: str
    source_uri: str | None
    line_number: int
    line: str
    link: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def compile_pattern(
    pattern: str, *, regex: bool, case_sensitive: bool, name: str = "pattern"
) -> TextPattern:
    """The pattern, ready for one scan; ``QueryError`` naming ``name`` for an empty, too
    long or invalid one (and, while scanning, for one that overruns its matching time)."""
    return TextPattern(pattern, regex=regex, case_sensitive=case_sensitive, name=name)


def _clip(line: str, match: Match, width: int) -> str:
    """The line cut to ``width`` characters around the match, with ``…`` where cut."""
    if len(line) <= width:
        return line
    start = max(0, min(match.start() - width // 3, len(line) - width))
    piece = line[start : start + width]
    return ("…" if start else "") + piece + ("…" if start + width < len(line) else "")


def matching_lines(
    items: Iterable[KnowledgeItem],
    expression: TextPattern,
    *,
    source_keyword: str | None = None,
    max_chars_per_line: int = 180,
) -> Iterator[TextMatch]:
    """Every line (the text between two ``\\n``) of every item that matches, in item then
    line order.

    ``source_keyword`` keeps items whose path/URI or title contains it (case-insensitive).
    """
    keyword = source_keyword.lower() if source_keyword else None
    for item in items:
        if keyword and keyword not in f"{item.source_uri or ''}\n{item.title}".lower():
            continue
        candidates = expression.candidate_lines(item.content)
        if not candidates:  # one search of the text skips most items
            continue
        lines = item.content.split("\n")
        for index in candidates:
            found = expression.search(lines[index])
            if found:
                yield TextMatch(
                    item_id=item.id,
                    kb=item.kb,
                    title=item.title,
                    source_uri=item.source_uri,
                    line_number=index + 1,
                    line=_clip(lines[index].rstrip("\r"), found, max_chars_per_line),
                )


def linked(
    matches: Iterable[TextMatch], chunks_of: Callable[[str], Sequence[KnowledgeChunk]]
) -> list[TextMatch]:
    """The matches, each line of a crawled page given its ``link``.

    A line of a page's stored text is located by the chunk that covers it (the latest
    starting one): the chunk's ``url`` is the page with the anchor of the nearest heading
    before the chunk, and its ``anchors`` (``[offset in the chunk, anchor]`` of the
    anchored headings inside it), when it has them, move that to the nearest heading before
    the line. ``chunks_of(item_id)`` gives an item's chunks; it is asked only for items
    whose source is a web address, once each.
    """
    chunks: dict[str, Sequence[KnowledgeChunk]] = {}
    out: list[TextMatch] = []
    for match in matches:
        uri = match.source_uri or ""
        if not match.link and uri.startswith(("http://", "https://")):
            if match.item_id not in chunks:
                chunks[match.item_id] = chunks_of(match.item_id)
            link = _line_link(chunks[match.item_id], match.line_number)
            if link:
                match = replace(match, link=link)
        out.append(match)
    return out


def _line_link(chunks: Sequence[KnowledgeChunk], line_number: int) -> str:
    """The link of a line of a crawled page's text ("" when its chunks carry no url)."""
    covering: KnowledgeChunk | None = None
    for chunk in chunks:
        start, url = chunk.metadata.get("start_line"), chunk.metadata.get("url")
        if not isinstance(start, int) or not isinstance(url, str) or not url:
            continue
        if start <= line_number and (
            covering is None or chunk.start_position > covering.start_position
        ):
            covering = chunk
    if covering is None:
        urls = [c.metadata.get("url") for c in chunks if isinstance(c.metadata.get("url"), str)]
        return urls[0].split("#", 1)[0] if urls else ""  # before every chunk: the page
    return link_at(covering.metadata, _line_offset(covering, line_number))


def _line_offset(chunk: KnowledgeChunk, line_number: int) -> int:
    """Where line ``line_number`` of the item starts within ``chunk`` (0 for its first
    line, which may start before the chunk; past the end for a line after it)."""
    offset = 0
    for _ in range(line_number - chunk.metadata["start_line"]):
        found = chunk.content.find("\n", offset)
        if found < 0:
            return len(chunk.content)
        offset = found + 1
    return offset
