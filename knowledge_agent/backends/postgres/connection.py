"""Opening a PostgreSQL connection from a URL, keeping it open across server restarts, and
turning psycopg errors into ours.

psycopg 3 is imported here, lazily: the local backend never needs it, and a missing one is a
:class:`ConfigError` naming the extra that installs it. Every error names the operation and
the server (host, port, database; never the password) and chains the psycopg error.

A connection breaks for good when the server restarts, ends the session
(``pg_terminate_backend``) or a pooler or firewall drops it; :class:`Link` opens a new one on
the next use. What was in flight when it broke decides what the caller sees: a read, or any
statement run outside a transaction, is run again once on the new connection (it changed
nothing); a transaction that was open is gone (the server rolled it back), which is an error
saying so, for the caller to retry; a COMMIT whose answer never came is an error saying the
outcome is unknown.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import select
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar

from knowledge_agent.errors import ConfigError, KnowledgeAgentError, StorageError
from knowledge_agent.extras import missing_extra

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "CONNECT_TIMEOUT_S",
    "Link",
    "connect",
    "describe",
    "import_psycopg",
    "storage_error",
    "transaction_pooled",
]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

CONNECT_TIMEOUT_S = 10
"""Seconds to wait for a server that does not answer, unless the URL says otherwise."""

_POOLERS = ("transaction", "session")  # what the URL's pooler= may say


def import_psycopg() -> ModuleType:
    """The psycopg module; a ``ConfigError`` naming the ``[postgres]`` extra when missing."""
    try:
        return importlib.import_module("psycopg")
    except ImportError as exc:
        raise ConfigError(missing_extra("the PostgreSQL backend (psycopg 3)", "postgres")) from exc


def describe(url: str) -> str:
    """``user@host:port/database`` of a URL, for messages: never its password."""
    psycopg = import_psycopg()
    try:
        params = psycopg.conninfo.conninfo_to_dict(_without_pooler(url)[0])
    except (psycopg.Error, ConfigError):
        return "a PostgreSQL server (unreadable URL)"
    host = str(params.get("host") or "localhost")
    if host.startswith("/"):
        host = f"socket {host}"
    port = params.get("port")
    where = f"{host}:{port}" if port else host
    user = params.get("user")
    database = params.get("dbname") or user or "postgres"
    return f"{user + '@' if user else ''}{where}/{database}"


def storage_error(operation: str, server: str, exc: BaseException) -> StorageError:
    """A ``StorageError`` of one line: ``operation on server failed: what psycopg said``.

    Raise it ``from exc``. libpq's multi-line messages (the error, then hints) are joined.
    """
    return StorageError(f"{operation} on {server} failed: {_one_line(exc)}")


def _one_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return "; ".join(lines) or type(exc).__name__


def connect(
    url: str, *, operation: str = "connect", server: str | None = None, **options: Any
) -> psycopg.Connection:
    """A psycopg connection to ``url`` (``postgresql://…``), in autocommit mode: callers
    open transactions themselves. A server that is down, refuses, or rejects the password
    is a ``StorageError`` naming ``operation`` and the server (``server``, or the URL's
    ``user@host:port/database``), one line.

    With ``pooler=transaction`` in the URL (a pooler in transaction mode between this
    process and the server), the connection prepares no statement: each transaction may run
    on another server session, where a statement prepared in an earlier one is unknown.
    """
    psycopg = import_psycopg()
    if not url.startswith(("postgresql://", "postgres://")):
        raise ConfigError(f"a PostgreSQL URL starts with postgresql://, got {_scrub(url)!r}")
    server = server or describe(url)
    url, pooler = _without_pooler(url)
    if pooler == "transaction":
        options.setdefault("prepare_threshold", None)
    try:
        params = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.Error as exc:
        raise ConfigError(f"not a PostgreSQL URL: {_scrub(url)!r} ({exc})") from exc
    if "connect_timeout" not in params:
        options.setdefault("connect_timeout", CONNECT_TIMEOUT_S)
    try:
        conn = psycopg.connect(url, autocommit=True, **options)
    except psycopg.Error as exc:
        error = storage_error(operation, server, exc)
        password = params.get("password")
        if password:
            error = StorageError(str(error).replace(str(password), "***"))
        raise error from exc
    return conn


def transaction_pooled(url: str) -> bool:
    """Whether ``url`` says a pooler in transaction mode stands before the server
    (``pooler=transaction``): then each transaction may run on another server session, and
    nothing may be left on a session (no ``SET``, no prepared statement)."""
    return _without_pooler(url)[1] == "transaction"


def _without_pooler(url: str) -> tuple[str, str | None]:
    """``url`` without its ``pooler`` query parameter (ours, which libpq would refuse), and
    the parameter's value."""
    base, mark, query = url.partition("?")
    if not mark or "pooler=" not in query:
        return url, None
    kept, pooler = [], None
    for pair in query.split("&"):
        name, _, value = pair.partition("=")
        if name == "pooler":
            pooler = value
        else:
            kept.append(pair)
    if pooler not in _POOLERS:
        raise ConfigError(f"pooler in a PostgreSQL URL is {' or '.join(_POOLERS)}, got {pooler!r}")
    return base + ("?" + "&".join(kept) if kept else ""), pooler


def _scrub(url: str) -> str:
    """``url`` with the password of ``user:password@`` hidden."""
    scheme, sep, rest = url.partition("://")
    credentials, at, host = rest.rpartition("@")
    if not at or ":" not in credentials:
        return url
    user = credentials.split(":", 1)[0]
    return f"{scheme}{sep}{user}:***@{host}"


class Link:
    """One connection to a server, opened anew on the next use after it broke.

    ``conn`` is the connection in use now; ``reopen(operation)`` opens another, raising a
    one-line error that names the operation and the server when the server cannot be
    reached (None: ``conn`` was given by the caller and is never replaced); ``setup(conn)``
    readies each new one as the first was (session settings, adapters). Errors raised here
    are ``error(message)`` (a ``StorageError`` or a ``SearchIndexError``), one line naming
    the operation and the server.

    Not thread-safe: its owner runs every use under one lock. An operation runs inside
    :meth:`use`; its statements that may be run again go through :meth:`run`; when one of
    its psycopg errors escapes, :meth:`lost` says whether the connection broke and what that
    did to the transaction.
    """

    def __init__(
        self,
        conn: psycopg.Connection,
        server: str,
        *,
        reopen: Callable[[str], psycopg.Connection] | None,
        error: Callable[[str], KnowledgeAgentError] = StorageError,
        setup: Callable[[psycopg.Connection], object] | None = None,
    ) -> None:
        self.conn = conn
        self.server = server
        self.setup = setup
        self._reopen = reopen
        self._error = error
        self._psycopg = import_psycopg()
        self._idle = self._psycopg.pq.TransactionStatus.IDLE
        # The transaction status the connection last reported while whole: once it breaks,
        # libpq reports UNKNOWN, and this says whether a transaction went with it.
        self._status = conn.info.transaction_status
        self._committing = False
        self._depth = 0
        self._operation = "reconnect"  # the outermost operation in progress, for messages

    @property
    def idle(self) -> bool:
        """Whether the connection is whole and outside any transaction."""
        return not self.conn.closed and self.conn.info.transaction_status == self._idle

    def use(self, operation: str) -> _Use:
        """A context for one operation: its outermost entry first replaces a connection that
        broke while idle (the server restarted, ended the session, or closed it), without a
        round trip. Nested entries change nothing."""
        return _Use(self, operation)

    def run(self, step: Callable[[psycopg.Connection], _T], *, commit: bool = False) -> _T:
        """``step(conn)``: one statement (or a few that stand alone). Run outside any
        transaction, it is run again once on a new connection when the connection broke
        under it: outside a transaction it changed nothing, or committed on its own, as a
        read or a BEGIN does. ``commit``: the step commits, so a break under it leaves the
        outcome unknown (:meth:`lost`)."""
        conn = self.conn
        if conn.closed and self._status == self._idle and self._reopen is not None:
            conn = self._reconnect(self._operation)  # it broke with nothing open on it
        idle = self.idle
        self._committing = commit and not conn.closed  # a closed one sends nothing
        try:
            result = step(conn)
        except self._psycopg.Error:
            if not conn.closed:
                self._status = conn.info.transaction_status
                raise
            if not idle or self._reopen is None:
                raise
            logger.info("the connection to %s broke; running the statement again", self.server)
            conn = self._reconnect(self._operation)
            result = step(conn)
        self._status = conn.info.transaction_status
        self._committing = False
        return result

    def lost(self, operation: str, exc: BaseException) -> KnowledgeAgentError | None:
        """The error to raise for ``exc`` when the connection broke under it (None when it
        did not): the transaction it held was rolled back by the server, or, broken under a
        COMMIT, may or may not have committed. The next use opens a new connection."""
        if not self.conn.closed:
            return None
        if self._committing:
            outcome = (
                "the answer to the commit never came, so the write may or may not be stored: "
                "check, then run it again if it is not"
            )
        elif self._status != self._idle:
            outcome = (
                "the server rolled its transaction back, so nothing of it took effect: run it again"
            )
        else:
            outcome = "run it again"
        return self._error(
            f"{operation} on {self.server} failed: the connection to the server was lost "
            f"({_one_line(exc)}); {outcome}"
        )

    def close(self) -> None:
        self.conn.close()

    def _enter(self, operation: str) -> None:
        if self._depth == 0:
            self._operation = operation
        if self._depth == 0 and self._reopen is not None:
            if self.idle and self._hung_up():
                logger.info("the connection to %s was closed by the server", self.server)
            if self.conn.closed:
                self._reconnect(operation)
        self._depth += 1

    def _leave(self) -> None:
        self._depth -= 1

    def _hung_up(self) -> bool:
        """Whether the server closed this idle connection: it sends its reason and closes
        the socket, which is then readable; reading it marks the connection broken."""
        pgconn = self.conn.pgconn
        try:
            for _ in range(4):  # the reason, then the end of the stream
                if not _readable(pgconn.socket):
                    break
                pgconn.consume_input()
        except (OSError, ValueError, self._psycopg.Error):
            pass  # consume_input fails on the end of the stream: the connection is now BAD
        return bool(self.conn.closed)

    def _reconnect(self, operation: str) -> psycopg.Connection:
        assert self._reopen is not None
        with contextlib.suppress(self._psycopg.Error):  # broken: closing only frees it
            self.conn.close()
        try:
            conn = self._reopen(operation)
            if self.setup is not None:
                self.setup(conn)
        except KnowledgeAgentError as exc:
            raise self._error(str(exc)) from exc
        except self._psycopg.Error as exc:
            raise self._error(f"{operation} on {self.server} failed: {_one_line(exc)}") from exc
        self.conn = conn
        self._status = conn.info.transaction_status
        self._committing = False
        logger.info("reconnected to %s", self.server)
        return conn


class _Use:
    """:meth:`Link.use`: a plain class, cheaper than a generator per statement."""

    def __init__(self, link: Link, operation: str) -> None:
        self._link = link
        self._operation = operation

    def __enter__(self) -> psycopg.Connection:
        self._link._enter(self._operation)
        return self._link.conn

    def __exit__(self, *exc: object) -> None:
        self._link._leave()


def _readable(fd: int) -> bool:
    """Whether ``fd`` has something to read now (no wait)."""
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(0))
    return bool(select.select([fd], [], [], 0)[0])
