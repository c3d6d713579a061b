"""SQLiteStorageManager: items, chunks and the index journal in one SQLite file.

SQLite is the source of truth; the Whoosh and TF-IDF indexes are derived from it.
Every write appends to ``index_journal`` in the same transaction as the change, so
an index that missed a write (a crash between the two commits) can replay it.

A database that cannot be opened for writing — a full disk, a read-only mount — is
opened read-only instead: reads work, writes raise ``StorageError`` saying why. On a full
disk a WAL database whose ``-shm`` file does not exist yet cannot even be read normally
(SQLite must size that file); when its ``-wal`` file is empty the main file alone is the
whole database, and it is read as an immutable file.

Knowledge bases, collected roots and tracked files (``storage.sources``, a
:class:`SourceStore`) and crawled doc sources and pages (``storage.doc_sources``, a
:class:`DocSourceStore`) are stores the manager owns. They share its one connection through
:class:`StoreConnection`, so the same lock, read-only check, write groups and journal apply.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sqlite3
import threading
import urllib.parse
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from knowledge_agent.errors import NotFoundError, QueryError, StorageError
from knowledge_agent.faults import Faults
from knowledge_agent.models import ItemSummary, KnowledgeChunk, KnowledgeItem
from knowledge_agent.storage.chunk_names import (
    INSERT_NAMES,
    name_rows,
    names_query,
    sqlite_chunk_names_migration,
)
from knowledge_agent.storage.doc_sources import DOC_SOURCES_MIGRATION, DocSourceStore
from knowledge_agent.storage.sources import SOURCES_MIGRATION, SourceStore

__all__ = ["SCHEMA_VERSION", "SQLiteStorageManager"]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

Migration = Sequence[str] | Callable[[sqlite3.Connection], None]

_MIGRATIONS: list[Migration] = [
    # Version 1: the initial schema.
    [
        """CREATE TABLE knowledge_items (
            id TEXT PRIMARY KEY,
            title TEXT NOT NULL DEFAULT '',
            content TEXT NOT NULL DEFAULT '',
            source_type TEXT NOT NULL DEFAULT '',
            source_uri TEXT,
            content_type TEXT NOT NULL DEFAULT '',
            doc_type TEXT NOT NULL DEFAULT '',
            language TEXT NOT NULL DEFAULT '',
            tags TEXT NOT NULL DEFAULT '[]',
            metadata TEXT NOT NULL DEFAULT '{}',
            content_hash TEXT NOT NULL DEFAULT '',
            kb TEXT NOT NULL DEFAULT 'default',
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL
        )""",
        "CREATE INDEX idx_items_kb ON knowledge_items (kb)",
        "CREATE INDEX idx_items_source_type ON knowledge_items (source_type)",
        "CREATE INDEX idx_items_source_uri ON knowledge_items (source_uri)",
        # Serves the (created_at, id) order of list_items and the keyset paging of iter_items.
        "CREATE INDEX idx_items_created_id ON knowledge_items (created_at, id)",
        """CREATE TABLE knowledge_chunks (
            id TEXT PRIMARY KEY,
            item_id TEXT NOT NULL,
            chunk_index INTEGER NOT NULL,
            content TEXT NOT NULL DEFAULT '',
            heading TEXT NOT NULL DEFAULT '',
            start_position INTEGER NOT NULL DEFAULT 0,
            end_position INTEGER NOT NULL DEFAULT 0,
            metadata TEXT NOT NULL DEFAULT '{}',
            FOREIGN KEY (item_id) REFERENCES knowledge_items(id) ON DELETE CASCADE
        )""",
        # (item_id, chunk_index) serves every lookup by item id too: no index on item_id alone
        # (databases created before keep theirs; it only costs writes).
        "CREATE UNIQUE INDEX idx_chunks_item_chunk ON knowledge_chunks (item_id, chunk_index)",
        """CREATE TABLE index_journal (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            item_id TEXT NOT NULL,
            op TEXT NOT NULL CHECK (op IN ('upsert', 'delete'))
        )""",
        "CREATE TABLE kv (key TEXT PRIMARY KEY, value TEXT)",
    ],
    # Version 2: knowledge bases, collected roots and tracked source files.
    SOURCES_MIGRATION,
    # Version 3: documentation sources crawled from the web, and their pages.
    DOC_SOURCES_MIGRATION,
    # Version 4: the names code chunks define and use, for the symbol / references filters.
    sqlite_chunk_names_migration,
]

SCHEMA_VERSION = len(_MIGRATIONS)

_BUSY_TIMEOUT_S = 30.0
# Less free space than this where the database lives: a failed open or write means "full".
_LOW_SPACE = 1 << 20
# Below SQLite's default limit of 999 host parameters on old builds.
_MAX_VARIABLES = 500

# The columns of an item and of a chunk row, in order (the postgresql storage has the same).
ITEM_COLUMNS = (
    "id",
    "title",
    "content",
    "source_type",
    "source_uri",
    "content_type",
    "doc_type",
    "language",
    "tags",
    "metadata",
    "content_hash",
    "kb",
    "created_at",
    "updated_at",
)
CHUNK_COLUMNS = (
    "id",
    "item_id",
    "chunk_index",
    "content",
    "heading",
    "start_position",
    "end_position",
    "metadata",
)
_ITEM_SELECT = f"SELECT {', '.join(ITEM_COLUMNS)} FROM knowledge_items"
_SUMMARY_SELECT = (
    f"SELECT {', '.join(name for name in ITEM_COLUMNS if name != 'content')}, "
    "length(content) AS content_chars FROM knowledge_items"
)
_FILTER_FIELDS = ("kb", "source_type", "doc_type", "language")
# A file's modification time when it has one (what "recent" means to its author), else when
# the item was last written.
_FACTS_SELECT = (
    "SELECT id, kb, source_type, doc_type, source_uri, title, created_at, "
    "COALESCE(json_extract(metadata, '$.modified_at'), updated_at) AS changed_at "
    "FROM knowledge_items"
)
_CHUNK_SELECT = f"SELECT {', '.join(CHUNK_COLUMNS)} FROM knowledge_chunks"
_ITEM_UPSERT = (
    f"INSERT INTO knowledge_items ({', '.join(ITEM_COLUMNS)}) "
    f"VALUES ({', '.join('?' for _ in ITEM_COLUMNS)}) "
    "ON CONFLICT(id) DO UPDATE SET "
    + ", ".join(f"{name} = excluded.{name}" for name in ITEM_COLUMNS[1:])
)
_KB_INSERT = (
    "INSERT INTO knowledge_bases (name, created_at) VALUES (?, ?) ON CONFLICT(name) DO NOTHING"
)
_CHUNK_INSERT = (
    f"INSERT INTO knowledge_chunks ({', '.join(CHUNK_COLUMNS)}) "
    f"VALUES ({', '.join('?' for _ in CHUNK_COLUMNS)})"
)


# One encoder: json.dumps builds a new one per call when given any option.
_ENCODE = json.JSONEncoder(ensure_ascii=False).encode


def _dumps(value: Any) -> str:
    return _ENCODE(value)


def _loads(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise StorageError(f"corrupt JSON in {what}: {exc}") from exc


def _item_to_row(item: KnowledgeItem) -> tuple[Any, ...]:
    return (
        item.id,
        item.title,
        item.content,
        item.source_type,
        item.source_uri,
        item.content_type,
        item.doc_type,
        item.language,
        _dumps(list(item.tags)),
        _dumps(item.metadata),
        item.content_hash,
        item.kb,
        item.created_at.isoformat(),
        item.updated_at.isoformat(),
    )


def _row_to_item(row: sqlite3.Row) -> KnowledgeItem:
    return KnowledgeItem(content=row["content"], **item_fields(row))


def _row_to_summary(row: sqlite3.Row) -> ItemSummary:
    return ItemSummary(content_chars=row["content_chars"], **item_fields(row))


def item_fields(row: sqlite3.Row) -> dict[str, Any]:
    """An item row's fields but the text."""
    what = f"item {row['id']!r}"
    try:
        created_at = datetime.fromisoformat(row["created_at"])
        updated_at = datetime.fromisoformat(row["updated_at"])
    except (TypeError, ValueError) as exc:
        raise StorageError(f"corrupt timestamp in {what}: {exc}") from exc
    return dict(
        id=row["id"],
        title=row["title"],
        source_type=row["source_type"],
        source_uri=row["source_uri"],
        content_type=row["content_type"],
        doc_type=row["doc_type"],
        language=row["language"],
        tags=_loads(row["tags"], what),
        metadata=_loads(row["metadata"], what),
        content_hash=row["content_hash"],
        kb=row["kb"],
        created_at=created_at,
        updated_at=updated_at,
    )


