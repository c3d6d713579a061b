"""What the PostgreSQL keyword and TF-IDF indexes share: one connection behind a lock, the
writes through :class:`~.postings.PostingsWriter` in a transaction of their own, the counts.

Both indexes read the same tables (:mod:`.postings`), so an update through either changes
both; when the storage writes the postings in its own transactions, neither needs updating.
Writes are transactions: there is no journal to catch up with, so
:attr:`PostingsIndex.applied_seq` is always 0 and :meth:`PostingsIndex.set_applied_seq` does
nothing.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from types import TracebackType
from typing import TYPE_CHECKING, Any, cast

from typing_extensions import Self

from knowledge_agent.backends.postgres.connection import Link, connect
from knowledge_agent.backends.postgres.postings import (
    CHUNK_LEVEL,
    ITEM_LEVEL,
    Pair,
    PostingsWriter,
    install,
)
from knowledge_agent.backends.postgres.schema import server_of
from knowledge_agent.backends.postgres.statistics import Statistics
from knowledge_agent.errors import ConfigError, SearchIndexError, StorageError
from knowledge_agent.extras import missing_extra
from knowledge_agent.search.analysed_batch import AnalysedBatch

if TYPE_CHECKING:
    import psycopg

__all__ = ["IndexConnection", "PostingsIndex", "load_psycopg"]

logger = logging.getLogger(__name__)


def load_psycopg() -> Any:
    """The psycopg module, imported now; missing, a ConfigError naming the extra."""
    try:
        import psycopg
    except ImportError as exc:  # pragma: no cover - the [postgres] extra is installed in tests
        raise ConfigError(missing_extra("the PostgreSQL backend (psycopg 3)", "postgres")) from exc
    return psycopg


class IndexConnection:
    """One connection an index object uses, behind a lock (psycopg connections are not
    meant to be shared between threads mid-statement), opened anew on the next use after
    it broke (:class:`~.connection.Link`).

    Built from a URL (the connection is opened here, in autocommit mode, and closed by
    :meth:`close`), a callable returning a connection (called again to replace a broken
    one), or a connection (used, never closed nor replaced). Reads run outside any
    transaction, each run again once on a new connection when the connection broke under
    it; :meth:`snapshot` reads in one transaction and :meth:`transaction` groups writes:
    broken under either, the transaction is gone and the error says so.
    """

    def __init__(self, source: str | psycopg.Connection | Callable[[], psycopg.Connection]) -> None:
        psycopg = load_psycopg()
        self.lock = threading.RLock()
        self._owned = not isinstance(source, psycopg.Connection)
        try:
            if isinstance(source, str):
                conn = _connect(source, "connect to the index database")
            elif callable(source) and not isinstance(source, psycopg.Connection):
                conn = source()
            else:
                conn = source
        except psycopg.Error as exc:
            raise SearchIndexError(f"cannot connect to the index database: {exc}") from exc
        server = server_of(conn)
        reopen: Callable[[str], psycopg.Connection] | None = None
        if isinstance(source, str):
            reopen = functools.partial(_connect, source, server=server)
        elif self._owned:
            reopen = lambda operation: source()  # noqa: E731
        self.link = Link(conn, server, reopen=reopen, error=SearchIndexError)
        """The connection and what replaces it; ``link.setup`` readies each new one."""
        self.error: type[Exception] = psycopg.Error
        self.rollback: type[Exception] = psycopg.Rollback
        self._closed = False

    @property
    def conn(self) -> psycopg.Connection:
        """The connection in use now (another one after a break): a caller that runs a
        transaction of its own on it keeps this one until it ends."""
        return self.link.conn

    def live(self, doing: str) -> psycopg.Connection:
        """The connection, a new one if it broke while idle: for a caller holding
        :attr:`lock` that runs a transaction of its own on it (and keeps using that one)."""
        with self._using(doing):
            return self.conn

    @contextmanager
    def _using(self, doing: str) -> Iterator[None]:
        with self.lock:
            if self._closed:
                raise SearchIndexError("the index is closed")
            try:
                with self.link.use(doing):
                    yield
            except self.error as exc:
                lost = self.link.lost(doing, exc)
                raise (lost or SearchIndexError(f"cannot {doing}: {exc}")) from exc

    @contextmanager
    def cursor(self, doing: str) -> Iterator[psycopg.Cursor[Any]]:
        """A cursor for reads outside a transaction; a database error becomes
        :class:`SearchIndexError` saying ``doing``."""
        with self._using(doing):
            if not self.link.idle:  # inside a caller's transaction: its statements stay there
                with self.conn.cursor() as cur:
                    yield cur
                return
            reads = _ReadCursor(self.link)
            try:
                yield cast("psycopg.Cursor[Any]", reads)
            finally:
                reads.close()

    @contextmanager
    def snapshot(self, doing: str) -> Iterator[psycopg.Cursor[Any]]:
        """A cursor inside one read-only transaction that sees one snapshot (repeatable
        read), so that the statistics and the postings a search reads agree."""
        with self._using(doing):
            if not self.link.idle:  # a savepoint of the caller's transaction
                with self.conn.transaction(), self.conn.cursor() as cur:
                    yield cur
                return
            self.link.run(lambda c: c.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY"))
            with self._ending(self.conn) as conn, conn.cursor() as cur:
                yield cur

    @contextmanager
    def transaction(self, doing: str) -> Iterator[psycopg.Connection]:
        """The connection inside one transaction, committed at the end (rolled back on error)."""
        with self._using(doing):
            if not self.link.idle:  # a savepoint of the caller's transaction
                with self.conn.transaction():
                    yield self.conn
                return
            self.link.run(lambda c: c.execute("BEGIN"))
            with self._ending(self.conn) as conn:
                yield conn

    @contextmanager
    def _ending(self, conn: psycopg.Connection) -> Iterator[psycopg.Connection]:
        """``conn`` in the transaction just begun on it: committed after the block, rolled
        back when it raises (unless the connection broke: then the server rolled it back)."""
        try:
            yield conn
        except BaseException:
            if not conn.closed:
                try:
                    conn.execute("ROLLBACK")
                except self.error:
                    logger.warning("ROLLBACK on %s failed", self.link.server, exc_info=True)
            raise
        self.link.run(lambda c: c.execute("COMMIT"), commit=True)

    def close(self) -> None:
        with self.lock:
            if self._closed:
                return
            self._closed = True
            if self._owned:
                self.link.close()


class _ReadCursor:
    """The part of a psycopg cursor that reads use, each statement run through the link
    (run again once on a new connection when the connection broke under it)."""

    def __init__(self, link: Link) -> None:
        self._link = link
        self._cur: psycopg.Cursor[Any] | None = None

    def execute(self, query: Any, params: Any = None, **options: Any) -> _ReadCursor:
        def step(conn: psycopg.Connection) -> psycopg.Cursor[Any]:
            cur = conn.cursor()
            cur.execute(query, params, **options)
            return cur

        self.close()
        self._cur = self._link.run(step)
        return self

    def _last(self) -> psycopg.Cursor[Any]:
        if self._cur is None:
            raise SearchIndexError("no statement was run on this cursor")
        return self._cur

    def fetchone(self) -> Any:
        return self._last().fetchone()

    def fetchall(self) -> list[Any]:
        return self._last().fetchall()

    def __iter__(self) -> Iterator[Any]:
        return iter(self._last())

    @property
    def connection(self) -> psycopg.Connection:
        return self._link.conn

    def close(self) -> None:
        if self._cur is not None:
            self._cur.close()
            self._cur = None


def _connect(url: str, operation: str, *, server: str | None = None) -> psycopg.Connection:
    try:
        return connect(url, operation=operation, server=server)
    except StorageError as exc:
        raise SearchIndexError(str(exc)) from exc


class PostingsIndex:
    """The writes, counts and lifetime of an index over the postings tables.

    ``source`` is a database URL (a connection is opened and owned), a callable returning a
    connection, or a connection (used, not closed). Opening creates or upgrades the tables.
    ``statistics``: the cache of the tables' statistics, shared by the indexes of one
    database (:mod:`.statistics`); a new one by default.
    Thread-safe; every database error is a :class:`~knowledge_agent.errors.SearchIndexError`.
    """

    _label = "index"

    def __init__(
        self,
        source: str | psycopg.Connection | Callable[[], psycopg.Connection],
        writer: PostingsWriter,
        *,
        statistics: Statistics | None = None,
    ) -> None:
        self.writer = writer
        self.analyzer = writer.analyzer
        self.statistics = statistics if statistics is not None else Statistics()
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
            return self.statistics.read(cur).level(level).docs

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
