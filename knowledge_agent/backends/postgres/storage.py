"""PostgresStorage: items, chunks, knowledge bases, tracked sources and doc pages in one
PostgreSQL database (the :class:`~knowledge_agent.protocols.Storage` protocol).

The rows and their behaviour are those of
:class:`~knowledge_agent.storage.SQLiteStorageManager`; the stores of tracked sources and doc
pages are the same classes, run on this connection through :class:`_Guarded` (a
``StoreConnection``). What differs, and why:

* **No journal.** Indexes in the same database are written by :class:`IndexWriter`\\ s inside
  the transaction of each write, so chunks and their postings commit together and a killed
  writer leaves nothing half-written: there is nothing to replay. A write group runs them
  once per batch of its writes, and sends each write's statements in one round trip
  (:mod:`~knowledge_agent.backends.postgres.batches`).
* **Many writers.** Processes on several machines write at once with no folder lock: every
  write is a transaction, item rows are locked before their chunks change and every insert
  is an ``ON CONFLICT`` upsert, so two writers of one item wait for each other and never
  fail or duplicate rows.
* **Exact text.** PostgreSQL text cannot hold NUL, which SQLite stores; the text fields of
  items and chunks are stored with NUL escaped (:mod:`~knowledge_agent.backends.postgres.rows`),
  so round trips give back equal values. Text sorts by code point, as in SQLite
  (:mod:`~knowledge_agent.backends.postgres.tables`).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

from knowledge_agent.backends.postgres.batches import Step, WriteGroup
from knowledge_agent.backends.postgres.connection import (
    Link,
    connect,
    import_psycopg,
    storage_error,
    transaction_pooled,
)
from knowledge_agent.backends.postgres.rows import (
    CHUNK_INSERT,
    CHUNK_SELECT,
    ESCAPE,
    FACTS_SELECT,
    FILTER_FIELDS,
    ITEM_SELECT,
    ITEM_UPSERT,
    ITEMS_WRITE,
    SUMMARY_SELECT,
    Row,
    check_batch_size,
    chunk_columns,
    chunks_columns,
    item_to_row,
    items_columns,
    pg_sql,
    row_factory,
    row_to_chunk,
    row_to_facts,
    row_to_item,
    row_to_summary,
    text_from_db,
    text_to_db,
)
from knowledge_agent.backends.postgres.schema import migrate, schema_version, server_of
from knowledge_agent.backends.postgres.tables import COMPONENT, MIGRATIONS, SCHEMA_VERSION
from knowledge_agent.errors import NotFoundError, QueryError, StorageError
from knowledge_agent.faults import Faults
from knowledge_agent.models import ItemSummary, KnowledgeChunk, KnowledgeItem
from knowledge_agent.search.analysed_batch import AnalysedBatch
from knowledge_agent.storage.chunk_names import name_rows, names_query
from knowledge_agent.storage.doc_sources import DocSourceStore
from knowledge_agent.storage.sources import SourceStore
from knowledge_agent.storage.sqlite_storage import ItemFacts

if TYPE_CHECKING:
    import psycopg

    from knowledge_agent.analysis import TextAnalyzer
    from knowledge_agent.storage.connection import StoreConnection

__all__ = ["SCHEMA_VERSION", "IndexWriter", "PostgresStorage"]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")


# -- index writers -------------------------------------------------------------------------


class IndexWriter(Protocol):
    """An index kept in the same database, written in the transaction of each storage write.

    :meth:`replace` runs after an item and its chunks are written (also when only the item
    row changed: it gets the item's stored chunks); :meth:`remove` runs before items are
    deleted, while their rows are still there. Both run inside the write's transaction: what
    they write commits or rolls back with the rows, and an exception rolls the whole write
    back and reaches the caller as it is. In a write group, :meth:`replace` runs once per
    batch of writes, on every item they wrote (each once, as last written, in the order of
    their last writes), and an exception there is handled by the group
    (:mod:`~knowledge_agent.backends.postgres.batches`); :meth:`remove` runs at once, in
    psycopg's pipeline mode (so without ``COPY``). A writer never commits or rolls back
    ``conn`` itself (``conn.transaction()`` nests as a savepoint).
    Items, chunks and ids are the Python values; the storage's text columns hold them as
    :func:`~knowledge_agent.backends.postgres.rows.text_to_db` stores them.
    """

    def replace(
        self,
        conn: psycopg.Connection,
        pairs: Sequence[tuple[KnowledgeItem, Sequence[KnowledgeChunk]]] | AnalysedBatch,
    ) -> None:
        """Index these items and chunks in place of whatever they had (chunks carry their
        item's id); an :class:`AnalysedBatch` of them when the storage has an analyzer."""
        ...

    def remove(self, conn: psycopg.Connection, item_ids: Sequence[str]) -> None:
        """Forget these items and their chunks."""
        ...


# -- the guarded connection ------------------------------------------------------------------

_UNCHECKED = frozenset({"save_item_with_chunks", "save_source_item", "save_doc_page_item"})
"""The writes of an item with its chunks (and its tracking row): they read nothing, so in a
write group their statements go out without waiting for the answers, which are checked with
their batch (:mod:`~knowledge_agent.backends.postgres.batches`)."""


class _Cursor(Protocol):
    rowcount: int

    def fetchone(self) -> Any: ...
    def fetchall(self) -> list[Any]: ...
    def __iter__(self) -> Iterator[Any]: ...


class _Pipelined:
    """A cursor whose statement went out in a pipeline: reading its rows or its row count
    waits for the answer."""

    def __init__(self, cursor: Any, pipeline: psycopg.Pipeline) -> None:
        self._cursor = cursor
        self._pipeline = pipeline

    @property
    def rowcount(self) -> int:
        self._pipeline.sync()
        return int(self._cursor.rowcount)

    def fetchone(self) -> Any:
        return self._cursor.fetchone()

    def fetchall(self) -> list[Any]:
        return cast("list[Any]", self._cursor.fetchall())

    def __iter__(self) -> Iterator[Any]:
        return iter(self._cursor)


class _Connection:
    """A psycopg connection spoken to as the SQLite stores speak (``?`` placeholders, rows
    by name and position); :attr:`raw` is the psycopg connection itself. Statements go
    through the :class:`~.connection.Link`, which runs one again on a new connection when
    the connection broke outside a transaction."""

    def __init__(self, link: Link) -> None:
        self._link = link
        self.record: list[Step] | None = None  # a write group's current write, if any
        self.unchecked = False  # statements go out with their failures left to close_pipeline
        self._failed = False  # a statement sent unchecked failed
        self._pipeline: psycopg.Pipeline | None = None
        self._open: AbstractContextManager[psycopg.Pipeline] | None = None
        self._error = import_psycopg().Error

    @property
    def raw(self) -> psycopg.Connection:
        return self._link.conn

    def execute(self, sql: str, params: Sequence[Any] = ()) -> _Cursor:
        if self.record is not None:
            self.record.append(("execute", sql, params))
        made: list[Any] = []

        def step(raw: psycopg.Connection) -> Any:
            cursor = raw.cursor(row_factory=row_factory)
            made.append(cursor)
            if params:
                return cursor.execute(pg_sql(sql), params)
            return cursor.execute(sql)

        try:
            cursor = self._link.run(step, commit=sql == "COMMIT")
        except self._error:
            if not self.unchecked or not made:
                raise
            self._failed = True  # an earlier statement's failure, or this one's
            cursor = made[-1]
        return cursor if self._pipeline is None else _Pipelined(cursor, self._pipeline)

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        if self.record is not None:
            rows = list(rows)
            self.record.append(("executemany", sql, rows))
        with self.raw.cursor() as cursor:
            try:
                cursor.executemany(pg_sql(sql), rows)
            except self._error:
                if not self.unchecked:
                    raise
                self._failed = True

    def open_pipeline(self) -> None:
        """Enter pipeline mode until :meth:`close_pipeline` (across several writes)."""
        if self._open is None:
            self._open = self.raw.pipeline()
            self._pipeline = self._open.__enter__()

    def close_pipeline(self) -> bool:
        """Wait for every answer and leave the pipeline of :meth:`open_pipeline`; False when
        a statement sent unchecked failed."""
        opened, self._open = self._open, None
        if opened is not None:
            try:
                opened.__exit__(None, None, None)
            except self._error:
                self._failed = True
            finally:
                self._pipeline = None
        failed, self._failed = self._failed, False
        return not failed

    @contextmanager
    def pipelined(self) -> Iterator[None]:
        """Statements sent without waiting for each answer (psycopg's pipeline mode): the
        block's errors are raised when a result is read, or at its end at the latest."""
        outer = self._pipeline
        with self.raw.pipeline() as pipeline:  # nested: the same pipeline, synced at its end
            self._pipeline = pipeline
            try:
                yield
            finally:
                self._pipeline = outer

    def sync(self) -> None:
        """Wait for the answers of every statement sent (nothing outside a pipeline)."""
        if self._pipeline is not None:
            self._pipeline.sync()

    @property
    def in_transaction(self) -> bool:
        status = self.raw.info.transaction_status
        return status != import_psycopg().pq.TransactionStatus.IDLE

    @property
    def failed(self) -> bool:
        """The open transaction hit an error: a COMMIT would only roll it back."""
        return self.raw.info.transaction_status == import_psycopg().pq.TransactionStatus.INERROR


class _Guarded:
    """The storage's one connection with its rules, shared with its stores (a
    ``StoreConnection``): every use holds one re-entrant lock and turns psycopg errors into
    ``StorageError``; writes are refused while read-only, run in a transaction with the index
    writers, and become savepoints of one transaction inside :meth:`write_group`, whose
    index writes run in batches (:mod:`~knowledge_agent.backends.postgres.batches`)."""

    def __init__(
        self,
        link: Link,
        read_only_reason: str | None,
        writers: Sequence[IndexWriter],
        faults: Faults,
        analyzer: TextAnalyzer | None = None,
    ) -> None:
        self.conn: _Connection | None = _Connection(link)  # None once closed
        self._link = link
        self.server = link.server
        self.read_only_reason = read_only_reason
        self._writers = tuple(writers)
        self._analyzer = analyzer
        self._faults = faults
        self._lock = threading.RLock()
        self._group: WriteGroup | None = None
        self._psycopg = import_psycopg()

    @contextmanager
    def _locked(self, operation: str) -> Iterator[_Connection]:
        with self._lock:
            if self.conn is None:
                raise StorageError(f"{operation}: the storage is closed")
            try:
                with self._link.use(operation):
                    yield self.conn
            except self._psycopg.Error as exc:
                lost = self._link.lost(operation, exc)
                raise (lost or storage_error(operation, self.server, exc)) from exc

    @contextmanager
    def reading(self, operation: str) -> Iterator[_Connection]:
        with self._locked(operation) as conn:
            if self._group is not None:
                self._group.settle(conn)  # a read sees the group's writes, checked
            yield conn

    @contextmanager
    def writing(self, operation: str) -> Iterator[_Connection]:
        self._check_writable(operation)
        with self._locked(operation) as conn:
            if self._group is not None:
                # One all-or-nothing step of the group's transaction.
                with self._group.write(conn, operation, unchecked=operation in _UNCHECKED):
                    yield conn
                return
            conn.execute("BEGIN")
            try:
                yield conn
                self._commit(conn, operation)
            except BaseException:
                self._undo(conn, "ROLLBACK")
                raise

    def outside_writes(self, operation: str, step: Callable[[psycopg.Connection], _T]) -> _T | None:
        """``step(connection)`` outside any transaction (upkeep: ``ANALYZE``, refreshing
        norms); None, without running it, when writes are refused or a write group is open."""
        if self.read_only_reason is not None:
            return None
        with self._locked(operation) as conn:
            if self._group is not None or conn.in_transaction:
                return None
            return step(conn.raw)

    @contextmanager
    def write_group(self, operation: str) -> Iterator[None]:
        self._check_writable(operation)
        with self._locked(operation) as conn:
            if self._group is not None:
                yield
                return
            conn.execute("BEGIN")
            group = self._group = WriteGroup(
                operation,
                replace=self._replace,
                remove=self._remove,
                prepare=self._prepare,
                psycopg=self._psycopg,
                server=self.server,
            )
            try:
                yield
            except BaseException:
                self._end_group(conn, group)  # what completed commits all the same
                raise
            self._end_group(conn, group)
            self._faults.reached("group-commit")
            error = group.error()
            if error is not None:
                raise error from error.failures[0][1]

    def _end_group(self, conn: _Connection, group: WriteGroup) -> None:
        """Index the last batch, then commit."""
        try:
            group.flush(conn)
            self._faults.reached("before-commit")
        finally:
            self._group = None
            try:
                self._commit(conn, group.operation)
            except BaseException:
                self._undo(conn, "ROLLBACK")
                raise

    def journal(self, conn: _Connection, item_ids: Iterable[str], op: str) -> None:
        """Nothing: the index writers ran in the transaction (see :class:`PostgresStorage`)."""

    def write_items(
        self, conn: _Connection, entries: Sequence[tuple[KnowledgeItem, Sequence[KnowledgeChunk]]]
    ) -> None:
        """:meth:`write_item` for each item in order, in one statement per table (an item
        given twice is written as its last version, in the position of its last write)."""
        latest: dict[str, tuple[KnowledgeItem, Sequence[KnowledgeChunk]]] = {}
        for item, chunks in entries:
            latest.pop(item.id, None)
            latest[item.id] = (item, chunks)
        if len(latest) <= 1:
            for item, chunks in latest.values():
                self.write_item(conn, item, chunks)
            return
        pairs = list(latest.values())
        with self._rows(conn):
            conn.execute(ITEMS_WRITE, items_columns([item for item, _ in pairs]))
            # As in write_item: with the items' rows locked, this sees committed chunks.
            conn.execute(
                "DELETE FROM knowledge_chunks WHERE item_id = ANY(?::text[])",
                ([text_to_db(item.id) for item, _ in pairs],),
            )
            if any(chunks for _, chunks in pairs):
                columns = chunks_columns([(item.id, chunks) for item, chunks in pairs])
                conn.execute(CHUNK_INSERT, columns)
                names = [row for item, chunks in pairs for row in name_rows(item.id, chunks)]
                _insert_name_rows(conn, names)
        self.index(conn, [(item, _owned(chunks, item.id)) for item, chunks in pairs])

    def write_item(
        self, conn: _Connection, item: KnowledgeItem, chunks: Sequence[KnowledgeChunk]
    ) -> None:
        """Upsert the item (creating its knowledge base), replace its chunks, index them."""
        with self._rows(conn):
            _upsert_item(conn, item)
            # Not part of the upsert: with the item's row locked, this statement's snapshot
            # sees the chunks of a writer of the same item that committed meanwhile.
            conn.execute("DELETE FROM knowledge_chunks WHERE item_id = ?", (text_to_db(item.id),))
            if chunks:
                conn.execute(CHUNK_INSERT, chunk_columns(item.id, chunks))
                _insert_names(conn, item.id, chunks)
        self.index(conn, [(item, _owned(chunks, item.id))])

    def _rows(self, conn: _Connection) -> AbstractContextManager[None]:
        """Around a write's row statements: outside a group, pipelined (one round trip; a
        failure raises at the block's end, still inside the write); in a group, as the
        group sends them (see :mod:`~knowledge_agent.backends.postgres.batches`)."""
        return conn.pipelined() if self._group is None else nullcontext()

    def index(
        self, conn: _Connection, pairs: Sequence[tuple[KnowledgeItem, Sequence[KnowledgeChunk]]]
    ) -> None:
        """Run the index writers on these pairs (in a write group: with its batch)."""
        if self._group is None or not self._group.index(pairs):
            self._replace(conn.raw, pairs)

    def delete_items(self, conn: _Connection, item_ids: Sequence[str]) -> None:
        """Unindex items (ids as stored), then delete them; chunks and tracking rows cascade."""
        if not item_ids:
            return
        ids = [text_from_db(item_id) for item_id in item_ids]
        self._remove(conn.raw, ids)
        if self._group is not None:
            self._group.removed(ids)
        conn.execute("DELETE FROM knowledge_items WHERE id = ANY(?)", (list(item_ids),))

    def _prepare(
        self, pairs: list[tuple[KnowledgeItem, Sequence[KnowledgeChunk]]]
    ) -> list[tuple[KnowledgeItem, Sequence[KnowledgeChunk]]] | AnalysedBatch:
        """A batch's pairs analysed once for every writer, when the storage has an analyzer."""
        if self._analyzer is None:
            return pairs
        return AnalysedBatch.build(self._analyzer, pairs)

    def _replace(
        self,
        raw: psycopg.Connection,
        pairs: Sequence[tuple[KnowledgeItem, Sequence[KnowledgeChunk]]] | AnalysedBatch,
    ) -> None:
        for writer in self._writers:
            writer.replace(raw, pairs)

    def _remove(self, raw: psycopg.Connection, item_ids: Sequence[str]) -> None:
        for writer in self._writers:
            writer.remove(raw, item_ids)

    def close(self) -> None:
        with self._lock:
            if self.conn is None:
                return
            conn, self.conn = self.conn, None
            try:
                conn.raw.close()
            except self._psycopg.Error as exc:
                raise storage_error("close", self.server, exc) from exc

    def _check_writable(self, operation: str) -> None:
        if self.read_only_reason is not None:
            raise StorageError(f"cannot write {self.server} ({operation}): {self.read_only_reason}")

    def _commit(self, conn: _Connection, operation: str) -> None:
        if not conn.in_transaction:
            return
        if conn.failed:
            # PostgreSQL answers COMMIT of a failed transaction with a rollback, silently.
            raise StorageError(
                f"{operation} on {self.server} failed: a statement failed inside the "
                "transaction, so it was rolled back"
            )
        conn.execute("COMMIT")

    def _undo(self, conn: _Connection, statement: str) -> None:
        if not conn.in_transaction or conn.raw.closed:  # broken: the server rolled it back
            return
        try:
            conn.raw.execute(statement)
        except self._psycopg.Error:
            # The original error matters more than a failed rollback.
            logger.exception("%s on %s failed", statement, self.server)


def _refuse_writes(conn: psycopg.Connection) -> None:
    """Make the server refuse writes on this session too, not only this class."""
    conn.execute("SET default_transaction_read_only = on")


_NAMES_INSERT = (
    "INSERT INTO chunk_names (chunk_id, item_id, role, name, short) "
    "SELECT * FROM unnest(?::text[], ?::text[], ?::text[], ?::text[], ?::text[])"
)


def _insert_names(conn: _Connection, item_id: str, chunks: Sequence[KnowledgeChunk]) -> None:
    """The ``chunk_names`` rows of the chunks (see :mod:`knowledge_agent.storage.chunk_names`)."""
    _insert_name_rows(conn, name_rows(item_id, chunks))


def _insert_name_rows(conn: _Connection, rows: Sequence[tuple[str, ...]]) -> None:
    if rows:  # one statement, not one per name: a code file's chunks name hundreds
        columns = [[text_to_db(value) for value in column] for column in zip(*rows, strict=True)]
        conn.execute(_NAMES_INSERT, columns)


def _owned(chunks: Sequence[KnowledgeChunk], item_id: str) -> list[KnowledgeChunk]:
    """The chunks as they are stored: carrying ``item_id`` (copies, so the caller's objects
    change only once the write commits)."""
    return [
        chunk if chunk.item_id == item_id else dataclasses.replace(chunk, item_id=item_id)
        for chunk in chunks
    ]


_ITEM_WRITE = (
    # An item's knowledge base exists as soon as the item does (one statement: the foreign
    # key is checked at its end, after the WITH clause ran).
    "WITH kb AS (INSERT INTO knowledge_bases (name, created_at) VALUES (?, ?) "
    "ON CONFLICT (name) DO NOTHING) " + ITEM_UPSERT
)


def _upsert_item(conn: _Connection, item: KnowledgeItem) -> None:
    conn.execute(
        _ITEM_WRITE, (text_to_db(item.kb), item.created_at.isoformat(), *item_to_row(item))
    )


class _SourceStore(SourceStore):
    """:class:`SourceStore` with a knowledge base's deletion safe against concurrent writers
    and its items unindexed before they go."""

    def __init__(self, db: _Guarded) -> None:
        super().__init__(cast("StoreConnection", db))
        self._guarded = db

    def delete_kb(self, name: str) -> list[str]:
        """Delete a knowledge base, its items, chunks, roots and sources; returns the item ids."""
        with self._guarded.writing("delete_kb") as conn:
            # Writers of its items hold a key-share lock on this row until they commit: wait
            # for them, and make later ones wait until it is gone.
            conn.execute("SELECT 1 FROM knowledge_bases WHERE name = ? FOR UPDATE", (name,))
            ids = [
                row[0]
                for row in conn.execute("SELECT id FROM knowledge_items WHERE kb = ?", (name,))
            ]
            self._guarded.delete_items(conn, ids)
            conn.execute("DELETE FROM knowledge_bases WHERE name = ?", (name,))
        return [text_from_db(item_id) for item_id in ids]


class PostgresStorage:
    """Items, chunks, knowledge bases, tracked sources, doc pages and settings in one
    PostgreSQL database: the :class:`~knowledge_agent.protocols.Storage` protocol, with the
    behaviour and return types of :class:`~knowledge_agent.storage.SQLiteStorageManager`.

    ``url`` is a ``postgresql://`` URL. Opening it brings the schema up to date
    (:mod:`~knowledge_agent.backends.postgres.schema`). ``index_writers`` are called inside
    the transaction of every write (:class:`IndexWriter`); with an ``analyzer``, a write
    group's batches reach them analysed once, as an
    :class:`~knowledge_agent.search.analysed_batch.AnalysedBatch`. With ``read_only``, or on a hot
    standby, every write raises ``StorageError`` and ``read_only_reason`` says why.

    Thread-safe: one connection, every public method (the stores' too) serialised by a
    re-entrant lock. Several processes may write the same database at once.
    Use as a context manager or call ``close()``.
    """

    def __init__(
        self,
        url: str,
        *,
        index_writers: Sequence[IndexWriter] = (),
        analyzer: TextAnalyzer | None = None,
        read_only: bool = False,
        faults: Faults | None = None,
    ) -> None:
        conn = connect(url, operation="open the storage")
        # Behind a transaction pooler a session setting would reach other clients' sessions:
        # the storage's own refusal is the only one there.
        refuse = None if transaction_pooled(url) else _refuse_writes
        try:
            reason = self._prepare(conn, read_only, refuse)
        except BaseException:
            conn.close()
            raise
        server = server_of(conn)
        link = Link(
            conn,
            server,
            reopen=lambda operation: connect(url, operation=operation, server=server),
            setup=None if reason is None else refuse,
        )
        self._db = _Guarded(link, reason, index_writers, faults or Faults(), analyzer)
        self.sources = _SourceStore(self._db)
        """Knowledge bases, collected roots and tracked source files."""
        self.doc_sources = DocSourceStore(cast("StoreConnection", self._db))
        """Documentation sources crawled from the web, and their pages."""

    @staticmethod
    def _prepare(
        conn: psycopg.Connection,
        read_only: bool,
        refuse: Callable[[psycopg.Connection], None] | None,
    ) -> str | None:
        """Migrate (or, read-only, check) the schema; why writes are refused, or None."""
        psycopg = import_psycopg()
        server = server_of(conn)
        try:
            standby = bool(conn.execute("SELECT pg_is_in_recovery()").fetchone()[0])  # type: ignore[index]
        except psycopg.Error as exc:
            raise storage_error("open the storage", server, exc) from exc
        if standby:
            reason: str | None = "the server is a hot standby, which only reads"
        elif read_only:
            reason = "it was opened read-only"
        else:
            migrate(conn, COMPONENT, MIGRATIONS)
            return None
        try:
            if refuse is not None:
                refuse(conn)
        except psycopg.Error as exc:
            raise storage_error("open the storage", server, exc) from exc
        version = schema_version(conn, COMPONENT)
        if version > SCHEMA_VERSION:
            raise StorageError(
                f"{server} holds storage schema version {version}, written by a newer release "
                f"of knowledge_agent (this one knows {SCHEMA_VERSION}): upgrade knowledge-agent "
                "to use it"
            )
        if version < SCHEMA_VERSION:
            raise StorageError(
                f"{server} has storage schema version {version}, not {SCHEMA_VERSION}: it "
                "needs opening for writing (on the primary) to be migrated"
            )
        return reason

    # -- lifecycle ----------------------------------------------------------------------

    @property
    def server(self) -> str:
        """``user@host:port/database``: where the data is (no password)."""
        return self._db.server

    @property
    def read_only(self) -> bool:
        """Whether writes are refused (asked for, or the server is a standby)."""
        return self._db.read_only_reason is not None

    @property
    def read_only_reason(self) -> str | None:
        """Why writes are refused, or None."""
        return self._db.read_only_reason

    def outside_writes(self, operation: str, step: Callable[[psycopg.Connection], _T]) -> _T | None:
        """``step(connection)`` on the storage's connection, outside any transaction (upkeep
        such as ``ANALYZE``); None, without running it, when writes are refused or a write
        group is open."""
        return self._db.outside_writes(operation, step)

    def write_group(self, operation: str) -> AbstractContextManager[None]:
        """Commit the writes made inside in one transaction. Each write stays all-or-nothing
        on its own (a savepoint): one that fails is rolled back alone, and those that
        completed are committed even if the block raises. Other threads of this process wait
        for the group to end, so keep it short.

        The index writers run once per batch of writes, and the writes of an item with its
        chunks (``save_item_with_chunks``, ``save_source_item``, ``save_doc_page_item``) are
        checked with their batch (:mod:`~knowledge_agent.backends.postgres.batches`): a write
        whose index write fails, or one of those whose statements fail, is rolled back alone
        then, after it returned, and the group raises
        :class:`~knowledge_agent.errors.WriteGroupError` naming its items once the rest has
        committed (unless the block raised)."""
        return self._db.write_group(operation)

    def close(self) -> None:
        """Close the connection; safe to call twice."""
        self._db.close()

    def __enter__(self) -> PostgresStorage:
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
            rows = conn.execute(
                f"{CHUNK_SELECT} WHERE item_id = ? ORDER BY chunk_index", (text_to_db(item.id),)
            ).fetchall()
            self._db.index(conn, [(item, [row_to_chunk(row) for row in rows])])

    def get_item(self, item_id: str) -> KnowledgeItem | None:
        """The item with this id, or None."""
        with self._db.reading("get_item") as conn:
            row = conn.execute(f"{ITEM_SELECT} WHERE id = ?", (text_to_db(item_id),)).fetchone()
        return None if row is None else row_to_item(row)

    def get_items(self, item_ids: Iterable[str]) -> dict[str, KnowledgeItem]:
        """The items found among these ids, by id; missing ids are absent."""
        return self._by_ids("get_items", ITEM_SELECT, item_ids, row_to_item)

    def get_item_summaries(self, item_ids: Iterable[str]) -> dict[str, ItemSummary]:
        """:meth:`get_items` without the text (its length instead), by id."""
        return self._by_ids("get_item_summaries", SUMMARY_SELECT, item_ids, row_to_summary)

    def ids_with_prefix(self, kind: str, prefix: str, limit: int = 2) -> list[str]:
        """Up to ``limit`` item (``kind="item"``) or chunk ids starting with ``prefix``,
        sorted: a range over the primary key, so it stays cheap at any size."""
        table = {"item": "knowledge_items", "chunk": "knowledge_chunks"}.get(kind)
        if table is None:
            raise StorageError(f"ids_with_prefix: kind must be 'item' or 'chunk', got {kind!r}")
        if not prefix:
            return []
        stored = text_to_db(prefix)
        if stored[-1] == ESCAPE:  # no character sorts above it
            sql = f"SELECT id FROM {table} WHERE id >= ? AND starts_with(id, ?)"
            params: tuple[Any, ...] = (stored, stored)
        else:
            sql = f"SELECT id FROM {table} WHERE id >= ? AND id < ?"
            params = (stored, stored[:-1] + chr(ord(stored[-1]) + 1))
        with self._db.reading("ids_with_prefix") as conn:
            rows = conn.execute(f"{sql} ORDER BY id LIMIT ?", (*params, limit)).fetchall()
        return [text_from_db(row[0]) for row in rows]

    def field_values(self, name: str) -> list[str]:
        """The distinct non-empty values of an item field that filters take (``kb``,
        ``source_type``, ``doc_type``, ``language``), sorted."""
        if name not in FILTER_FIELDS:
            raise StorageError(f"field_values: not a filter field: {name!r}")
        with self._db.reading("field_values") as conn:
            rows = conn.execute(
                f"SELECT DISTINCT {name} FROM knowledge_items WHERE {name} != '' ORDER BY 1"
            ).fetchall()
        return [text_from_db(row[0]) for row in rows]

    def item_facts(self, item_ids: Iterable[str]) -> dict[str, ItemFacts]:
        """What ranking needs of these items, without their text: doc type, path, age."""
        return self._by_ids("item_facts", FACTS_SELECT, item_ids, row_to_facts)

    def facet_groups(self, item_ids: Iterable[str]) -> list[tuple[str, str, str, int]]:
        """(kb, doc_type, source_type, documents) of the stored items among ``item_ids``,
        one row per distinct triple: one grouped count."""
        wanted = list(dict.fromkeys(text_to_db(item_id) for item_id in item_ids))
        if not wanted:
            return []
        with self._db.reading("facet_groups") as conn:
            rows = conn.execute(
                "SELECT kb, doc_type, source_type, count(*) FROM knowledge_items "
                "WHERE id = ANY(?) GROUP BY 1, 2, 3",
                (wanted,),
            ).fetchall()
        return [
            (text_from_db(kb), text_from_db(doc_type), text_from_db(source_type), int(documents))
            for kb, doc_type, source_type, documents in rows
        ]

    def iter_item_facts(
        self, *, kb: str | None = None, batch_size: int = 500
    ) -> Iterator[ItemFacts]:
        """:meth:`iter_items` without the text: every item's facts (of one kb, if given) in
        (created_at, id) order."""
        where, params = self._kb_filter(kb)
        rows = self._pages(
            "iter_item_facts", FACTS_SELECT, where, params, ("created_at", "id"), batch_size
        )
        return (row_to_facts(row) for row in rows)

    def delete_item(self, item_id: str) -> bool:
        """Delete an item and (by cascade) its chunks; True if it existed."""
        stored = text_to_db(item_id)
        with self._db.writing("delete_item") as conn:
            found = conn.execute(
                "SELECT 1 FROM knowledge_items WHERE id = ? FOR UPDATE", (stored,)
            ).fetchone()
            if found is None:
                return False
            self._db.delete_items(conn, [stored])
        return True

    def items_with_source(self, source_uri: str, *, kb: str | None = None) -> list[KnowledgeItem]:
        """The items whose ``source_uri`` is exactly this (in one kb, if given)."""
        sql = f"{ITEM_SELECT} WHERE source_uri = ?"
        params: list[Any] = [text_to_db(source_uri)]
        if kb is not None:
            sql += " AND kb = ?"
            params.append(text_to_db(kb))
        with self._db.reading("items_with_source") as conn:
            rows = conn.execute(sql + " ORDER BY kb, id", params).fetchall()
        return [row_to_item(row) for row in rows]

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
            params.append(text_to_db(kb))
        if source_type is not None:
            clauses.append("source_type = ?")
            params.append(text_to_db(source_type))
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        sql = f"{ITEM_SELECT}{where} ORDER BY created_at, id LIMIT ? OFFSET ?"
        with self._db.reading("list_items") as conn:
            rows = conn.execute(sql, [*params, limit, offset]).fetchall()
        return [row_to_item(row) for row in rows]

    def iter_items(
        self, *, kb: str | None = None, batch_size: int = 500
    ) -> Iterator[KnowledgeItem]:
        """Stream every item (of one kb, if given) in (created_at, id) order."""
        where, params = self._kb_filter(kb)
        rows = self._pages(
            "iter_items", ITEM_SELECT, where, params, ("created_at", "id"), batch_size
        )
        return (row_to_item(row) for row in rows)

    def item_ids(self, *, with_chunks: bool = False) -> set[str]:
        """The id of every item (``with_chunks``: of every item that has chunks)."""
        sql = (
            "SELECT DISTINCT item_id FROM knowledge_chunks"
            if with_chunks
            else "SELECT id FROM knowledge_items"
        )
        with self._db.reading("item_ids") as conn:
            return {text_from_db(row[0]) for row in conn.execute(sql)}

    def count_items(self, *, kb: str | None = None) -> int:
        """How many items (in one kb, if given)."""
        where, params = self._kb_filter(kb)
        sql = "SELECT COUNT(*) FROM knowledge_items" + (f" WHERE {where}" if where else "")
        with self._db.reading("count_items") as conn:
            row = conn.execute(sql, params).fetchone()
        return int(row[0])

    # -- chunks -------------------------------------------------------------------------

    def save_chunks(self, item_id: str, chunks: Iterable[KnowledgeChunk]) -> None:
        """Replace every chunk of an existing item with these, atomically."""
        chunk_list = list(chunks)
        stored = text_to_db(item_id)
        with self._db.writing("save_chunks") as conn:
            # Locked, so a concurrent writer of the same item waits for this one.
            row = conn.execute(f"{ITEM_SELECT} WHERE id = ? FOR UPDATE", (stored,)).fetchone()
            if row is None:
                raise NotFoundError(f"item {item_id!r} does not exist")
            conn.execute("DELETE FROM knowledge_chunks WHERE item_id = ?", (stored,))
            if chunk_list:
                conn.execute(CHUNK_INSERT, chunk_columns(item_id, chunk_list))
                _insert_names(conn, item_id, chunk_list)
            self._db.index(conn, [(row_to_item(row), _owned(chunk_list, item_id))])
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
                f"{CHUNK_SELECT} WHERE item_id = ? ORDER BY chunk_index", (text_to_db(item_id),)
            ).fetchall()
        return [row_to_chunk(row) for row in rows]

    def get_chunks_for_items(self, item_ids: Iterable[str]) -> dict[str, list[KnowledgeChunk]]:
        """:meth:`get_chunks_for_item` of each item that has chunks."""
        found = {item_id: self.get_chunks_for_item(item_id) for item_id in dict.fromkeys(item_ids)}
        return {item_id: chunks for item_id, chunks in found.items() if chunks}

    def get_chunk_by_id(self, chunk_id: str) -> KnowledgeChunk | None:
        """The chunk with this id, or None."""
        with self._db.reading("get_chunk_by_id") as conn:
            row = conn.execute(f"{CHUNK_SELECT} WHERE id = ?", (text_to_db(chunk_id),)).fetchone()
        return None if row is None else row_to_chunk(row)

    def get_chunks(self, chunk_ids: Iterable[str]) -> dict[str, KnowledgeChunk]:
        """The chunks found among these ids, by id; missing ids are absent."""
        return self._by_ids("get_chunks", CHUNK_SELECT, chunk_ids, row_to_chunk)

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
                f"{CHUNK_SELECT} WHERE item_id = ? AND chunk_index BETWEEN ? AND ? "
                "AND chunk_index != ? ORDER BY chunk_index",
                (text_to_db(item_id), chunk_index - window, chunk_index + window, chunk_index),
            ).fetchall()
        return [row_to_chunk(row) for row in rows]

    def get_chunks_at(
        self, positions: Iterable[tuple[str, int]]
    ) -> dict[tuple[str, int], KnowledgeChunk]:
        """The chunks at these ``(item_id, chunk_index)`` positions, by position (absent
        where an item has no such chunk): every result's neighbours in one query."""
        wanted = list(dict.fromkeys((item_id, int(index)) for item_id, index in positions))
        if not wanted:
            return {}
        with self._db.reading("get_chunks_at") as conn:
            rows = conn.execute(
                f"{CHUNK_SELECT} WHERE (item_id, chunk_index) IN ("
                "SELECT * FROM unnest(?::text[], ?::int4[]))",
                ([text_to_db(item_id) for item_id, _ in wanted], [index for _, index in wanted]),
            ).fetchall()
        chunks = (row_to_chunk(row) for row in rows)
        return {(chunk.item_id, chunk.chunk_index): chunk for chunk in chunks}

    def iter_chunks(self, *, batch_size: int = 1000) -> Iterator[KnowledgeChunk]:
        """Stream every chunk in (item_id, chunk_index) order, one page at a time."""
        rows = self._pages(
            "iter_chunks", CHUNK_SELECT, "", [], ("item_id", "chunk_index"), batch_size
        )
        return (row_to_chunk(row) for row in rows)

    def chunks_named(self, names: Sequence[str], role: str) -> list[tuple[str, str]]:
        """``(chunk_id, item_id)`` of the chunks whose ``role`` (``symbol`` or ``reference``)
        names include any of ``names``, whole or as their last part."""
        sql, params = names_query([text_to_db(name) for name in names], role)
        with self._db.reading("chunks_named") as conn:
            rows = conn.execute(sql, params).fetchall()
        return [(text_from_db(chunk_id), text_from_db(item_id)) for chunk_id, item_id in rows]

    def count_chunks(self, *, kb: str | None = None, item_id: str | None = None) -> int:
        """How many chunks (of one item, or of the items in one kb, if given)."""
        with self._db.reading("count_chunks") as conn:
            if item_id is not None:
                row = conn.execute(
                    "SELECT COUNT(*) FROM knowledge_chunks WHERE item_id = ?",
                    (text_to_db(item_id),),
                ).fetchone()
            elif kb is None:
                row = conn.execute("SELECT COUNT(*) FROM knowledge_chunks").fetchone()
            else:
                row = conn.execute(
                    "SELECT COUNT(*) FROM knowledge_chunks AS c "
                    "JOIN knowledge_items AS i ON i.id = c.item_id WHERE i.kb = ?",
                    (text_to_db(kb),),
                ).fetchone()
        return int(row[0])

    # -- the journal: none --------------------------------------------------------------

    def last_journal_seq(self) -> int:
        """0: there is no journal. The index writers write in the same transaction as the
        rows (:class:`IndexWriter`), so no index can miss a write and nothing needs
        replaying."""
        return 0

    def journal_since(self, seq: int) -> list[tuple[int, str, str]]:
        """[]: there is no journal (see :meth:`last_journal_seq`)."""
        return []

    def count_chunks_since(self, seq: int) -> int:
        """0: there is no journal (see :meth:`last_journal_seq`)."""
        return 0

    def trim_journal(self, upto_seq: int) -> None:
        """Nothing to trim: there is no journal (see :meth:`last_journal_seq`)."""

    # -- key/value settings -------------------------------------------------------------

    def get_meta(self, key: str, default: str | None = None) -> str | None:
        """A stored setting, or ``default``."""
        with self._db.reading("get_meta") as conn:
            row = conn.execute("SELECT value FROM kv WHERE key = ?", (text_to_db(key),)).fetchone()
        return default if row is None or row[0] is None else text_from_db(row[0])

    def set_meta(self, key: str, value: str) -> None:
        """Store a setting, replacing any previous value."""
        with self._db.writing("set_meta") as conn:
            conn.execute(
                "INSERT INTO kv (key, value) VALUES (?, ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (text_to_db(key), text_to_db(value)),
            )

    # -- helpers ------------------------------------------------------------------------

    @staticmethod
    def _kb_filter(kb: str | None) -> tuple[str, list[Any]]:
        return ("", []) if kb is None else ("kb = ?", [text_to_db(kb)])

    def _by_ids(
        self,
        operation: str,
        select: str,
        ids: Iterable[str],
        convert: Callable[[Row], _T],
    ) -> dict[str, _T]:
        """Rows of ``select`` whose id is among ``ids``, converted, by id (one query)."""
        wanted = list(dict.fromkeys(text_to_db(item_id) for item_id in ids))
        if not wanted:
            return {}
        with self._db.reading(operation) as conn:
            rows = conn.execute(f"{select} WHERE id = ANY(?)", (wanted,)).fetchall()
        return {text_from_db(row["id"]): convert(row) for row in rows}

    def _pages(
        self,
        operation: str,
        select: str,
        where: str,
        params: list[Any],
        key: tuple[str, str],
        batch_size: int,
    ) -> Iterator[Row]:
        """Every row of ``select`` ordered by ``key``, fetched a page at a time (keyset
        paging, with the lock released between pages: callers may write while iterating)."""
        check_batch_size(batch_size)
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
