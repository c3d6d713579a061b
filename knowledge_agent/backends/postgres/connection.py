"""Opening a PostgreSQL connection from a URL, and turning psycopg errors into ours.

psycopg 3 is imported here, lazily: the local backend never needs it, and a missing one is a
:class:`ConfigError` naming the extra that installs it. Every error names the operation and
the server (host, port, database; never the password) and chains the psycopg error.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING, Any

from knowledge_agent.errors import ConfigError, StorageError

if TYPE_CHECKING:
    import psycopg

__all__ = ["CONNECT_TIMEOUT_S", "connect", "describe", "import_psycopg", "storage_error"]

CONNECT_TIMEOUT_S = 10
"""Seconds to wait for a server that does not answer, unless the URL says otherwise."""

_EXTRA = 'pip install "knowledge-agent[postgres]"'


def import_psycopg() -> ModuleType:
    """The psycopg module; a ``ConfigError`` naming the ``[postgres]`` extra when missing."""
    try:
        return importlib.import_module("psycopg")
    except ImportError as exc:
        raise ConfigError(
            f"the PostgreSQL backend needs psycopg 3, which is not installed: {_EXTRA}"
        ) from exc


def describe(url: str) -> str:
    """``user@host:port/database`` of a URL, for messages: never its password."""
    psycopg = import_psycopg()
    try:
        params = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.Error:
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
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    reason = "; ".join(lines) or type(exc).__name__
    return StorageError(f"{operation} on {server} failed: {reason}")


def connect(url: str, *, operation: str = "connect", **options: Any) -> psycopg.Connection:
    """A psycopg connection to ``url`` (``postgresql://…``), in autocommit mode: callers
    open transactions themselves. A server that is down, refuses, or rejects the password
    is a ``StorageError`` naming ``operation`` and the server, one line."""
    psycopg = import_psycopg()
    if not url.startswith(("postgresql://", "postgres://")):
        raise ConfigError(f"a PostgreSQL URL starts with postgresql://, got {_scrub(url)!r}")
    server = describe(url)
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


def _scrub(url: str) -> str:
    """``url`` with the password of ``user:password@`` hidden."""
    scheme, sep, rest = url.partition("://")
    credentials, at, host = rest.rpartition("@")
    if not at or ":" not in credentials:
        return url
    user = credentials.split(":", 1)[0]
    return f"{scheme}{sep}{user}:***@{host}"