@dataclass(frozen=True)
class ItemFacts:
    """An item's fields that ranking and result views need, without its text."""

    id: str
    kb: str
    source_type: str
    doc_type: str
    source_uri: str | None
    title: str
    created_at: str
    changed_at: str


def _row_to_facts(row: sqlite3.Row) -> ItemFacts:
    return ItemFacts(**{name: row[name] for name in ItemFacts.__dataclass_fields__})


def _chunk_to_row(chunk: KnowledgeChunk, item_id: str) -> tuple[Any, ...]:
    return (
        chunk.id,
        item_id,
        chunk.chunk_index,
        chunk.content,
        chunk.heading,
        chunk.start_position,
        chunk.end_position,
        _dumps(chunk.metadata),
    )


def row_to_chunk(row: sqlite3.Row) -> KnowledgeChunk:
    """A chunk row as its :class:`KnowledgeChunk` (also for rows read like SQLite's)."""
    return KnowledgeChunk(
        id=row["id"],
        item_id=row["item_id"],
        chunk_index=row["chunk_index"],
        content=row["content"],
        heading=row["heading"],
        start_position=row["start_position"],
        end_position=row["end_position"],
        metadata=_loads(row["metadata"], f"chunk {row['id']!r}"),
    )


def _batches(ids: Iterable[str]) -> Iterator[list[str]]:
    unique = list(dict.fromkeys(ids))
    for start in range(0, len(unique), _MAX_VARIABLES):
        yield unique[start : start + _MAX_VARIABLES]


def _placeholders(count: int) -> str:
    return ", ".join("?" * count)


def _check_batch_size(batch_size: int) -> None:
    if batch_size < 1:
        raise QueryError(f"batch_size must be at least 1, got {batch_size}")


# A database of the current schema and nothing else, copied into each new in-memory one.
_NEW_SCHEMA: sqlite3.Connection | None = None
_NEW_SCHEMA_LOCK = threading.Lock()


def _is_memory(path: str) -> bool:
    return path in ("", ":memory:")


def _is_full(exc: sqlite3.Error) -> bool:
    return getattr(exc, "sqlite_errorname", "") == "SQLITE_FULL" or "disk is full" in str(exc)


