"""KnowledgeChunk: one semantically whole piece of an item (R1.1)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from knowledge_agent.models._serialize import copy_json

__all__ = ["KnowledgeChunk"]


@dataclass
class KnowledgeChunk:
    """A piece of an item's content.

    ``content == item.content[start_position:end_position]`` always holds, so a
    citation can be re-derived from the item. ``metadata`` carries derived facts
    such as ``start_line`` / ``end_line`` and, for PDFs, ``page``.
    """

    id: str = field(default_factory=lambda: str(uuid.uuid4()))
    item_id: str = ""
    chunk_index: int = 0
    content: str = ""
    heading: str = ""
    start_position: int = 0
    end_position: int = 0
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field."""
        return {
            "id": self.id,
            "item_id": self.item_id,
            "chunk_index": self.chunk_index,
            "content": self.content,
            "heading": self.heading,
            "start_position": self.start_position,
            "end_position": self.end_position,
            "metadata": copy_json(self.metadata),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> KnowledgeChunk:
        """Build a chunk from ``to_dict`` output; missing keys take their defaults."""
        kwargs = {
            name: data[name]
            for name in (
                "id",
                "item_id",
                "chunk_index",
                "content",
                "heading",
                "start_position",
                "end_position",
            )
            if name in data
        }
        return cls(**kwargs, metadata=copy_json(data.get("metadata") or {}))
