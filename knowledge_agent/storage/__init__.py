"""SQLite storage: the source of truth for items and chunks."""

from knowledge_agent.storage.sqlite_storage import SQLiteStorageManager

__all__ = ["SQLiteStorageManager"]
