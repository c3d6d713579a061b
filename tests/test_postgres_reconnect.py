"""A knowledge base on a PostgreSQL server whose connections break: the server restarts, ends
the sessions (``pg_terminate_backend``, which is what a restart does to a client), or a
pooler or firewall drops them. The next call opens a new connection; a read is run again; a
write whose transaction the break took is an error saying it was rolled back, and nothing of
it is stored; while the server is down, calls fail with one line naming it."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from postgres import PostgresServer

from benchmarks.stress_postgres import rows_whole
from knowledge_agent import KnowledgeAgentCore
from knowledge_agent.backends.postgres.connection import Link, connect
from knowledge_agent.errors import KnowledgeAgentError, SearchIndexError, StorageError

GUARD_POLLS = 6000  # of 10 ms: a hang guard, not a timing


def _sessions(admin: psycopg.Connection) -> int:
    row: Any = admin.execute(
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid()"
    ).fetchone()
    return int(row[0])


def end_sessions(url: str) -> int:
    """End every other session on the database and wait until they are gone; how many."""
    with psycopg.connect(url, autocommit=True) as admin:
        row: Any = admin.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()
        for _ in range(GUARD_POLLS):
            if _sessions(admin) == 0:
                return int(row[0])
            admin.execute("SELECT pg_sleep(0.01)")
    raise AssertionError("the ended sessions are still there")


def found(core: KnowledgeAgentCore, query: str) -> list[str]:
    return [result.item.id for result in core.search(query)]


@pytest.fixture
def core(postgres_url: str) -> Iterator[KnowledgeAgentCore]:
    with KnowledgeAgentCore(backend=postgres_url, workers=1) as knowledge_base:
        yield knowledge_base


@pytest.fixture
def silent_drops(monkeypatch: pytest.MonkeyPatch) -> None:
    """Breaks are not seen before a statement, as when a firewall or pooler drops a TCP
    connection without a word: the statement itself finds the connection broken."""
    monkeypatch.setattr(Link, "_hung_up", lambda self: False)


def test_a_search_after_the_sessions_ended_answers_the_same(
    core: KnowledgeAgentCore, postgres_url: str
) -> None:
    core.add_text("The harbour ferry leaves every hour from pier two.", title="ferry")
    before = found(core, "harbour ferry")
    assert before
    assert end_sessions(postgres_url) >= 3  # the storage's and each index's
    assert found(core, "harbour ferry") == before
    assert found(core, "pier") == before


def test_a_write_after_the_sessions_ended_is_stored_and_found(
    core: KnowledgeAgentCore, postgres_url: str
) -> None:
    first = core.add_text("Lighthouses guide the ships at night.", title="light")
    end_sessions(postgres_url)
    second = core.add_text("The harbour ferry leaves every hour.", title="ferry")
    assert found(core, "lighthouses") == [first.id]
    assert found(core, "harbour ferry") == [second.id]
    status = core.check()
    assert status.consistent and status.items == 2
    assert rows_whole(postgres_url) == []


def test_reads_and_writes_broken_without_a_word_are_run_again(
    core: KnowledgeAgentCore, postgres_url: str, silent_drops: None, caplog: Any
) -> None:
    item = core.add_text("Lighthouses guide the ships at night.", title="light")
    end_sessions(postgres_url)
    with caplog.at_level(logging.INFO, logger="knowledge_agent.backends.postgres.connection"):
        stored = core.get_item(item.id)
    assert stored is not None and stored.content == item.content
    assert "running the statement again" in caplog.text
    end_sessions(postgres_url)
    assert found(core, "lighthouses") == [item.id]  # a search's snapshot begins again
    end_sessions(postgres_url)
    second = core.add_text("The harbour ferry leaves every hour.", title="ferry")  # BEGIN again
    assert found(core, "harbour ferry") == [second.id]
    assert core.check().consistent


def test_a_write_group_whose_sessions_ended_is_rolled_back_and_says_so(
    core: KnowledgeAgentCore, postgres_url: str
) -> None:
    kept = core.add_text("Lighthouses guide the ships at night.", title="light")
    storage = core.storage
    written: list[str] = []
    with pytest.raises(StorageError) as raised, storage.write_group("store the notes"):
        written.append(core.add_text("The harbour ferry leaves every hour.", title="ferry").id)
        end_sessions(postgres_url)
        core.add_text("Tides turn twice a day at the pier.", title="tides")
    message = str(raised.value)
    assert "rolled its transaction back" in message and "run it again" in message
    assert storage.server in message and "\n" not in message
    # Nothing of the group is in any table; what was committed before is.
    assert core.get_item(written[0]) is None
    with psycopg.connect(postgres_url) as conn:
        row: Any = conn.execute("SELECT count(*) FROM kw_documents WHERE item_id <> %s", (kept.id,))
        assert row.fetchone()[0] == 0
    assert rows_whole(postgres_url) == []
    status = core.check()
    assert status.consistent and status.items == 1
    # The same core goes on, on a new connection.
    again = core.add_text("The harbour ferry leaves every hour.", title="ferry")
    assert found(core, "harbour ferry") == [again.id]
    assert found(core, "lighthouses") == [kept.id]


def test_a_rebuild_after_the_sessions_ended_completes(
    core: KnowledgeAgentCore, postgres_url: str
) -> None:
    core.add_text("Lighthouses guide the ships at night.", title="light")
    end_sessions(postgres_url)
    assert core.rebuild_index() == 1
    assert len(found(core, "lighthouses")) == 1


def test_while_the_server_is_down_calls_fail_with_one_line_naming_it_then_work_again() -> None:
    server = PostgresServer()  # its own: this test stops it
    try:
        url = server.new_database()
        with KnowledgeAgentCore(backend=url, workers=1) as core:
            item = core.add_text("The harbour ferry leaves every hour.", title="ferry")
            name = core.storage.server
            server.shut_down()
            calls: list[Callable[[], object]] = [
                lambda: core.search("harbour ferry"),
                lambda: core.get_item(item.id),
                lambda: core.add_text("Tides turn twice a day.", title="tides"),
            ]
            for call in calls:
                with pytest.raises(KnowledgeAgentError) as raised:
                    call()
                assert isinstance(raised.value, StorageError | SearchIndexError)
                message = str(raised.value)
                assert name in message and "\n" not in message, message
            server.start_again()
            assert found(core, "harbour ferry") == [item.id]
            second = core.add_text("Tides turn twice a day.", title="tides")
            assert found(core, "tides") == [second.id]
            server.restart()  # and a restart between two calls goes unnoticed
            assert found(core, "harbour ferry") == [item.id]
            status = core.check()
            assert status.consistent and status.items == 2
        assert rows_whole(url) == []
    finally:
        server.stop()


def test_a_commit_whose_answer_never_came_says_the_outcome_is_unknown(postgres_url: str) -> None:
    link = Link(
        connect(postgres_url),
        "the test server",
        reopen=lambda operation: connect(postgres_url, operation=operation),
    )
    try:
        with link.use("write"):
            link.run(lambda conn: conn.execute("BEGIN"))
            link.run(lambda conn: conn.execute("CREATE TABLE written (x int)"))
            end_sessions(postgres_url)
            with pytest.raises(psycopg.Error) as raised:
                link.run(lambda conn: conn.execute("COMMIT"), commit=True)
            lost = link.lost("write", raised.value)
        assert isinstance(lost, StorageError)
        assert "may or may not be stored" in str(lost) and "the test server" in str(lost)
        with link.use("read"):  # a new connection
            row: Any = link.run(lambda conn: conn.execute("SELECT to_regclass('written')"))
            assert row.fetchone()[0] is None  # here, the server had not committed it
    finally:
        link.close()
