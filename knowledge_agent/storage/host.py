"""What the storage mixins share of :class:`SQLiteStorageManager`: its connection guards and
journal (declared for type checking), and deleting items with their journal entries."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from knowledge_agent.models import KnowledgeChunk, KnowledgeItem

__all__ = ["StorageHost"]


class StorageHost:
    """Base of the mixins that :class:`SQLiteStorageManager` is composed of."""

    if TYPE_CHECKING:

        def _reading(self, operation: str) -> AbstractContextManager[sqlite3.Connection]: ...
        def _writing(self, operation: str) -> AbstractContextManager[sqlite3.Connection]: ...
        @staticmethod
        def _journal(conn: sqlite3.Connection, item_ids: Iterable[str], op: str) -> None: ...
        @staticmethod
        def _write_item(
            conn: sqlite3.Connection, item: KnowledgeItem, chunks: list[KnowledgeChunk]
        ) -> None: ...

    def _delete_items(self, conn: sqlite3.Connection, item_ids: Sequence[str]) -> None:
        """Delete items (their chunks and tracking rows cascade) and journal the deletes."""
        conn.executemany("DELETE FROM knowledge_items WHERE id = ?", [(i,) for i in item_ids])
        self._journal(conn, item_ids, "delete")
