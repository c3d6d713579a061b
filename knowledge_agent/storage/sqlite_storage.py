"""SQLiteStorageManager (being written)."""


class SQLiteStorageManager:
    pass
