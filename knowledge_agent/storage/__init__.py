"""SQLite storage: the source of truth for items and chunks."""

from knowledge_agent.storage.sqlite_storage import SQLiteStorageManager

__all__ = ["DATABASE_FILE", "SQLiteStorageManager"]

DATABASE_FILE = "knowledge.sqlite3"
"""The database's file name in a data folder."""