def _is_busy(exc: BaseException | None) -> bool:
    name = getattr(exc, "sqlite_errorname", "")
    return name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "locked" in str(exc)


def _low_space(path: str) -> bool:
    try:
        return shutil.disk_usage(os.path.dirname(os.path.abspath(path))).free < _LOW_SPACE
    except OSError:
        return False


def _file_uri(path: str) -> str:
    """An SQLite ``file:`` URI for a path (with ``?``, ``#`` and ``%`` escaped)."""
    full = Path(os.path.abspath(path)).as_posix()
    if not full.startswith("/"):  # a Windows drive: file:/C:/…
        full = "/" + full
    return "file:" + urllib.parse.quote(full, safe="/:")


def _wal_is_empty(path: str) -> bool:
    try:
        return os.path.getsize(path + "-wal") == 0
    except FileNotFoundError:
        return True
    except OSError:
        return False


def _journal(conn: sqlite3.Connection, item_ids: Iterable[str], op: str) -> None:
    conn.executemany(
        "INSERT INTO index_journal (item_id, op) VALUES (?, ?)",
        [(item_id, op) for item_id in item_ids],
    )


def _upsert_item(conn: sqlite3.Connection, item: KnowledgeItem) -> None:
    # An item's knowledge base exists as soon as the item does.
    conn.execute(_KB_INSERT, (item.kb, item.created_at.isoformat()))
    conn.execute(_ITEM_UPSERT, _item_to_row(item))


def _replace_chunks(
    conn: sqlite3.Connection, item_id: str, chunks: Sequence[KnowledgeChunk]
) -> None:
    conn.execute("DELETE FROM knowledge_chunks WHERE item_id = ?", (item_id,))
    conn.executemany(_CHUNK_INSERT, [_chunk_to_row(chunk, item_id) for chunk in chunks])
    conn.executemany(INSERT_NAMES, name_rows(item_id, chunks))


