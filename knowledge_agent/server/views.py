"""Small pieces every tool module shares: argument bounds and cut text."""

from __future__ import annotations

from knowledge_agent.errors import QueryError

__all__ = ["bounded", "clip"]


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
