"""The write groups of :class:`~knowledge_agent.backends.postgres.storage.PostgresStorage`:
writes sent without waiting, index writes run in batches.

Inside a write group each write writes its own rows at once, in a savepoint of the group's
transaction, but its index writes wait: the storage's index writers run once per batch of
writes (when the batch holds :data:`BATCH_ITEMS` items or :data:`BATCH_CHUNKS` chunks, and
before the group commits), so each writer handles many items per statement and the term
statistics change once per term per batch instead of once per item. It is all one
transaction: the rows still commit with their index rows, and readers see neither before.

**Round trips.** A write's statements go out in psycopg's pipeline mode. Most writes then
wait for the answers once, at their end, so that a failure of their statements rolls them
back alone and raises in them, as outside a group. The writes of an item with its chunks
(the storage names them ``unchecked``) read nothing, so they do not wait at all: their
answers are checked with their batch — before its index writes, before any read or other
write, and before the group commits.

**Order.** An item written twice in a batch is indexed once, as its last version, in the
position of its last write; the writers number documents in the order of the pairs, so ties
rank as if every write had indexed itself. A removal runs the writers' ``remove`` at once (on
what was indexed before the batch) and drops the item's pending pair.

**Failures.** A batch starts with a savepoint and records each of its writes as it was made
(its statements, index writes and removals). When a writer fails on the batch, or one of the
statements sent unchecked failed, the batch is rolled back to that savepoint and replayed
write by write, each in its own savepoint with its index writes run at once; a write whose
replay fails is rolled back alone, as it would have been had it been checked and indexed by
itself, and the others stand. Those writes are reported together when the group ends, after
the others commit: :class:`~knowledge_agent.errors.WriteGroupError`. An interruption
(``KeyboardInterrupt``) while a batch is indexed rolls that batch back.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from knowledge_agent.backends.postgres.connection import storage_error
from knowledge_agent.errors import WriteGroupError

if TYPE_CHECKING:
    from knowledge_agent.models import KnowledgeChunk, KnowledgeItem

__all__ = ["BATCH_CHUNKS", "BATCH_ITEMS", "BATCH_WRITES", "Recorder", "WriteGroup"]

logger = logging.getLogger(__name__)

BATCH_ITEMS = 256
"""Items a batch indexes at most: its writers run once it holds this many."""
BATCH_CHUNKS = 8192
"""Chunks a batch indexes at most (bounding the memory of the analysis of a batch)."""
BATCH_WRITES = 2048
"""Writes a batch records at most, whether or not they index anything (bounding the replay)."""

Pair = tuple["KnowledgeItem", Sequence["KnowledgeChunk"]]
Step = tuple[str, Any, Any]
"""One recorded step of a write: ``("execute", sql, params)``, ``("executemany", sql, rows)``,
``("index", pairs, None)`` or ``("remove", item ids, None)``."""


class Recorder(Protocol):
    """The storage's connection as a group drives it: statements in its own ``?`` style,
    recorded into ``record`` while that is a list."""

    record: list[Step] | None
    unchecked: bool
    raw: Any

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any: ...
    def executemany(self, sql: str, rows: Any) -> None: ...
    def pipelined(self) -> AbstractContextManager[None]: ...
    def sync(self) -> None: ...
    def open_pipeline(self) -> None: ...
    def close_pipeline(self) -> bool: ...


@dataclass(eq=False)
class _Write:
    operation: str
    steps: list[Step]

    def item_ids(self) -> list[str]:
        ids: dict[str, None] = {}
        for kind, value, _ in self.steps:
            if kind == "index":
                ids.update((item.id, None) for item, _ in value)
            elif kind == "remove":
                ids.update((item_id, None) for item_id in value)
        return list(ids)


@dataclass(eq=False)
class _Batch:
    writes: list[_Write] = field(default_factory=list)
    pending: dict[str, Pair] = field(default_factory=dict)  # item id → its latest pair
    chunks: int = 0

    def add(self, write: _Write) -> None:
        self.writes.append(write)
        for kind, value, _ in write.steps:
            if kind == "index":
                for item, chunks in value:
                    self.pending.pop(item.id, None)  # moves to the last write's position
                    self.pending[item.id] = (item, chunks)
                    self.chunks += len(chunks)
            elif kind == "remove":
                for item_id in value:
                    self.pending.pop(item_id, None)

    @property
    def full(self) -> bool:
        return (
            len(self.pending) >= BATCH_ITEMS
            or self.chunks >= BATCH_CHUNKS
            or len(self.writes) >= BATCH_WRITES
        )


class WriteGroup:
    """One open write group: the batch of writes waiting for their index writes, and the
    writes rolled back at a replay (see the module docstring).

    ``replace`` and ``remove`` run every index writer on the psycopg connection, ``replace``
    on what ``prepare`` makes of a batch's pairs (the writers' analysis, done while the
    server answers the batch's writes) or on pairs; ``psycopg`` is the module (its ``Error``
    is what a statement raises); ``server`` names the database in errors.
    """

    def __init__(
        self,
        operation: str,
        *,
        replace: Callable[[Any, Any], None],
        remove: Callable[[Any, Sequence[str]], None],
        prepare: Callable[[list[Pair]], Any] = list,
        psycopg: Any,
        server: str,
    ) -> None:
        self.operation = operation
        self._replace = replace
        self._prepare = prepare
        self._remove = remove
        self._psycopg = psycopg
        self._server = server
        self._batch: _Batch | None = None
        self._write: _Write | None = None
        self.failures: list[tuple[list[str], Exception]] = []

    # -- writes --------------------------------------------------------------------------

    @contextmanager
    def write(self, conn: Recorder, operation: str, *, unchecked: bool = False) -> Iterator[None]:
        """One write, its statements recorded; its index writes wait for the batch (a write
        inside a write is a savepoint of it). An ``unchecked`` write reads nothing: its
        statements go out without waiting for their answers, checked with the batch; any
        other write is a savepoint that waits for them once, so that its failure raises in
        it."""
        if self._write is not None:
            yield from self._nested(conn)
            return
        write = _Write(operation, [])
        if unchecked:
            # No savepoint of its own: a failure is undone by replaying the batch without it.
            conn.open_pipeline()
            conn.unchecked = True
            try:
                self._begin(conn, write, savepoint=False)
                try:
                    yield
                finally:
                    self._write = conn.record = None
            except BaseException:
                conn.unchecked = False
                if self.settle(conn):  # its statements ran: replay the batch without them
                    batch, self._batch = self._batch, None
                    if batch is not None:
                        self._recover(conn, batch)
                raise
            finally:
                conn.unchecked = False
        else:
            self.settle(conn)
            try:
                # One round trip, not one per statement; its failures still raise in it.
                with conn.pipelined():
                    self._begin(conn, write, savepoint=True)
                    try:
                        yield
                    finally:
                        self._write = conn.record = None
                    conn.execute("RELEASE SAVEPOINT write")
            except BaseException:
                self._undo(conn, "ROLLBACK TO SAVEPOINT write", "RELEASE SAVEPOINT write")
                raise
        if self._batch is None:  # a check of the writes before it replayed the batch
            return
        self._batch.add(write)
        if self._batch.full:
            self.flush(conn)

    def _begin(self, conn: Recorder, write: _Write, *, savepoint: bool) -> None:
        if self._batch is None:
            conn.execute("SAVEPOINT batch")
            self._batch = _Batch()
        if savepoint:
            conn.execute("SAVEPOINT write")
        self._write, conn.record = write, write.steps

    def _nested(self, conn: Recorder) -> Iterator[None]:
        assert self._write is not None
        steps = self._write.steps
        mark = len(steps)
        try:
            with conn.pipelined():
                conn.execute("SAVEPOINT write")  # recorded: a replay makes the same savepoint
                yield
                conn.execute("RELEASE SAVEPOINT write")
        except BaseException:
            del steps[mark:]
            conn.record = None
            try:
                self._undo(conn, "ROLLBACK TO SAVEPOINT write", "RELEASE SAVEPOINT write")
            finally:
                conn.record = steps
            raise

    def index(self, pairs: Sequence[Pair]) -> bool:
        """Defer the index writes of ``pairs`` to the batch when inside a write (copies: the
        caller's objects may change before the batch runs); False when not inside one."""
        if self._write is None:
            return False
        copies = [
            (dataclasses.replace(item), [dataclasses.replace(chunk) for chunk in chunks])
            for item, chunks in pairs
        ]
        self._write.steps.append(("index", copies, None))
        return True

    def removed(self, item_ids: Sequence[str]) -> None:
        """Record that the current write removed these items (their writers' ``remove``
        ran already): a replay removes them again, and the batch drops their pairs."""
        if self._write is not None:
            self._write.steps.append(("remove", list(item_ids), None))

    # -- batches -------------------------------------------------------------------------

    def settle(self, conn: Recorder) -> bool:
        """Wait for the answers to the statements sent unchecked; when one failed, replay the
        batch write by write (which ends it). True when none failed."""
        if conn.close_pipeline():
            return True
        batch, self._batch = self._batch, None
        logger.warning(
            "%s on %s: a statement of the batch failed; writing it again one write at a time",
            self.operation, self._server,
        )  # fmt: skip
        if batch is not None:
            self._recover(conn, batch)
        return False

    def flush(self, conn: Recorder) -> None:
        """Run the writers on the batch (replaying it write by write if they fail)."""
        batch = self._batch
        work: Any = None
        failure: Exception | None = None
        if batch is not None and batch.pending:
            try:
                # Client work (the analysis) while the server still answers the writes.
                work = self._prepare(list(batch.pending.values()))
            except Exception as exc:
                failure = exc
            except BaseException:
                conn.close_pipeline()
                self._undo(conn, "ROLLBACK TO SAVEPOINT batch", "RELEASE SAVEPOINT batch")
                self._batch = None
                raise
        self.settle(conn)
        batch, self._batch = self._batch, None
        if batch is None:  # replayed by the check
            return
        try:
            if work is not None and failure is None:
                self._replace(conn.raw, work)
        except Exception as exc:
            failure = exc
        except BaseException:
            self._undo(conn, "ROLLBACK TO SAVEPOINT batch", "RELEASE SAVEPOINT batch")
            raise
        if failure is not None:
            logger.warning(
                "%s on %s: indexing %d items at once failed (%s); writing them one by one",
                self.operation, self._server, len(batch.pending), _one_line(failure),
            )  # fmt: skip
            self._recover(conn, batch)
            return
        conn.execute("RELEASE SAVEPOINT batch")

    def _recover(self, conn: Recorder, batch: _Batch) -> None:
        """Roll the batch back and replay its writes one by one, each indexed at once."""
        try:
            self._rollback(conn, "ROLLBACK TO SAVEPOINT batch")
            self._replay(conn, batch)
            conn.execute("RELEASE SAVEPOINT batch")
        except BaseException:
            # Interrupted (or the connection failed): the batch's writes did not happen.
            self._undo(conn, "ROLLBACK TO SAVEPOINT batch", "RELEASE SAVEPOINT batch")
            raise

    def _replay(self, conn: Recorder, batch: _Batch) -> None:
        for write in batch.writes:
            conn.execute("SAVEPOINT write")
            try:
                self._run(conn, write.steps)
            except Exception as exc:
                self._rollback(conn, "ROLLBACK TO SAVEPOINT write; RELEASE SAVEPOINT write")
                error = self._error(write.operation, exc)
                logger.warning("%s: %s", self.operation, error)
                self.failures.append((write.item_ids(), error))
                continue
            conn.execute("RELEASE SAVEPOINT write")

    def _run(self, conn: Recorder, steps: list[Step]) -> None:
        for kind, value, params in steps:
            if kind == "execute":
                conn.execute(value, params)
            elif kind == "executemany":
                conn.executemany(value, params)
            elif kind == "index":
                self._replace(conn.raw, value)
            else:
                self._remove(conn.raw, value)

    def _undo(self, conn: Recorder, *statements: str) -> None:
        """Roll back, keeping the original error: a failed rollback is only logged."""
        if conn.raw.info.transaction_status == self._psycopg.pq.TransactionStatus.IDLE:
            return
        try:
            for statement in statements:
                conn.raw.execute(statement)
            conn.sync()
        except self._psycopg.Error:
            logger.exception("%s on %s failed", "; ".join(statements), self._server)

    def _rollback(self, conn: Recorder, statement: str) -> None:
        """Roll back to a savepoint; a failure (the connection is gone) ends the group."""
        try:
            conn.raw.execute(statement)
        except self._psycopg.Error as exc:
            raise storage_error(self.operation, self._server, exc) from exc

    def _error(self, operation: str, exc: Exception) -> Exception:
        if isinstance(exc, self._psycopg.Error):
            error = storage_error(operation, self._server, exc)
            error.__cause__ = exc
            return error
        return exc

    def error(self) -> WriteGroupError | None:
        """The writes rolled back at replays, as one error (None when there were none)."""
        if not self.failures:
            return None
        return WriteGroupError(self.operation, self.failures)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
