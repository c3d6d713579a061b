"""Small pieces every tool module shares: argument bounds, cut text, how a source is named."""

from __future__ import annotations

from knowledge_agent.errors import QueryError
from knowledge_agent.models import KnowledgeItem

__all__ = ["bounded", "clip", "item_path"]


def bounded(name: str, value: object, low: int, high: int) -> int:
    """``value`` if it is an integer within ``low``..``high``; ``QueryError`` naming it if not.

    The MCP schema bounds every integer too; this guards the Python callers of the tools.
    """
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise QueryError(f"{name} must be an integer from {low} to {high}, got {value!r}")
    return value


def clip(text: str, max_chars: int) -> tuple[str, bool]:
    """``text`` cut to ``max_chars`` (ending in "…" when cut), and whether it was cut."""
    if len(text) <= max_chars:
        return text, False
    return (text[: max_chars - 1].rstrip() + "…") if max_chars > 0 else "", True


def item_path(item: KnowledgeItem) -> str:
    """What a result names as its source: the file path or URL, else the title, else the id."""
    return item.source_uri or item.title or item.id
