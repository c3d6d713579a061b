"""Literal or regular-expression search over the stored text, line by line (like grep)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

from knowledge_agent.models import KnowledgeItem
from knowledge_agent.patterns import Match, TextPattern

__all__ = ["TextMatch", "compile_pattern", "matching_lines"]


@dataclass(frozen=True)
class TextMatch:
    """One matching line: where it is (item, path, 1-based line number) and its text."""

    item_id: str
    kb: str
    title: str
    source_uri: str | None
    line_number: int
    line: str

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
