"""The one way an item is made from a text: added text, a collected file and a crawled page
all go through :func:`build_item`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from knowledge_agent.analysis import detect_language
from knowledge_agent.models import KnowledgeItem
from knowledge_agent.models.knowledge_item import utc_now
from knowledge_agent.storage import SQLiteStorageManager

__all__ = ["build_item"]


def build_item(
    storage: SQLiteStorageManager,
    content: str,
    *,
    item_id: str | None = None,
    title: str = "",
    source_type: str = "text",
    source_uri: str | None = None,
    content_type: str = "text/plain",
    doc_type: str = "",
    language: str | None = None,
    tags: Iterable[str] = (),
    metadata: Mapping[str, Any] | None = None,
    kb: str = "default",
) -> KnowledgeItem:
    """An item holding ``content``, not yet saved.

    With the ``item_id`` of a stored item it is that item's next version: same id, same
    creation time (read without the old text), updated now. ``language`` is detected from
    the text when None.
    """
    now = utc_now()
    facts = storage.item_facts([item_id]).get(item_id) if item_id else None
    item = KnowledgeItem(
        title=title,
        content=content,
        source_type=source_type,
        source_uri=source_uri,
        content_type=content_type,
        doc_type=doc_type,
        language=detect_language(content) if language is None else language,
        tags=list(tags),
        metadata=dict(metadata or {}),
        kb=kb,
        created_at=datetime.fromisoformat(facts.created_at) if facts else now,
        updated_at=now,
    )
    if item_id is not None:
        item.id = item_id
    return item
