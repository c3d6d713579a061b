"""Text cut to fit an answer, shared by the tool modules."""

from __future__ import annotations

__all__ = ["clip"]


def clip(text: str, max_chars: int) -> tuple[str, bool]:
    """``text`` cut to ``max_chars`` (ending in "…" when cut), and whether it was cut."""
    if len(text) <= max_chars:
        return text, False
    return (text[: max_chars - 1].rstrip() + "…") if max_chars > 0 else "", True
