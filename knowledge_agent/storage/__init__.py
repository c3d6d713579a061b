"""SQLite storage: the source of truth for items and chunks.

:class:`SQLiteStorageManager` also owns the stores of the other rows on its connection:
``storage.sources`` (knowledge bases, collected roots, tracked files) and
``storage.doc_sources`` (crawled doc sources and their pages).
"""

from knowledge_agent.storage.sqlite_storage import SQLiteStorageManager

__all__ = ["DATABASE_FILE", "SQLiteStorageManager"]

DATABASE_FILE = "knowledge.sqlite3"
"""The database's file name in a data folder."""