class _GuardedConnection:
    """The manager's one connection with its rules, shared with its stores (a
    :class:`StoreConnection`): every use holds one re-entrant lock and turns sqlite3 errors
    into ``StorageError``; writes are refused while read-only, and become savepoints of one
    transaction inside :meth:`write_group`."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        db_path: str,
        read_only_reason: str | None,
        faults: Faults,
    ) -> None:
        self.conn: sqlite3.Connection | None = conn  # None once closed
        self.read_only_reason = read_only_reason
        self._db_path = db_path
        self._faults = faults
        self._lock = threading.RLock()
        self._grouped = False  # inside write_group(): writes become savepoints
        # The error that ended the group's transaction (SQLite rolls it back itself on a
        # full disk): later writes of the group fail with it rather than start a new one.
        self._group_lost: sqlite3.Error | None = None

    @contextmanager
    def reading(self, operation: str) -> Iterator[sqlite3.Connection]:
        with self._lock:
            if self.conn is None:
                raise StorageError(f"{operation}: the storage manager is closed")
            try:
                yield self.conn
            except sqlite3.Error as exc:
                if _is_full(exc):
                    raise StorageError(
                        f"disk full while writing {self._db_path}: {exc} ({operation})"
                    ) from exc
                raise StorageError(f"{operation} failed: {exc}") from exc

    @contextmanager
    def writing(self, operation: str) -> Iterator[sqlite3.Connection]:
        self._check_writable(operation)
        with self.reading(operation) as conn:
            if self._grouped:
                if self._group_lost is not None:
                    raise sqlite3.OperationalError(str(self._group_lost))
                # One all-or-nothing step of the group's transaction.
                conn.execute("SAVEPOINT write")
                try:
                    yield conn
                except BaseException as exc:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK TO write")
                        conn.execute("RELEASE write")
                    elif isinstance(exc, sqlite3.Error):
                        self._group_lost = exc
                    raise
                conn.execute("RELEASE write")
                return
            # IMMEDIATE takes the write lock up front, so a busy database waits in BEGIN
            # (honouring busy_timeout) instead of failing half-way through.
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                self._rollback(conn, operation)
                raise

    @contextmanager
    def write_group(self, operation: str) -> Iterator[None]:
        """See :meth:`SQLiteStorageManager.write_group`."""
        self._check_writable(operation)
        with self.reading(operation) as conn:
            if self._grouped:
                yield
                return
            conn.execute("BEGIN IMMEDIATE")
            self._grouped = True
            try:
                yield
            finally:
                self._grouped = False
                self._group_lost = None
                try:
                    # SQLite ends the transaction itself on some errors (a full disk).
                    if conn.in_transaction:
                        conn.execute("COMMIT")
                except BaseException:
                    self._rollback(conn, operation)
                    raise
            self._faults.reached("group-commit")

    def journal(self, conn: sqlite3.Connection, item_ids: Iterable[str], op: str) -> None:
        _journal(conn, item_ids, op)

    def write_item(
        self, conn: sqlite3.Connection, item: KnowledgeItem, chunks: Sequence[KnowledgeChunk]
    ) -> None:
        """Upsert the item, replace its chunks, journal it."""
        _upsert_item(conn, item)
        _replace_chunks(conn, item.id, chunks)
        _journal(conn, [item.id], "upsert")

    def write_items(
        self,
        conn: sqlite3.Connection,
        entries: Sequence[tuple[KnowledgeItem, Sequence[KnowledgeChunk]]],
    ) -> None:
        """:meth:`write_item` for several items, one statement per table (a folder of small
        files otherwise pays six statements a file)."""
        if len({item.id for item, _ in entries}) < len(entries):
            for item, chunks in entries:  # one item twice: its writes in order
                self.write_item(conn, item, chunks)
            return
        kbs: dict[str, str] = {}
        for item, _ in entries:
            kbs.setdefault(item.kb, item.created_at.isoformat())
        conn.executemany(_KB_INSERT, list(kbs.items()))
        conn.executemany(_ITEM_UPSERT, [_item_to_row(item) for item, _ in entries])
        conn.executemany(
            "DELETE FROM knowledge_chunks WHERE item_id = ?", [(item.id,) for item, _ in entries]
        )
        conn.executemany(
            _CHUNK_INSERT,
            [_chunk_to_row(chunk, item.id) for item, chunks in entries for chunk in chunks],
        )
        conn.executemany(
            INSERT_NAMES, [row for item, chunks in entries for row in name_rows(item.id, chunks)]
        )
        _journal(conn, [item.id for item, _ in entries], "upsert")

    def delete_items(self, conn: sqlite3.Connection, item_ids: Sequence[str]) -> None:
        """Delete items (their chunks and tracking rows cascade) and journal the deletes."""
        conn.executemany("DELETE FROM knowledge_items WHERE id = ?", [(i,) for i in item_ids])
        _journal(conn, item_ids, "delete")

    def close(self) -> None:
        with self._lock:
            if self.conn is None:
                return
            conn, self.conn = self.conn, None
            try:
                conn.close()
            except sqlite3.Error as exc:
                raise StorageError(f"close {self._db_path!r} failed: {exc}") from exc

    def _check_writable(self, operation: str) -> None:
        if self.read_only_reason is not None:
            raise StorageError(
                f"cannot write {self._db_path} ({operation}): {self.read_only_reason}"
            )

    @staticmethod
    def _rollback(conn: sqlite3.Connection, operation: str) -> None:
        if not conn.in_transaction:
            return
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            # The original error matters more than a failed rollback.
            logger.exception("rollback after failed %s failed", operation)


class SQLiteStorageManager:
    """Items, chunks, the index journal and small settings, in one SQLite database.

    Owns two stores on the same connection: ``sources`` (a :class:`SourceStore`: the
    knowledge bases, the roots collected into them and their tracked files) and
    ``doc_sources`` (a :class:`DocSourceStore`: the documentation sources crawled from the
    web, and their pages).

    Thread-safe: one connection, every public method (the stores' too) serialised by a
    re-entrant lock.
    Use as a context manager or call ``close()``.

    With ``read_only`` (or when the existing database cannot be opened for writing, see
    the module docstring) every write raises ``StorageError``; ``read_only_reason`` says why.
    ``faults`` (a testing hook, :mod:`knowledge_agent.faults`) may end the process after a
    write group commits.
    """

    def __init__(
        self,
        db_path: str | os.PathLike[str] = ":memory:",
        *,
        read_only: bool = False,
        faults: Faults | None = None,
    ) -> None:
        self._db_path = os.fspath(db_path)
        conn, read_only_reason = self._open(read_only)
        self._db = _GuardedConnection(conn, self._db_path, read_only_reason, faults or Faults())
        self.sources = SourceStore(self._db)
        """Knowledge bases, collected roots and tracked source files."""
        self.doc_sources = DocSourceStore(self._db)
        """Documentation sources crawled from the web, and their pages."""

    # -- connection setup ---------------------------------------------------------------

    def _open(self, read_only: bool) -> tuple[sqlite3.Connection, str | None]:
        """The connection, and why it cannot write (None when it can)."""
        if read_only:
            if _is_memory(self._db_path):
                raise StorageError("an in-memory database cannot be opened read-only")
            return self._open_read_only(), "it was opened read-only"
        try:
            return self._open_read_write(), None
        except StorageError as exc:
            cause = exc.__cause__
            if _is_memory(self._db_path) or not os.path.isfile(self._db_path) or _is_busy(cause):
                raise
            failure = exc
        # Reading must keep working while writing cannot (a full disk, a read-only mount).
        try:
            conn = self._open_read_only()
        except StorageError as exc:
            logger.debug("opening %s read-only failed too: %s", self._db_path, exc)
            raise failure from failure.__cause__
        if _low_space(self._db_path):
            reason = "the disk is full, so it was opened read-only"
        else:
            cause = failure.__cause__ or failure
            reason = f"opening it for writing failed ({cause}), so it is read-only"
        logger.warning("%s is open read-only: %s", self._db_path, reason)
        return conn, reason

    def _open_read_write(self) -> sqlite3.Connection:
        try:
            if not _is_memory(self._db_path):
                Path(self._db_path).parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(
                self._db_path,
                timeout=_BUSY_TIMEOUT_S,
                check_same_thread=False,
                isolation_level=None,
            )
        except (OSError, sqlite3.Error) as exc:
            raise StorageError(f"open {self._db_path!r} failed: {exc}") from exc
        conn.row_factory = sqlite3.Row
        try:
            self._configure(conn)
            if _is_memory(self._db_path):
                self._copy_new_schema(conn)
            else:
                self._migrate(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def _copy_new_schema(self, conn: sqlite3.Connection) -> None:
        """Give a new in-memory database the current schema: a copy of one migrated once per
        process (copying a few pages is several times faster than running the migrations)."""
        global _NEW_SCHEMA
        try:
            with _NEW_SCHEMA_LOCK:
                if _NEW_SCHEMA is None:
                    template = sqlite3.connect(
                        ":memory:", check_same_thread=False, isolation_level=None
                    )
                    self._migrate(template)
                    _NEW_SCHEMA = template
                _NEW_SCHEMA.backup(conn)
        except sqlite3.Error as exc:
            raise StorageError(f"migrate {self._db_path!r} failed: {exc}") from exc

    def _open_read_only(self) -> sqlite3.Connection:
        """A connection that cannot write, to a database of the current schema version."""
        uri = _file_uri(self._db_path)
        attempts = [f"{uri}?mode=ro"]
        if _wal_is_empty(self._db_path):
            # Nothing in the write-ahead log: the main file is the whole database, and an
            # immutable read needs no -shm file. (It would not see a writer that starts
            # meanwhile; none can while the disk is full.)
            attempts.append(f"{uri}?mode=ro&immutable=1")
        failure: sqlite3.Error | None = None
        for attempt in attempts:
            conn: sqlite3.Connection | None = None
            try:
                conn = sqlite3.connect(
                    attempt,
                    uri=True,
                    timeout=_BUSY_TIMEOUT_S,
                    check_same_thread=False,
                    isolation_level=None,
                )
                conn.row_factory = sqlite3.Row
                conn.execute(f"PRAGMA busy_timeout = {int(_BUSY_TIMEOUT_S * 1000)}")
                conn.execute("PRAGMA query_only = ON")
                version = conn.execute("PRAGMA user_version").fetchone()[0]  # the first read
            except sqlite3.Error as exc:
                if conn is not None:
                    conn.close()
                failure = exc
                continue
            if version != SCHEMA_VERSION:
                conn.close()
                raise StorageError(
                    f"{self._db_path!r} has schema version {version}, not {SCHEMA_VERSION}: "
                    "it needs writing to be migrated"
                )
            return conn
        raise StorageError(f"open {self._db_path!r} read-only failed: {failure}") from failure

    def _configure(self, conn: sqlite3.Connection) -> None:
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(_BUSY_TIMEOUT_S * 1000)}")
            conn.execute("PRAGMA foreign_keys = ON")
            if not _is_memory(self._db_path):
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                if str(mode).lower() != "wal":
                    logger.warning("%s: journal_mode is %s, not wal", self._db_path, mode)
            conn.execute("PRAGMA synchronous = NORMAL")
        except sqlite3.Error as exc:
            raise StorageError(f"configure {self._db_path!r} failed: {exc}") from exc

    def _migrate(self, conn: sqlite3.Connection) -> None:
        try:
            # Read the version inside the write transaction so two processes opening the
            # same new file cannot both apply the migrations.
            conn.execute("BEGIN IMMEDIATE")
            try:
                current = conn.execute("PRAGMA user_version").fetchone()[0]
                if current > SCHEMA_VERSION:
                    raise StorageError(
                        f"{self._db_path!r} has schema version {current}: written by a newer "
                        f"version of knowledge_agent (this one knows {SCHEMA_VERSION})"
                    )
                for version in range(current + 1, SCHEMA_VERSION + 1):
                    migration = _MIGRATIONS[version - 1]
                    if callable(migration):
                        migration(conn)
                    else:
                        for statement in migration:
                            conn.execute(statement)
                    logger.info("%s: migrated schema to version %d", self._db_path, version)
                if current < SCHEMA_VERSION:
                    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise StorageError(f"migrate {self._db_path!r} failed: {exc}") from exc

    def _by_ids(
        self,
        operation: str,
        select: str,
        ids: Iterable[str],
        convert: Callable[[sqlite3.Row], _T],
    ) -> dict[str, _T]:
        """Rows of ``select`` whose id is among ``ids``, one ``IN (...)`` query per batch."""
        found: dict[str, _T] = {}
        with self._db.reading(operation) as conn:
            for batch in _batches(ids):
                sql = f"{select} WHERE id IN ({_placeholders(len(batch))})"
                for row in conn.execute(sql, batch):
                    found[row["id"]] = convert(row)
        return found

    def _pages(
        self,
        operation: str,
        select: str,
        where: str,
        params: list[Any],
        key: tuple[str, str],
        batch_size: int,
    ) -> Iterator[sqlite3.Row]:
        """Every row of ``select`` ordered by ``key``, fetched a page at a time.

        Keyset paging, with the lock released between pages: callers may write while
        iterating, and no read stays open on the shared connection.
        """
        _check_batch_size(batch_size)
        order = ", ".join(key)
        condition = f"({order}) > (?, ?)"
        last: tuple[Any, Any] | None = None
        while True:
            clauses = [c for c in (where, condition if last else "") if c]
            sql = f"{select}{' WHERE ' + ' AND '.join(clauses) if clauses else ''}"
            sql += f" ORDER BY {order} LIMIT ?"
            with self._db.reading(operation) as conn:
                rows = conn.execute(sql, [*params, *(last or ()), batch_size]).fetchall()
            if not rows:
                return
            last = (rows[-1][key[0]], rows[-1][key[1]])
            yield from rows
            if len(rows) < batch_size:
                return

    # -- lifecycle ----------------------------------------------------------------------

    @property
    def db_path(self) -> str:
        """The database path as given (``":memory:"`` for an in-memory store)."""
        return self._db_path

    @property
    def read_only(self) -> bool:
        """Whether writes are refused (asked for, or the database could not be written)."""
        return self._db.read_only_reason is not None

    @property
    def read_only_reason(self) -> str | None:
        """Why the database is read-only, or None."""
        return self._db.read_only_reason

    @property
    def _conn(self) -> sqlite3.Connection | None:
        # The bare connection (None once closed), for tests that inspect or break the file.
        return self._db.conn

    def write_group(self, operation: str) -> AbstractContextManager[None]:
        """Commit the writes made inside in one transaction (a commit per file is a third of
        a folder ingest). Each write stays all-or-nothing on its own: one that fails is
        rolled back alone, and those that completed are committed even if the block raises.
        Other threads wait for the group to end, so keep it short."""
        return self._db.write_group(operation)

    def close(self) -> None:
        """Close the connection; safe to call twice."""
        self._db.close()

    def __enter__(self) -> SQLiteStorageManager:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- items --------------------------------------------------------------------------

    def save_item(self, item: KnowledgeItem) -> None:
        """Insert or update an item; its chunks are kept."""
        with self._db.writing("save_item") as conn:
            _upsert_item(conn, item)
            _journal(conn, [item.id], "upsert")

    def get_item(self, item_id: str) -> KnowledgeItem | None:
        """The item with this id, or None."""
        with self._db.reading("get_item") as conn:
            row = conn.execute(f"{_ITEM_SELECT} WHERE id = ?", (item_id,)).fetchone()
        return None if row is None else _row_to_item(row)

    def get_items(self, item_ids: Iterable[str]) -> dict[str, KnowledgeItem]:
        """The items found among these ids, by id; missing ids are absent."""
        return self._by_ids("get_items", _ITEM_SELECT, item_ids, _row_to_item)

    def get_item_summaries(self, item_ids: Iterable[str]) -> dict[str, ItemSummary]:
        """:meth:`get_items` without the text (its length instead), by id."""
        return self._by_ids("get_item_summaries", _SUMMARY_SELECT, item_ids, _row_to_summary)

    def ids_with_prefix(self, kind: str, prefix: str, limit: int = 2) -> list[str]:
        """Up to ``limit`` item (``kind="item"``) or chunk ids starting with ``prefix``, sorted:
        a range over the primary key, so it stays cheap at any size."""
        table = {"item": "knowledge_items", "chunk": "knowledge_chunks"}.get(kind)
        if table is None:
            raise StorageError(f"ids_with_prefix: kind must be 'item' or 'chunk', got {kind!r}")
        if not prefix:
            return []
        upper = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        with self._db.reading("ids_with_prefix") as conn:
            rows = conn.execute(
                f"SELECT id FROM {table} WHERE id >= ? AND id < ? ORDER BY id LIMIT ?",
                (prefix, upper, limit),
            ).fetchall()
        return [row[0] for row in rows]

    def field_values(self, name: str) -> list[str]:
        """The distinct non-empty values of an item field that filters take (``kb``,
        ``source_type``, ``doc_type``, ``language``), sorted."""
        if name not in _FILTER_FIELDS:
            raise StorageError(f"field_values: not a filter field: {name!r}")
        with self._db.reading("field_values") as conn:
            rows = conn.execute(
                f"SELECT DISTINCT {name} FROM knowledge_items WHERE {name} != '' ORDER BY 1"
            ).fetchall()
        return [row[0] for row in rows]

    def item_facts(self, item_ids: Iterable[str]) -> dict[str, ItemFacts]:
        """What ranking needs of these items, without their text: doc type, path, age."""
        return self._by_ids("item_facts", _FACTS_SELECT, item_ids, _row_to_facts)

    def facet_groups(self, item_ids: Iterable[str]) -> list[tuple[str, str, str, int]]:
        """(kb, doc_type, source_type, documents) of the stored items among ``item_ids``,
        one row per distinct triple: a grouped count, in batches of ids summed here."""
        groups: Counter[tuple[str, str, str]] = Counter()
        with self._db.reading("facet_groups") as conn:
            for batch in _batches(item_ids):
                rows = conn.execute(
                    "SELECT kb, doc_type, source_type, COUNT(*) FROM knowledge_items "
                    f"WHERE id IN ({_placeholders(len(batch))}) GROUP BY 1, 2, 3",
                    batch,
                )
                for kb, doc_type, source_type, documents in rows:
                    groups[kb, doc_type, source_type] += documents
        return [(*group, documents) for group, documents in groups.items()]

    def iter_item_facts(
        self, *, kb: str | None = None, batch_size: int = 500
    ) -> Iterator[ItemFacts]:
        """:meth:`iter_items` without the text: every item's facts (of one kb, if given) in
        (created_at, id) order, for listings that filter before reading whole items."""
        where = "" if kb is None else "kb = ?"
        params: list[Any] = [] if kb is None else [kb]
        rows = self._pages(
            "iter_item_facts", _FACTS_SELECT, where, params, ("created_at", "id"), batch_size
        )
        return (_row_to_facts(row) for row in rows)

    def delete_item(self, item_id: str) -> bool:
        """Delete an item and (by cascade) its chunks; True if it existed."""
        with self._db.writing("delete_item") as conn:
            deleted = conn.execute("DELETE FROM knowledge_items WHERE id = ?", (item_id,))
            existed = deleted.rowcount > 0
            if existed:
                _journal(conn, [item_id], "delete")
        return existed

    def items_with_source(self, source_uri: str, *, kb: str | None = None) -> list[KnowledgeItem]:
        """The items whose ``source_uri`` is exactly this (in one kb, if given)."""
        sql = f"{_ITEM_SELECT} WHERE source_uri = ?"
        params: list[Any] = [source_uri]
        if kb is not None:
            sql += " AND kb = ?"
            params.append(kb)
        with self._db.reading("items_with_source") as conn:
            rows = conn.execute(sql + " ORDER BY kb, id", params).fetchall()
        return [_row_to_item(row) for row in rows]

    def list_items(
        self,
        *,
        kb: str | None = None,
        source_type: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[KnowledgeItem]:
        """A page of items ordered by (created_at, id), optionally filtered."""
        if limit < 0 or offset < 0:
            raise QueryError(f"limit and offset must be >= 0, got {limit} and {offset}")
        clauses: list[str] = []
        params: list[Any] = []
        if kb is not None:
            clauses.append("kb = ?")
            params.append(kb)
        if source_type is not None:
            clauses.append("source_type = ?")
            params.append(source_type)
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        sql = f"{_ITEM_SELECT}{where} ORDER BY created_at, id LIMIT ? OFFSET ?"
        with self._db.reading("list_items") as conn:
            rows = conn.execute(sql, [*params, limit, offset]).fetchall()
        return [_row_to_item(row) for row in rows]

    def iter_items(
        self, *, kb: str | None = None, batch_size: int = 500
    ) -> Iterator[KnowledgeItem]:
        """Stream every item (of one kb, if given) in (created_at, id) order."""
        where = "" if kb is None else "kb = ?"
        params: list[Any] = [] if kb is None else [kb]
        rows = self._pages(
            "iter_items", _ITEM_SELECT, where, params, ("created_at", "id"), batch_size
        )
        return (_row_to_item(row) for row in rows)

    def item_ids(self, *, with_chunks: bool = False) -> set[str]:
        """The id of every item (``with_chunks``: of every item that has chunks)."""
        sql = (
            "SELECT DISTINCT item_id FROM knowledge_chunks"
            if with_chunks
            else "SELECT id FROM knowledge_items"
        )
        with self._db.reading("item_ids") as conn:
            return {row[0] for row in conn.execute(sql)}

    def count_items(self, *, kb: str | None = None) -> int:
        """How many items (in one kb, if given)."""
        with self._db.reading("count_items") as conn:
            if kb is None:
                row = conn.execute("SELECT COUNT(*) FROM knowledge_items").fetchone()
            else:
                row = conn.execute(
                    "SELECT COUNT(*) FROM knowledge_items WHERE kb = ?", (kb,)
                ).fetchone()
        return int(row[0])

    # -- chunks -------------------------------------------------------------------------

    def save_chunks(self, item_id: str, chunks: Iterable[KnowledgeChunk]) -> None:
        """Replace every chunk of an existing item with these, atomically."""
        chunk_list = list(chunks)
        with self._db.writing("save_chunks") as conn:
            exists = conn.execute("SELECT 1 FROM knowledge_items WHERE id = ?", (item_id,))
            if exists.fetchone() is None:
                raise NotFoundError(f"item {item_id!r} does not exist")
            _replace_chunks(conn, item_id, chunk_list)
            _journal(conn, [item_id], "upsert")
        # Only after the commit, so a failed save leaves the caller's objects untouched.
        for chunk in chunk_list:
            chunk.item_id = item_id

    def save_item_with_chunks(self, item: KnowledgeItem, chunks: Iterable[KnowledgeChunk]) -> None:
        """Upsert an item and replace its chunks in one transaction."""
        chunk_list = list(chunks)
        with self._db.writing("save_item_with_chunks") as conn:
            self._db.write_item(conn, item, chunk_list)
        for chunk in chunk_list:
            chunk.item_id = item.id

    def get_chunks_for_item(self, item_id: str) -> list[KnowledgeChunk]:
        """An item's chunks in chunk_index order ([] for an unknown item)."""
        with self._db.reading("get_chunks_for_item") as conn:
            rows = conn.execute(
                f"{_CHUNK_SELECT} WHERE item_id = ? ORDER BY chunk_index", (item_id,)
            ).fetchall()
        return [row_to_chunk(row) for row in rows]

    def get_chunks_for_items(self, item_ids: Iterable[str]) -> dict[str, list[KnowledgeChunk]]:
        """:meth:`get_chunks_for_item` of each item, one query per batch of items (an index
        update reads thousands of small files' chunks); unknown items are absent."""
        found: dict[str, list[KnowledgeChunk]] = {}
        with self._db.reading("get_chunks_for_items") as conn:
            for batch in _batches(item_ids):
                sql = (
                    f"{_CHUNK_SELECT} WHERE item_id IN ({_placeholders(len(batch))}) "
                    "ORDER BY item_id, chunk_index"
                )
                for row in conn.execute(sql, batch):
                    chunk = row_to_chunk(row)
                    found.setdefault(chunk.item_id, []).append(chunk)
        return found

    def get_chunk_by_id(self, chunk_id: str) -> KnowledgeChunk | None:
        """The chunk with this id, or None."""
        with self._db.reading("get_chunk_by_id") as conn:
            row = conn.execute(f"{_CHUNK_SELECT} WHERE id = ?", (chunk_id,)).fetchone()
        return None if row is None else row_to_chunk(row)

    def get_chunks(self, chunk_ids: Iterable[str]) -> dict[str, KnowledgeChunk]:
        """The chunks found among these ids, by id; missing ids are absent."""
        return self._by_ids("get_chunks", _CHUNK_SELECT, chunk_ids, row_to_chunk)

    def get_adjacent_chunks(
        self, item_id: str, chunk_index: int, window: int = 1
    ) -> list[KnowledgeChunk]:
        """The same item's chunks within ``window`` of ``chunk_index``, excluding it."""
        if window < 0:
            raise QueryError(f"window must be >= 0, got {window}")
        if window == 0:
            return []
        with self._db.reading("get_adjacent_chunks") as conn:
            rows = conn.execute(
                f"{_CHUNK_SELECT} WHERE item_id = ? AND chunk_index BETWEEN ? AND ? "
                "AND chunk_index != ? ORDER BY chunk_index",
                (item_id, chunk_index - window, chunk_index + window, chunk_index),
            ).fetchall()
        return [row_to_chunk(row) for row in rows]

    def get_chunks_at(
        self, positions: Iterable[tuple[str, int]]
    ) -> dict[tuple[str, int], KnowledgeChunk]:
        """The chunks at these ``(item_id, chunk_index)`` positions, by position (absent
        where an item has no such chunk): every result's neighbours in one read."""
        wanted = list(dict.fromkeys((item_id, int(index)) for item_id, index in positions))
        found: dict[tuple[str, int], KnowledgeChunk] = {}
        with self._db.reading("get_chunks_at") as conn:
            for start in range(0, len(wanted), _MAX_VARIABLES // 2):
                batch = wanted[start : start + _MAX_VARIABLES // 2]
                pairs = ", ".join(["(?, ?)"] * len(batch))
                # A join from the positions: SQLite plans `(item_id, chunk_index) IN
                # (VALUES …)` as a scan of every chunk, the join as one index search each.
                sql = (
                    f"SELECT {', '.join('c.' + name for name in CHUNK_COLUMNS)} "
                    f"FROM (VALUES {pairs}) AS w JOIN knowledge_chunks AS c "
                    "ON c.item_id = w.column1 AND c.chunk_index = w.column2"
                )
                for row in conn.execute(sql, [value for pair in batch for value in pair]):
                    chunk = row_to_chunk(row)
                    found[(chunk.item_id, chunk.chunk_index)] = chunk
        return found

    def iter_chunks(self, *, batch_size: int = 1000) -> Iterator[KnowledgeChunk]:
        """Stream every chunk in (item_id, chunk_index) order, one page at a time."""
        rows = self._pages(
            "iter_chunks", _CHUNK_SELECT, "", [], ("item_id", "chunk_index"), batch_size
        )
        return (row_to_chunk(row) for row in rows)

    def chunks_named(self, names: Sequence[str], role: str) -> list[tuple[str, str]]:
        """``(chunk_id, item_id)`` of the chunks whose ``role`` (``symbol`` or ``reference``)
        names include any of ``names``, whole or as their last part."""
        found: list[tuple[str, str]] = []
        with self._db.reading("chunks_named") as conn:
            for batch in _batches(names):
                sql, params = names_query(batch, role)
                found.extend((row[0], row[1]) for row in conn.execute(sql, params))
        return found

    def count_chunks(self, *, kb: str | None = None, item_id: str | None = None) -> int:
        """How many chunks (of one item, or of the items in one kb, if given)."""
        with self._db.reading("count_chunks") as conn:
            if item_id is not None:
                row = conn.execute(
                    "SELECT COUNT(*) FROM knowledge_chunks WHERE item_id = ?", (item_id,)
                ).fetchone()
            elif kb is None:
                row = conn.execute("SELECT COUNT(*) FROM knowledge_chunks").fetchone()
            else:
                row = conn.execute(
                    "SELECT COUNT(*) FROM knowledge_chunks AS c "
                    "JOIN knowledge_items AS i ON i.id = c.item_id WHERE i.kb = ?",
                    (kb,),
                ).fetchone()
        return int(row[0])

    # -- index journal ------------------------------------------------------------------

    def last_journal_seq(self) -> int:
        """The highest sequence number ever written to the journal (0 if none)."""
        # sqlite_sequence, not MAX(seq): trimming must not make the journal look older.
        with self._db.reading("last_journal_seq") as conn:
            row = conn.execute(
                "SELECT seq FROM sqlite_sequence WHERE name = 'index_journal'"
            ).fetchone()
        return 0 if row is None else int(row[0])

    def journal_since(self, seq: int) -> list[tuple[int, str, str]]:
        """Journal entries (seq, item_id, op) with a sequence number above ``seq``."""
        with self._db.reading("journal_since") as conn:
            rows = conn.execute(
                "SELECT seq, item_id, op FROM index_journal WHERE seq > ? ORDER BY seq", (seq,)
            ).fetchall()
        return [(int(row[0]), str(row[1]), str(row[2])) for row in rows]

    def count_chunks_since(self, seq: int) -> int:
        """Chunks of the items with journal entries above ``seq``: what a replay indexes."""
        with self._db.reading("count_chunks_since") as conn:
            row = conn.execute(
                "SELECT COUNT(*) FROM knowledge_chunks WHERE item_id IN "
                "(SELECT item_id FROM index_journal WHERE seq > ?)",
                (seq,),
            ).fetchone()
        return int(row[0])

    def trim_journal(self, upto_seq: int) -> None:
        """Delete journal entries with a sequence number up to ``upto_seq``."""
        with self._db.writing("trim_journal") as conn:
            conn.execute("DELETE FROM index_journal WHERE seq <= ?", (upto_seq,))

    # -- key/value settings -------------------------------------------------------------

    def get_meta(self, key: str, default: str | None = None) -> str | None:
        """A stored setting, or ``default``."""
        with self._db.reading("get_meta") as conn:
            row = conn.execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()
        return default if row is None else row[0]

    def set_meta(self, key: str, value: str) -> None:
        """Store a setting, replacing any previous value."""
        with self._db.writing("set_meta") as conn:
            conn.execute(
                "INSERT INTO kv (key, value) VALUES (?, ?) "
                "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (key, value),
            )
