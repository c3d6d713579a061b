"""ItemSummary: what a search result says about its document — everything but the text."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

from knowledge_agent.models._serialize import copy_json, fields_from_json, fields_to_json
from knowledge_agent.models.knowledge_item import KnowledgeItem, utc_now

__all__ = ["SUMMARY_FIELDS", "ItemSummary"]

SUMMARY_FIELDS = tuple(spec.name for spec in fields(KnowledgeItem) if spec.name != "content")
"""The fields of a :class:`KnowledgeItem` a summary keeps: all but ``content``."""


@dataclass
class ItemSummary:
    """A stored item without its ``content``; ``content_chars`` is the text's length.

    What serialised results (``--json``, the MCP tools, ``SearchResult.to_dict``) say of
    their document: one hit in a 700 KB file must not make every answer 700 KB.
    ``get_item(summary.id)`` gives the text.
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
        """The summary of an item (a search result's item's text is not read for it)."""
        chars = getattr(item, "content_chars", None)
        values = {name: copy_json(getattr(item, name)) for name in SUMMARY_FIELDS}
        return cls(content_chars=len(item.content) if chars is None else chars, **values)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; datetimes become ISO 8601 strings."""
        return fields_to_json(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ItemSummary:
        """Build a summary from ``to_dict`` output (or a ``KnowledgeItem.to_dict()``, whose
        text only gives the length)."""
        kwargs = fields_from_json(cls, data)
        if "content_chars" not in data and isinstance(data.get("content"), str):
            kwargs["content_chars"] = len(data["content"])
        return cls(**kwargs)
