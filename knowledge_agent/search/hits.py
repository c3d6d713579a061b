"""What the engines return: plain hits, hydrated from SQLite later by SearchEngineImpl."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ChunkHit", "ItemHit"]


@dataclass(frozen=True)
class ChunkHit:
    """A chunk one engine scored for a query; higher ``score`` is better."""

    chunk_id: str
    item_id: str
    chunk_index: int
    score: float


@dataclass(frozen=True)
class ItemHit:
    """An item one engine scored for a query (the item-level fallback)."""

    item_id: str
    score: float
