"""ItemSummary: what a search result says about its document — everything but the text."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from knowledge_agent.models._serialize import copy_json, to_datetime
from knowledge_agent.models.knowledge_item import KnowledgeItem, utc_now

__all__ = ["ItemSummary"]


@dataclass
class ItemSummary:
    """A stored item without its ``content``; ``content_chars`` is the text's length.

    A result names its document but carries only the passages that matched: one hit in a
    700 KB file must not make every answer 700 KB. ``get_item(summary.id)`` gives the text.
    """

    id: str
    title: str = ""
    source_type: str = "text"
    source_uri: str | None = None
    content_type: str = "text/plain"
    doc_type: str = ""
    language: str = ""
    tags: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    content_hash: str = ""
    kb: str = "default"
    created_at: datetime = field(default_factory=utc_now)
    updated_at: datetime = field(default_factory=utc_now)
    content_chars: int = 0

    @classmethod
    def of(cls, item: KnowledgeItem) -> ItemSummary:
        """The summary of a whole item."""
        data = item.to_dict()
        data["content_chars"] = len(data.pop("content"))
        return cls.from_dict(data)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; datetimes become ISO 8601 strings."""
        return {
            "id": self.id,
            "title": self.title,
            "source_type": self.source_type,
            "source_uri": self.source_uri,
            "content_type": self.content_type,
            "doc_type": self.doc_type,
            "language": self.language,
            "tags": list(self.tags),
            "metadata": copy_json(self.metadata),
            "content_hash": self.content_hash,
            "kb": self.kb,
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
            "content_chars": self.content_chars,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ItemSummary:
        """Build a summary from ``to_dict`` output (or a ``KnowledgeItem.to_dict()``, whose
        text only gives the length)."""
        names = (
            "title", "source_type", "source_uri", "content_type", "doc_type", "language",
            "content_hash", "kb", "content_chars",
        )  # fmt: skip
        kwargs: dict[str, Any] = {name: data[name] for name in names if name in data}
        if "content_chars" not in data and isinstance(data.get("content"), str):
            kwargs["content_chars"] = len(data["content"])
        kwargs["tags"] = list(data.get("tags") or [])
        kwargs["metadata"] = copy_json(data.get("metadata") or {})
        for name in ("created_at", "updated_at"):
            if data.get(name) is not None:
                kwargs[name] = to_datetime(data[name])
        return cls(id=data["id"], **kwargs)
