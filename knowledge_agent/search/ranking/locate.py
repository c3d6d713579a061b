"""Passages: the part of a matched chunk that answers, and where it is.

A chunk is up to a page of text; what a reader needs first is the block around the chunk's
best line of evidence (:mod:`~knowledge_agent.search.ranking.passages`): its paragraph, list or
table, or a fenced code block whole. A heading alone takes the block under it, a paragraph
that ends with a colon takes the block it introduces ("set it like this:" and the code), and
indented blocks after a block belong to it (a reST literal block or directive body, a list
item's continuation). The passage is then located from the chunk's metadata: its lines of
the stored text (or PDF page), the section it sits in (``sections``: where later sections
start inside the chunk) and, for a crawled page, the link to the nearest anchored heading
(``anchors``).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Mapping
from typing import Any

from knowledge_agent.models.evidence import evidence_ref
from knowledge_agent.models.knowledge_chunk import KnowledgeChunk
from knowledge_agent.models.search_result import Passage

__all__ = ["blocks", "heading_only", "link_at", "locate", "passage_span"]

_FENCE = re.compile(r"[ ]{0,3}(`{3,}|~{3,})")
_HEADING = re.compile(r"[ ]{0,3}#{1,6}(?:[ \t]|$)")
_HEADING_PATH = " > "
_ADORNMENT = re.compile(r"([!-/:-@\[-`{-~])\1{2,}")
_RST_LABEL = re.compile(r"\.\. _[^:]+:\s*$")


def blocks(text: str) -> list[tuple[int, int, str]]:
    """``(start, end, kind)`` of each block of ``text``: ``"heading"`` (an ATX heading line),
    ``"code"`` (a fenced block, fences included; an unclosed one runs to the end) or
    ``"text"`` (lines up to a blank line, a heading or a fence)."""
    found: list[tuple[int, int, str]] = []
    start: int | None = None  # of the open text block
    end = 0
    fence: str | None = None
    fence_start = 0
    position = 0
    for line in text.splitlines(keepends=True):
        line_start, position = position, position + len(line)
        body = line.rstrip("\r\n")
        line_end = line_start + len(body)
        if fence is not None:
            stripped = body.strip()
            if stripped.startswith(fence) and not stripped.strip(fence[0]):
                found.append((fence_start, line_end, "code"))
                fence = None
            continue
        opening = _FENCE.match(body)
        if opening or _HEADING.match(body) or not body.strip():
            if start is not None:
                found.append((start, end, "text"))
                start = None
            if opening:
                fence, fence_start = opening.group(1), line_start
            elif body.strip():
                found.append((line_start, line_end, "heading"))
            continue
        if start is None:
            start = line_start
        end = line_end
    if fence is not None:
        found.append((fence_start, len(text.rstrip()), "code"))
    elif start is not None:
        found.append((start, end, "text"))
    return [_rst_title(text, block) for block in found]


def _rst_title(text: str, block: tuple[int, int, str]) -> tuple[int, int, str]:
    """A text block that is a reST section title (a line under, or between, adornment
    lines) or only labels (``.. _name:``) is a heading: it introduces what follows."""
    start, end, kind = block
    if kind != "text":
        return block
    lines = text[start:end].split("\n")
    if all(_RST_LABEL.match(line) for line in lines):
        return start, end, "heading"
    if 2 <= len(lines) <= 3 and _ADORNMENT.fullmatch(lines[-1].rstrip()):
        title = lines[-2].strip()
        if title and len(lines[-1].rstrip()) >= len(title):
            return start, end, "heading"
    return block


def heading_only(text: str) -> bool:
    """Whether ``text`` holds headings (or reST labels) and nothing they introduce."""
    found = blocks(text)
    return bool(found) and all(kind == "heading" for _, _, kind in found)


def passage_span(text: str, unit: tuple[int, int] | None) -> tuple[int, int]:
    """The passage of a chunk's ``text`` around its best ``unit`` (offsets in ``text``);
    without a unit, or when no block holds it, the whole text."""
    found = blocks(text)
    whole = (found[0][0], found[-1][1]) if found else (0, len(text))
    if unit is None or unit[1] <= unit[0]:
        return whole
    index = next(
        (i for i, (start, end, _) in enumerate(found) if start <= unit[0] < max(end, start + 1)),
        None,
    )
    if index is None:
        return whole
    start, end, kind = found[index]
    if kind == "heading":  # a heading (or a label and a title) introduces the next block
        last = next((i for i in range(index, len(found)) if found[i][2] != "heading"), None)
        if last is not None:
            end, index = found[last][1], last
    elif (
        kind == "text"
        and text[start:end].rstrip().endswith(":")
        and index + 1 < len(found)
        and found[index + 1][2] != "heading"
    ):
        end, index = found[index + 1][1], index + 1
    # Indented blocks after it belong to it: a reST literal block or directive body, a list
    # item's continuation, an indented code block.
    for next_start, next_end, next_kind in found[index + 1 :]:
        if next_kind != "text" or text[next_start] not in " \t":
            break
        end = next_end
    return start, end


def locate(
    chunk: KnowledgeChunk,
    unit: tuple[int, int] | None,
    path: str,
    *,
    title: str = "",
) -> Passage:
    """The passage of ``chunk`` around ``unit`` (its best line, offsets in the chunk), with
    where it is; ``path`` is the document's path or URL as a reference names it, ``title``
    the heading of text before any heading when the chunk has none."""
    text = chunk.content
    start, end = passage_span(text, unit)
    meta = chunk.metadata
    first_line = meta.get("start_line")
    start_line = end_line = None
    if isinstance(first_line, int):
        start_line = first_line + text.count("\n", 0, start)
        end_line = first_line + text.count("\n", 0, max(end - 1, start))
    lines = {"start_line": start_line, "end_line": end_line} if start_line else {}
    return Passage(
        text=text[start:end],
        start_position=chunk.start_position + start,
        end_position=chunk.start_position + end,
        start_line=start_line,
        end_line=end_line,
        page=_page(meta, start),
        heading_path=_heading_path(chunk, start, title),
        link=link_at(meta, start),
        evidence_ref=evidence_ref(chunk.id, path, lines, text),
    )


def _offsets(meta: Mapping[str, Any], key: str) -> list[tuple[int, str]]:
    """``[offset, value]`` pairs of chunk metadata, well-formed ones only, in order."""
    pairs = meta.get(key)
    if not isinstance(pairs, list):
        return []
    return sorted(
        (int(pair[0]), str(pair[1]))
        for pair in pairs
        if isinstance(pair, list | tuple)
        and len(pair) == 2
        and isinstance(pair[0], int)
        and pair[1]
    )


def _heading_path(chunk: KnowledgeChunk, start: int, title: str) -> list[str]:
    sections = _offsets(chunk.metadata, "sections")
    index = bisect.bisect_right([offset for offset, _ in sections], start)
    if index:
        heading = sections[index - 1][1]
    else:
        heading = chunk.heading
        if sections and ", " in heading:  # merged sections: the chunk starts in the first
            heading = heading.split(", ", 1)[0]
    heading = heading or title
    return [part for part in heading.split(_HEADING_PATH) if part] if heading else []


def _page(meta: Mapping[str, Any], start: int) -> int | None:
    page = meta.get("page")
    if not isinstance(page, int):
        return None
    starts = meta.get("page_starts")
    if isinstance(starts, list) and all(isinstance(s, int) for s in starts):
        return page + bisect.bisect_right(starts, start)
    return page


def link_at(meta: Mapping[str, Any], start: int) -> str:
    """What a reader opens for the text at offset ``start`` of a chunk with this metadata:
    a crawled page's URL with the nearest anchored heading at or before it, else ""."""
    url = meta.get("url")
    if not isinstance(url, str) or not url:
        return ""
    anchors = [(offset, name) for offset, name in _offsets(meta, "anchors") if offset <= start]
    if not anchors:
        return url
    return f"{url.split('#', 1)[0]}#{anchors[-1][1]}"
