"""ContentChunker (being written)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ChunkConfig:
    min_chunk_size: int = 100
    max_chunk_size: int = 1500
    overlap_ratio: float = 0.2


class ContentChunker:
    def __init__(self, config: ChunkConfig | None = None) -> None:
        self.config = config or ChunkConfig()
