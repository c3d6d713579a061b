"""KnowledgeItem: one whole document (a file, a page, a piece of text)."""

from __future__ import annotations

import hashlib
import re
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from knowledge_agent.models._serialize import fields_from_json, fields_to_json

__all__ = ["KB_NAME", "KnowledgeItem", "content_hash", "utc_now"]

KB_NAME = re.compile(r"\w[\w.-]{0,63}")
"""A knowledge base's name (``fullmatch``): a word, then word characters, dots, dashes."""


def utc_now() -> datetime:
    """The current time as a timezone-aware UTC datetime."""
    return datetime.now(timezone.utc)


def content_hash(content: str) -> str:
    """SHA-256 of the text, hex; how items detect that their content changed."""
    return hashlib.sha256(content.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass
class KnowledgeItem:
    """A document as stored: its text, where it came from and how to find it.

    ``content_hash`` is computed from ``content`` when left empty; ``kb`` names
    the knowledge base the item belongs to.
    """

    title: str = ""
    content: str = ""
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
    id: str = field(default_factory=lambda: str(uuid.uuid4()))

    def __post_init__(self) -> None:
        if not self.content_hash:
            self.content_hash = content_hash(self.content)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; datetimes become ISO 8601 strings."""
        return fields_to_json(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> KnowledgeItem:
        """Build an item from ``to_dict`` output; missing keys take their defaults."""
        return cls(**fields_from_json(cls, data))
