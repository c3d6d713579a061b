"""Schema versions per component, and the migrations that bring a database up to date.

Each component of the backend (the storage, the keyword index, …) owns its tables and a list
of migrations: migration ``n`` (a list of SQL statements) takes the component from version
``n - 1`` to ``n``. ``schema_versions`` records the version each component reached. The
pending migrations of a component are applied in one transaction, under a transaction-level
advisory lock, so processes opening the same database at once wait for each other instead of
applying them twice; a database that a newer release wrote is refused, never downgraded.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from knowledge_agent.backends.postgres.connection import import_psycopg, storage_error
from knowledge_agent.errors import StorageError

if TYPE_CHECKING:
    import psycopg

__all__ = ["MIGRATION_LOCK", "migrate", "schema_version", "server_of"]

logger = logging.getLogger(__name__)

MIGRATION_LOCK = 0x6B61_5343_4845_4D41  # "kaSCHEMA": the advisory lock every migration takes

_CREATE_VERSIONS = (
    "CREATE TABLE IF NOT EXISTS schema_versions (component TEXT PRIMARY KEY, version INT NOT NULL)"
)


def server_of(conn: psycopg.Connection) -> str:
    """``user@host:port/database`` of an open connection, for messages."""
    info = conn.info
    host = info.host if not info.host.startswith("/") else f"socket {info.host}"
    return f"{info.user}@{host}:{info.port}/{info.dbname}"


def schema_version(conn: psycopg.Connection, component: str) -> int:
    """The version ``component`` reached in this database (0: never migrated)."""
    psycopg = import_psycopg()
    try:
        exists = conn.execute("SELECT to_regclass('schema_versions') IS NOT NULL").fetchone()
        if not exists or not exists[0]:
            return 0
        row = conn.execute(
            "SELECT version FROM schema_versions WHERE component = %s", (component,)
        ).fetchone()
    except psycopg.Error as exc:
        raise storage_error(f"read the {component} schema version", server_of(conn), exc) from exc
    return 0 if row is None else int(row[0])


def _read_only(conn: psycopg.Connection) -> bool:
    """Whether the server refuses writes (a hot standby, or read-only by default)."""
    row = conn.execute("SELECT current_setting('transaction_read_only')").fetchone()
    return row is not None and row[0] == "on"


def migrate(conn: psycopg.Connection, component: str, migrations: Sequence[Sequence[str]]) -> None:
    """Bring ``component``'s tables to version ``len(migrations)``, in one transaction.

    Migration ``n`` (1-based) is the statements that take it from version ``n - 1`` to ``n``.
    A database at a version above ``len(migrations)`` was written by a newer release: a
    ``StorageError`` says to upgrade. A read-only server (a hot standby) is only checked: it
    must be at this version already. Inside a transaction already open on ``conn`` the
    work becomes a savepoint of it (and the lock is held until that transaction ends).
    """
    psycopg = import_psycopg()
    target = len(migrations)
    server = server_of(conn)
    if _read_only(conn):  # a hot standby: its primary migrates, it follows
        current = schema_version(conn, component)
        if current != target:
            raise StorageError(
                f"{server} is read-only and holds {component} schema version {current}, not "
                f"{target}: open the primary with this release first"
            )
        return
    try:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            conn.execute(_CREATE_VERSIONS)
            row = conn.execute(
                "SELECT version FROM schema_versions WHERE component = %s", (component,)
            ).fetchone()
            current = 0 if row is None else int(row[0])
            if current > target:
                raise StorageError(
                    f"{server} holds {component} schema version {current}, written by a newer "
                    f"release of knowledge_agent (this one knows {target}): upgrade "
                    "knowledge-agent to use it"
                )
            for version in range(current + 1, target + 1):
                for statement in migrations[version - 1]:
                    conn.execute(statement)
                logger.info("%s: migrated %s schema to version %d", server, component, version)
            if current < target:
                conn.execute(
                    "INSERT INTO schema_versions (component, version) VALUES (%s, %s) "
                    "ON CONFLICT (component) DO UPDATE SET version = excluded.version",
                    (component, target),
                )
    except psycopg.Error as exc:
        raise storage_error(f"migrate the {component} schema", server, exc) from exc
