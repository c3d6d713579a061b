"""What the stores of :class:`SQLiteStorageManager` are given: its guarded connection.

The manager keeps items, chunks and the index journal itself and owns a store per other
kind of row (``SourceStore``: knowledge bases, roots and tracked files; ``DocSourceStore``:
doc sources and pages). All of them share the manager's one connection through this
interface, so its lock, read-only check and write groups hold for every store, and a store
that writes an item writes it (with its journal entry) in its own transaction.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from knowledge_agent.models import KnowledgeChunk, KnowledgeItem

__all__ = ["StoreConnection"]


class StoreConnection(Protocol):
    """The manager's connection as its stores use it."""

    def reading(self, operation: str) -> AbstractContextManager[sqlite3.Connection]:
        """The connection under the manager's lock; sqlite3 errors become ``StorageError``
        naming ``operation``."""
        ...

    def writing(self, operation: str) -> AbstractContextManager[sqlite3.Connection]:
        """:meth:`reading`, in a transaction committed at the end (a savepoint inside a
        write group); refused with ``StorageError`` when the database is read-only."""
        ...

    def journal(self, conn: sqlite3.Connection, item_ids: Iterable[str], op: str) -> None:
        """Record that these items changed (``op``: ``"upsert"`` or ``"delete"``), for the
        indexes to replay."""
        ...

    def write_item(
        self, conn: sqlite3.Connection, item: KnowledgeItem, chunks: Sequence[KnowledgeChunk]
    ) -> None:
        """Upsert the item (creating its knowledge base), replace its chunks, journal it."""
        ...

    def write_items(
        self,
        conn: sqlite3.Connection,
        entries: Sequence[tuple[KnowledgeItem, Sequence[KnowledgeChunk]]],
    ) -> None:
        """:meth:`write_item` for each of these items, in order."""
        ...

    def delete_items(self, conn: sqlite3.Connection, item_ids: Sequence[str]) -> None:
        """Delete items (their chunks and tracking rows cascade) and journal the deletes."""
        ...
