"""What the PostgreSQL keyword and TF-IDF indexes share: one connection behind a lock, the
writes through :class:`~.postings.PostingsWriter` in a transaction of their own, the counts.

Both indexes read the same tables (:mod:`.postings`), so an update through either changes
both; when the storage writes the postings in its own transactions, neither needs updating.
Writes are transactions: there is no journal to catch up with, so
:attr:`PostingsIndex.applied_seq` is always 0 and :meth:`PostingsIndex.set_applied_seq` does
nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from types import TracebackType
from typing import TYPE_CHECKING, Any

from typing_extensions import Self

from knowledge_agent.backends.postgres.postings import (
    CHUNK_LEVEL,
    ITEM_LEVEL,
    Pair,
    PostingsWriter,
    install,
)
from knowledge_agent.errors import ConfigError, SearchIndexError
from knowledge_agent.search.analysed_batch import AnalysedBatch

if TYPE_CHECKING:
    import psycopg

__all__ = ["IndexConnection", "PostingsIndex", "load_psycopg"]


def load_psycopg() -> Any:
    """The psycopg module, imported now; missing, a ConfigError naming the extra."""
    try:
        import psycopg
    except ImportError as exc:  # pragma: no cover - the [postgres] extra is installed in tests
        raise ConfigError(
            "the PostgreSQL backend needs psycopg: pip install 'knowledge-agent[postgres]'"
        ) from exc
    return psycopg


class IndexConnection:
    """One connection an index object uses, behind a lock (psycopg connections are not
    meant to be shared between threads mid-statement).

    Built from a URL (the connection is opened here, in autocommit mode, and closed by
    :meth:`close`), a callable returning a connection, or a connection (used, never closed).
    Reads run outside any transaction; :meth:`transaction` groups writes.
    """

    def __init__(self, source: str | psycopg.Connection | Callable[[], psycopg.Connection]) -> None:
        psycopg = load_psycopg()
        self.lock = threading.RLock()
        self._owned = not isinstance(source, psycopg.Connection)
        try:
            if isinstance(source, str):
                self.conn = psycopg.connect(source, autocommit=True)
            elif callable(source) and not isinstance(source, psycopg.Connection):
                self.conn = source()
            else:
                self.conn = source
        except psycopg.Error as exc:
            raise SearchIndexError(f"cannot connect to the index database: {exc}") from exc
        self.error: type[Exception] = psycopg.Error
        self.rollback: type[Exception] = psycopg.Rollback
        self._idle = psycopg.pq.TransactionStatus.IDLE
        self._closed = False

    @contextmanager
    def cursor(self, doing: str) -> Iterator[psycopg.Cursor[Any]]:
        """A cursor; a database error becomes :class:`SearchIndexError` saying ``doing``."""
        with self.lock:
            if self._closed:
                raise SearchIndexError("the index is closed")
            try:
                with self.conn.cursor() as cur:
                    yield cur
            except self.error as exc:
                raise SearchIndexError(f"cannot {doing}: {exc}") from exc

    @contextmanager
    def snapshot(self, doing: str) -> Iterator[psycopg.Cursor[Any]]:
        """A cursor inside one read-only transaction that sees one snapshot (repeatable
        read), so that the statistics and the postings a search reads agree."""
        with self.lock:
            if self._closed:
                raise SearchIndexError("the index is closed")
            idle = self.conn.info.transaction_status == self._idle
            try:
                with self.conn.transaction(), self.conn.cursor() as cur:
                    if idle:  # only the first statement of a transaction may set it
                        cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                    yield cur
            except self.error as exc:
                raise SearchIndexError(f"cannot {doing}: {exc}") from exc

    @contextmanager
    def transaction(self, doing: str) -> Iterator[psycopg.Connection]:
        """The connection inside one transaction, committed at the end (rolled back on error)."""
        with self.lock:
            if self._closed:
                raise SearchIndexError("the index is closed")
            try:
                with self.conn.transaction():
                    yield self.conn
            except self.error as exc:
                raise SearchIndexError(f"cannot {doing}: {exc}") from exc

    def close(self) -> None:
        with self.lock:
            if self._closed:
                return
            self._closed = True
            if self._owned:
                self.conn.close()


class PostingsIndex:
    """The writes, counts and lifetime of an index over the postings tables.

    ``source`` is a database URL (a connection is opened and owned), a callable returning a
    connection, or a connection (used, not closed). Opening creates or upgrades the tables.
    Thread-safe; every database error is a :class:`~knowledge_agent.errors.SearchIndexError`.
    """

    _label = "index"

    def __init__(
        self,
        source: str | psycopg.Connection | Callable[[], psycopg.Connection],
        writer: PostingsWriter,
    ) -> None:
        self.writer = writer
        self.analyzer = writer.analyzer
        self._db = IndexConnection(source)
        try:
            with self._db.transaction(f"create the {self._label} tables") as conn:
                install(conn)
        except BaseException:
            self._db.close()
            raise

    @property
    def applied_seq(self) -> int:
        """Always 0: writes are transactions, there is no journal to catch up with."""
        return 0

    def set_applied_seq(self, seq: int) -> None:
        """Nothing to record (see :attr:`applied_seq`)."""

    def update(
        self, upserts: Sequence[Pair] | AnalysedBatch = (), deletes: Iterable[str] = ()
    ) -> None:
        """Replace the rows of ``upserts``' items and remove those of ``deletes``, in one
        transaction; an id both upserted and deleted ends up deleted."""
        gone = [deletes] if isinstance(deletes, str) else list(deletes)
        with self._db.transaction(f"update the {self._label}") as conn:
            if isinstance(upserts, AnalysedBatch) or upserts:
                self.writer.replace(conn, upserts)
            if gone:
                self.writer.remove(conn, gone)

    def _count(self, level: int) -> int:
        with self._db.cursor(f"read the {self._label}") as cur:
            cur.execute("SELECT coalesce(sum(docs), 0) FROM kw_stats WHERE level = %s", (level,))
            row = cur.fetchone()
            return int(row[0]) if row else 0

    def chunk_count(self) -> int:
        """How many chunks the index holds."""
        return self._count(CHUNK_LEVEL)

    def item_count(self) -> int:
        """How many items the index holds."""
        return self._count(ITEM_LEVEL)

    def indexed_item_ids(self, *, chunks: bool = False) -> set[str]:
        """The id of every item indexed (``chunks``: of every item with an indexed chunk)."""
        with self._db.cursor(f"read the {self._label}") as cur:
            cur.execute(
                "SELECT DISTINCT item_id FROM kw_documents WHERE level = %s",
                (CHUNK_LEVEL if chunks else ITEM_LEVEL,),
            )
            return {item_id for (item_id,) in cur.fetchall()}

    def close(self) -> None:
        """Close the connection (when it was opened here); calling it again does nothing."""
        self._db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
