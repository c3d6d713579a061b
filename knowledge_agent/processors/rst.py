"""reStructuredText: section titles found from their adornments, chunked per section.

A title is a line of text under-lined (and optionally over-lined) by a run of one
punctuation character at least as long as the title (or four characters long). As in
docutils, the level of a style (character + whether it has an overline) is the order in
which styles first appear, so each chunk carries the heading path ``Guide > Install``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from knowledge_agent.chunking import Section
from knowledge_agent.processors.base import (
    BaseDataSourceProcessor,
    Extraction,
    file_stem,
)
from knowledge_agent.processors.encoding import decode_bytes

__all__ = ["RstHeading", "RstProcessor", "find_rst_headings"]

_ADORNMENT = re.compile(r"([!-/:-@\[-`{-~])\1{2,}[ \t]*")


@dataclass(frozen=True)
class RstHeading:
    """A section title: where its adornment starts and ends, its text and level (1-based)."""

    start: int
    end: int
    text: str
    level: int


class RstProcessor(BaseDataSourceProcessor):
    """reStructuredText files; the title is the first section title."""

    name = "rst"
    extensions = frozenset({".rst", ".rest"})
    source_type = "text"
    content_type = "text/x-rst"

    def extract(self, data: bytes, path: str) -> Extraction:
        text, encoding = decode_bytes(data)
        headings = find_rst_headings(text)
        title = headings[0].text if headings else file_stem(path)
        return Extraction(
            content=text,
            title=title,
            # Without titles the text is plain paragraphs: the ordinary chunker will do.
            sections=rst_sections(text, headings) if headings else None,
            metadata={"encoding": encoding},
        )


def find_rst_headings(text: str) -> list[RstHeading]:
    """The section titles of ``text`` (``\\n`` line ends), in document order."""
    lines = text.split("\n")
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line) + 1)
    styles: list[tuple[str, bool]] = []
    headings: list[RstHeading] = []
    index = 0
    while index < len(lines):
        found = _title_at(lines, index)
        if found is None:
            index += 1
            continue
        style, title, size = found
        if style not in styles:
            styles.append(style)
        end = offsets[index + size] - 1  # the end of the last adornment line
        headings.append(RstHeading(offsets[index], end, title, styles.index(style) + 1))
        index += size
    return headings


def _title_at(lines: list[str], index: int) -> tuple[tuple[str, bool], str, int] | None:
    """``(style, title, number of lines)`` if a section title starts at line ``index``."""
    previous = lines[index - 1] if index > 0 else ""
    if previous.strip() and not _ADORNMENT.fullmatch(previous):
        return None  # a title follows a blank line, another title, or starts the text
    line = lines[index]
    over = _ADORNMENT.fullmatch(line)
    if over and index + 2 < len(lines):
        title = lines[index + 1].strip()
        under = _ADORNMENT.fullmatch(lines[index + 2])
        if (
            title
            and under
            and under.group(1) == over.group(1)
            and not _ADORNMENT.fullmatch(lines[index + 1])
        ):
            return (over.group(1), True), title, 3
    if over or not line.strip() or line[0].isspace() or index + 1 >= len(lines):
        return None
    under = _ADORNMENT.fullmatch(lines[index + 1])
    title = line.strip()
    if under and len(lines[index + 1].rstrip()) >= min(len(title), 4):
        return (under.group(1), False), title, 2
    return None


def rst_sections(text: str, headings: list[RstHeading]) -> list[Section]:
    """One section per title (to the next title) with its heading path.

    A title directly followed by another one (an empty section) joins the next section,
    so a chapter title and its first sub-title stay together; text before the first title
    (labels, directives) joins the first section.
    """
    sections: list[Section] = []
    stack: list[RstHeading] = []
    # Text before the first title (labels, directives) joins the first section.
    pending_start: int | None = 0
    for position, heading in enumerate(headings):
        while stack and stack[-1].level >= heading.level:
            stack.pop()
        stack.append(heading)
        end = headings[position + 1].start if position + 1 < len(headings) else len(text)
        start = heading.start if pending_start is None else pending_start
        if not text[heading.end : end].strip() and position + 1 < len(headings):
            pending_start = start
            continue
        pending_start = None
        path = " > ".join(h.text for h in stack)
        sections.append(Section(start, end, path, {"section_level": heading.level}))
    return sections
