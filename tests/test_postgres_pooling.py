"""A PostgreSQL URL with ``pooler=transaction``: a pooler in transaction mode (PgBouncer) runs
each transaction on whichever server session is free, so nothing may be left on a session.
The backend then prepares no statement (psycopg prepares one run more than five times on a
connection, and the next session does not know it) and sets nothing on its sessions. No
pooler runs here: these tests check what the backend leaves on its sessions."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from knowledge_agent import KnowledgeAgentCore
from knowledge_agent.backends.postgres.connection import connect, describe, transaction_pooled
from knowledge_agent.backends.postgres.storage import PostgresStorage
from knowledge_agent.errors import ConfigError, StorageError


def pooled(url: str) -> str:
    return url + ("&" if "?" in url else "?") + "pooler=transaction"


def prepared(conn: psycopg.Connection) -> int:
    row: Any = conn.execute("SELECT count(*) FROM pg_prepared_statements", prepare=False)
    return int(row.fetchone()[0])


def test_a_connection_behind_a_transaction_pooler_prepares_no_statement(
    postgres_url: str,
) -> None:
    with connect(postgres_url) as plain, connect(pooled(postgres_url)) as behind:
        for _ in range(10):
            plain.execute("SELECT count(*) FROM pg_class WHERE relname = %s", ("x",))
            behind.execute("SELECT count(*) FROM pg_class WHERE relname = %s", ("x",))
        assert prepared(plain) == 1  # what a transaction pooler would lose
        assert prepared(behind) == 0


def test_the_pooler_parameter_is_read_and_checked() -> None:
    url = "postgresql://ann@db.example:6432/notes?pooler=transaction&sslmode=disable"
    assert transaction_pooled(url)
    assert not transaction_pooled("postgresql://ann@db.example/notes?pooler=session")
    assert not transaction_pooled("postgresql://ann@db.example/notes")
    assert describe(url) == "ann@db.example:6432/notes"
    with pytest.raises(ConfigError, match="pooler in a PostgreSQL URL is transaction or session"):
        connect("postgresql://ann@db.example/notes?pooler=statement")


def test_a_read_only_storage_behind_a_transaction_pooler_sets_nothing_on_its_session(
    postgres_url: str,
) -> None:
    PostgresStorage(postgres_url).close()  # migrated: a read-only one only checks
    with PostgresStorage(pooled(postgres_url), read_only=True) as storage:
        # Its own session, which a pooler would hand to the next client as it is.
        session = storage._db.conn.raw  # type: ignore[union-attr]
        row: Any = session.execute("SHOW default_transaction_read_only").fetchone()
        assert row[0] == "off"
        with pytest.raises(StorageError, match="opened read-only"):
            storage.set_meta("k", "v")
    with PostgresStorage(postgres_url, read_only=True) as storage:  # no pooler: the server too
        session = storage._db.conn.raw  # type: ignore[union-attr]
        row = session.execute("SHOW default_transaction_read_only").fetchone()
        assert row[0] == "on"


def test_a_knowledge_base_behind_a_transaction_pooler_works_and_prepares_nothing(
    postgres_url: str,
) -> None:
    with KnowledgeAgentCore(backend=pooled(postgres_url), workers=1) as core:
        item = core.add_text("The harbour ferry leaves every hour.", title="ferry")
        for _ in range(8):  # past psycopg's threshold of five
            assert [hit.item.id for hit in core.search("harbour ferry")] == [item.id]
        assert core.check().consistent
        assert core.rebuild_index() == 1
        session = core.storage._db.conn.raw  # type: ignore[attr-defined]
        assert prepared(session) == 0
