"""What only the PostgreSQL storage has: schema versions and migrations, index writers in the
transaction of each write, several writer processes, and its connection errors.

The storage behaviour it shares with SQLite is tested on both backends in test_storage*.py.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest
from postgres import PostgresServer

from knowledge_agent.backends.postgres.connection import connect
from knowledge_agent.backends.postgres.schema import migrate, schema_version
from knowledge_agent.backends.postgres.storage import SCHEMA_VERSION, PostgresStorage
from knowledge_agent.errors import ConfigError, StorageError, WriteGroupError
from knowledge_agent.models import KnowledgeChunk, KnowledgeItem
from knowledge_agent.storage.doc_sources import DocPage, DocSource
from knowledge_agent.storage.sources import SourceRecord, SourceRoot

HANG_GUARD_S = 120  # a subprocess that has not finished by then is stuck

POSTINGS = [["CREATE TABLE postings (item_id TEXT NOT NULL, chunk_id TEXT NOT NULL)"]]


def chunks_of(item_id: str, count: int) -> list[KnowledgeChunk]:
    return [
        KnowledgeChunk(id=f"{item_id}-c{n}", chunk_index=n, content=f"{item_id} part {n}")
        for n in range(count)
    ]


def query(url: str, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.execute(sql, params)
        return cursor.fetchall() if cursor.description else []


def run_all(scripts: list[list[str]]) -> list[subprocess.CompletedProcess[str]]:
    """Start every process at once, then wait for each."""
    processes = [
        subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for args in scripts
    ]
    done = []
    for process in processes:
        out, err = process.communicate(timeout=HANG_GUARD_S)
        done.append(subprocess.CompletedProcess(process.args, process.returncode, out, err))
    return done


# -- migrations --------------------------------------------------------------------------


def test_a_fresh_database_is_migrated_and_a_reopen_keeps_data_and_version(
    postgres_url: str,
) -> None:
    with PostgresStorage(postgres_url) as storage:
        storage.save_item_with_chunks(KnowledgeItem(id="a", kb="docs"), chunks_of("a", 2))
        storage.set_meta("k", "v")
    assert query(postgres_url, "SELECT component, version FROM schema_versions") == [
        ("storage", SCHEMA_VERSION)
    ]
    with PostgresStorage(postgres_url) as storage:
        assert storage.get_item("a") is not None
        assert storage.count_chunks() == 2
        assert storage.get_meta("k") == "v"
        assert storage.sources.kb_names() == ["docs"]
    assert query(postgres_url, "SELECT version FROM schema_versions") == [(SCHEMA_VERSION,)]


def test_a_component_applies_only_its_pending_migrations(postgres_url: str) -> None:
    first = [["CREATE TABLE things (n INT)", "INSERT INTO things VALUES (1)"]]
    second = [*first, ["INSERT INTO things VALUES (2)"]]
    with connect(postgres_url) as conn:
        migrate(conn, "things", first)
        migrate(conn, "things", first)  # nothing pending
        assert schema_version(conn, "things") == 1
        migrate(conn, "things", second)
        assert schema_version(conn, "things") == 2
        assert schema_version(conn, "other") == 0
    assert query(postgres_url, "SELECT n FROM things ORDER BY n") == [(1,), (2,)]


def test_a_failed_migration_leaves_the_version_and_tables_as_they_were(postgres_url: str) -> None:
    with connect(postgres_url) as conn:
        with pytest.raises(StorageError, match="migrate the broken schema"):
            migrate(conn, "broken", [["CREATE TABLE half (n INT)", "SELECT * FROM missing"]])
        assert schema_version(conn, "broken") == 0
        assert conn.execute("SELECT to_regclass('half')").fetchone() == (None,)


def test_a_database_of_a_newer_release_is_refused(postgres_url: str) -> None:
    PostgresStorage(postgres_url).close()
    query(postgres_url, "UPDATE schema_versions SET version = version + 1")
    with pytest.raises(StorageError, match=r"newer release.*upgrade"):
        PostgresStorage(postgres_url)
    with pytest.raises(StorageError, match=r"newer release.*upgrade"):
        PostgresStorage(postgres_url, read_only=True)


def test_processes_migrating_at_once_apply_each_migration_once(postgres_url: str) -> None:
    # The migration sleeps so that both processes are inside it at the same time.
    script = textwrap.dedent(
        """
        import sys
        from knowledge_agent.backends.postgres.connection import connect
        from knowledge_agent.backends.postgres.schema import migrate
        from knowledge_agent.backends.postgres.storage import PostgresStorage

        PostgresStorage(sys.argv[1]).close()
        with connect(sys.argv[1]) as conn:
            migrate(conn, "race", [[
                "CREATE TABLE race (n INT)", "SELECT pg_sleep(1)", "INSERT INTO race VALUES (1)"
            ]])
        """
    )
    results = run_all([[sys.executable, "-c", script, postgres_url] for _ in range(3)])
    assert [result.stderr for result in results] == ["", "", ""]
    assert [result.returncode for result in results] == [0, 0, 0]
    assert query(postgres_url, "SELECT count(*) FROM race") == [(1,)]
    assert query(postgres_url, "SELECT component, version FROM schema_versions ORDER BY 1") == [
        ("race", 1),
        ("storage", SCHEMA_VERSION),
    ]


def test_read_only_needs_a_migrated_database(postgres_url: str) -> None:
    with pytest.raises(StorageError, match=r"version 0.*migrated"):
        PostgresStorage(postgres_url, read_only=True)


# -- index writers -----------------------------------------------------------------------


class PostingsWriter:
    """An index writer that keeps a row per chunk in ``postings`` and records its calls with
    what the database held at that moment."""

    def __init__(self, fail_on: str | None = None) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.fail_on = fail_on

    def replace(
        self,
        conn: psycopg.Connection,
        pairs: Sequence[tuple[KnowledgeItem, Sequence[KnowledgeChunk]]],
    ) -> None:
        status = conn.info.transaction_status
        ids = [item.id for item, _ in pairs]
        conn.execute("DELETE FROM postings WHERE item_id = ANY(%s)", (ids,))
        for _, chunks in pairs:
            with conn.cursor() as cursor:
                cursor.executemany(
                    "INSERT INTO postings VALUES (%s, %s)",
                    [(chunk.item_id, chunk.id) for chunk in chunks],
                )
        self.calls.append(
            ("replace", [(item.id, [c.id for c in chunks]) for item, chunks in pairs], status)
        )
        if self.fail_on in ids:
            raise RuntimeError(f"index refused {self.fail_on}")

    def remove(self, conn: psycopg.Connection, item_ids: Sequence[str]) -> None:
        present = conn.execute(
            "SELECT count(*) FROM knowledge_items WHERE id = ANY(%s)", (list(item_ids),)
        ).fetchone()
        conn.execute("DELETE FROM postings WHERE item_id = ANY(%s)", (list(item_ids),))
        self.calls.append(("remove", sorted(item_ids), present[0] if present else None))


@pytest.fixture
def writer() -> PostingsWriter:
    return PostingsWriter()


@pytest.fixture
def indexed(postgres_url: str, writer: PostingsWriter) -> Iterator[PostgresStorage]:
    with connect(postgres_url) as conn:
        migrate(conn, "postings", POSTINGS)
    with PostgresStorage(postgres_url, index_writers=[writer]) as storage:
        yield storage


def postings(url: str) -> list[tuple[Any, ...]]:
    return query(url, "SELECT item_id, chunk_id FROM postings ORDER BY 1, 2")


IN_TRANSACTION = psycopg.pq.TransactionStatus.INTRANS


def test_each_write_calls_replace_inside_its_transaction(
    indexed: PostgresStorage, writer: PostingsWriter, postgres_url: str
) -> None:
    caller_chunks = chunks_of("a", 2)
    indexed.save_item_with_chunks(KnowledgeItem(id="a"), caller_chunks)
    assert writer.calls == [("replace", [("a", ["a-c0", "a-c1"])], IN_TRANSACTION)]
    assert postings(postgres_url) == [("a", "a-c0"), ("a", "a-c1")]  # chunks carry the item id
    assert [chunk.item_id for chunk in caller_chunks] == ["a", "a"]

    indexed.save_item(KnowledgeItem(id="a", title="renamed"))  # the stored chunks go along
    indexed.save_chunks("a", chunks_of("a", 1))
    indexed.sources.ensure_kb("docs")
    indexed.sources.save_root(SourceRoot("docs", "/r"))
    file_item = KnowledgeItem(id="f", kb="docs")
    indexed.sources.save_source_item(
        SourceRecord("docs", "/r/f.md", "/r", 1, 1, "indexed", "f"), file_item, chunks_of("f", 1)
    )
    indexed.doc_sources.save_doc_source(DocSource("docs", "https://x.test/"))
    page_item = KnowledgeItem(id="p", kb="docs")
    indexed.doc_sources.save_doc_page_item(
        DocPage("docs", "k", "https://x.test/", "https://x.test/p", "indexed", "p"),
        page_item,
        chunks_of("p", 1),
    )
    assert writer.calls[1:] == [
        ("replace", [("a", ["a-c0", "a-c1"])], IN_TRANSACTION),
        ("replace", [("a", ["a-c0"])], IN_TRANSACTION),
        ("replace", [("f", ["f-c0"])], IN_TRANSACTION),
        ("replace", [("p", ["p-c0"])], IN_TRANSACTION),
    ]
    assert postings(postgres_url) == [("a", "a-c0"), ("f", "f-c0"), ("p", "p-c0")]


def test_files_saved_at_once_write_an_item_given_twice_as_its_last_version(
    indexed: PostgresStorage, writer: PostingsWriter, postgres_url: str
) -> None:
    indexed.sources.ensure_kb("docs")
    indexed.sources.save_root(SourceRoot("docs", "/r"))

    def entry(path: str, item: KnowledgeItem, chunks: int) -> Any:
        record = SourceRecord("docs", path, "/r", 1, 1, "indexed", item.id)
        return record, item, chunks_of(item.id, chunks)

    first = KnowledgeItem(id="a", title="first", kb="docs", source_uri=None)
    last = KnowledgeItem(id="a", title="last", kb="docs", source_uri="/r/a.md")
    indexed.sources.save_source_items(
        [
            entry("/r/a.md", first, 3),
            entry("/r/b.md", KnowledgeItem(id="b", kb="docs", content='"q" \\ {x}'), 1),
            entry("/r/a.md", last, 2),
            entry("/r/c.md", KnowledgeItem(id="c", kb="new-kb"), 0),
        ]
    )
    # One write, in the position of each item's last version, with its chunks only.
    assert writer.calls == [
        ("replace", [("b", ["b-c0"]), ("a", ["a-c0", "a-c1"]), ("c", [])], IN_TRANSACTION)
    ]
    stored = indexed.get_item("a")
    assert stored is not None and (stored.title, stored.source_uri) == ("last", "/r/a.md")
    assert [c.id for c in indexed.get_chunks_for_item("a")] == ["a-c0", "a-c1"]
    b = indexed.get_item("b")
    assert b is not None and b.content == '"q" \\ {x}'
    assert query(postgres_url, "SELECT name FROM knowledge_bases ORDER BY 1") == [
        ("docs",),
        ("new-kb",),
    ]
    assert postings(postgres_url) == [("a", "a-c0"), ("a", "a-c1"), ("b", "b-c0")]


def test_a_writer_that_raises_rolls_the_write_back(postgres_url: str) -> None:
    with connect(postgres_url) as conn:
        migrate(conn, "postings", POSTINGS)
    writer = PostingsWriter()
    with PostgresStorage(postgres_url, index_writers=[writer]) as storage:
        storage.save_item_with_chunks(KnowledgeItem(id="b", title="old"), chunks_of("b", 1))
        writer.fail_on = "b"
        with pytest.raises(RuntimeError, match="index refused b"):
            storage.save_item_with_chunks(KnowledgeItem(id="b", title="new"), chunks_of("b", 3))
        with pytest.raises(RuntimeError, match="index refused b"):
            storage.save_item(KnowledgeItem(id="b", title="newer"))
        stored = storage.get_item("b")
        assert stored is not None and stored.title == "old"
        assert storage.count_chunks(item_id="b") == 1
        assert postings(postgres_url) == [("b", "b-c0")]
        # In a group the index writes run at its end: the failing write is rolled back
        # alone then, and reported when the rest has committed.
        with (
            pytest.raises(WriteGroupError, match="index refused b") as info,
            storage.write_group("test"),
        ):
            storage.save_item_with_chunks(KnowledgeItem(id="c"), chunks_of("c", 2))
            storage.save_chunks("b", chunks_of("b", 5))
            storage.save_item_with_chunks(KnowledgeItem(id="d"), chunks_of("d", 1))
        assert [(ids, str(error)) for ids, error in info.value.failures] == [
            (["b"], "index refused b")
        ]
        assert storage.count_chunks(item_id="b") == 1
        assert storage.count_chunks(item_id="c") == 2
        assert storage.count_chunks(item_id="d") == 1
    assert postings(postgres_url) == [("b", "b-c0"), ("c", "c-c0"), ("c", "c-c1"), ("d", "d-c0")]


def delete_item(storage: PostgresStorage) -> None:
    storage.delete_item("a")


def delete_kb(storage: PostgresStorage) -> None:
    storage.sources.delete_kb("docs")


def delete_root(storage: PostgresStorage) -> None:
    storage.sources.delete_root("docs", "/r")


def delete_source(storage: PostgresStorage) -> None:
    storage.sources.delete_source("docs", "/r/a.md")


def delete_doc_source(storage: PostgresStorage) -> None:
    storage.doc_sources.delete_doc_source("docs", "https://x.test/")


def delete_doc_page(storage: PostgresStorage) -> None:
    storage.doc_sources.delete_doc_page("docs", "page")


@pytest.mark.parametrize(
    "delete",
    [delete_item, delete_kb, delete_root, delete_source, delete_doc_source, delete_doc_page],
)
def test_deletes_call_remove_while_the_rows_are_still_there(
    indexed: PostgresStorage, writer: PostingsWriter, postgres_url: str, delete: Any
) -> None:
    indexed.sources.ensure_kb("docs")
    indexed.sources.save_root(SourceRoot("docs", "/r"))
    indexed.doc_sources.save_doc_source(DocSource("docs", "https://x.test/"))
    item = KnowledgeItem(id="a", kb="docs")
    if delete in (delete_doc_source, delete_doc_page):
        page = DocPage("docs", "page", "https://x.test/", "https://x.test/a", "indexed", "a")
        indexed.doc_sources.save_doc_page_item(page, item, chunks_of("a", 2))
    else:
        record = SourceRecord("docs", "/r/a.md", "/r", 1, 1, "indexed", "a")
        indexed.sources.save_source_item(record, item, chunks_of("a", 2))
    indexed.save_item_with_chunks(KnowledgeItem(id="other", kb="else"), chunks_of("other", 1))
    writer.calls.clear()
    delete(indexed)
    assert writer.calls == [("remove", ["a"], 1)]
    assert indexed.get_item("a") is None
    assert postings(postgres_url) == [("other", "other-c0")]


def test_deleting_a_missing_item_calls_no_writer(
    indexed: PostgresStorage, writer: PostingsWriter
) -> None:
    assert indexed.delete_item("ghost") is False
    assert indexed.sources.delete_kb("ghost") == []
    assert writer.calls == []


# -- several processes -------------------------------------------------------------------

WRITER_SCRIPT = textwrap.dedent(
    """
    import sys
    from knowledge_agent.backends.postgres.storage import PostgresStorage
    from knowledge_agent.models import KnowledgeChunk, KnowledgeItem

    class Postings:
        def replace(self, conn, pairs):
            for item, chunks in pairs:
                conn.execute("DELETE FROM postings WHERE item_id = %s", (item.id,))
                for chunk in chunks:
                    conn.execute("INSERT INTO postings VALUES (%s, %s)", (item.id, chunk.id))

        def remove(self, conn, ids):
            conn.execute("DELETE FROM postings WHERE item_id = ANY(%s)", (list(ids),))

    url, who, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with PostgresStorage(url, index_writers=[Postings()]) as storage:
        for n in range(40):
            chunks = [
                KnowledgeChunk(id=f"shared-c{i}", chunk_index=i, content=f"{who} {n} {i}")
                for i in range(count)
            ]
            storage.save_item_with_chunks(
                KnowledgeItem(id="shared", title=f"{who} {n}", kb="team"), chunks
            )
            if n % 10 == 0:
                storage.save_item(KnowledgeItem(id="shared", title=f"{who} {n}", kb="team"))
    """
)


def test_two_writer_processes_of_one_item_never_fail_or_duplicate(postgres_url: str) -> None:
    with connect(postgres_url) as conn:
        migrate(conn, "postings", POSTINGS)
    PostgresStorage(postgres_url).close()
    results = run_all(
        [
            [sys.executable, "-c", WRITER_SCRIPT, postgres_url, "three", "3"],
            [sys.executable, "-c", WRITER_SCRIPT, postgres_url, "five", "5"],
        ]
    )
    assert [result.stderr for result in results] == ["", ""]
    assert [result.returncode for result in results] == [0, 0]
    with PostgresStorage(postgres_url) as storage:
        assert storage.count_items() == 1
        item = storage.get_item("shared")
        assert item is not None
        chunks = storage.get_chunks_for_item("shared")
    # The last writer's item and chunks, whole: never a mix of the two.
    count = 3 if item.title.startswith("three") else 5
    assert [chunk.id for chunk in chunks] == [f"shared-c{i}" for i in range(count)]
    assert {chunk.content.split()[0] for chunk in chunks} == {item.title.split()[0]}
    assert postings(postgres_url) == [("shared", f"shared-c{i}") for i in range(count)]


# -- read-only, errors -------------------------------------------------------------------


def test_read_only_refuses_writes_and_says_why(postgres_url: str) -> None:
    with PostgresStorage(postgres_url) as storage:
        storage.save_item(KnowledgeItem(id="a"))
    with PostgresStorage(postgres_url, read_only=True) as storage:
        assert storage.read_only and storage.read_only_reason == "it was opened read-only"
        assert storage.get_item("a") is not None
        with pytest.raises(StorageError, match=r"cannot write .*\(save_item\): it was opened"):
            storage.save_item(KnowledgeItem(id="b"))
        with pytest.raises(StorageError, match="ensure_kb"):
            storage.sources.ensure_kb("x")
        with pytest.raises(StorageError, match="cannot write"), storage.write_group("test"):
            pass
    with PostgresStorage(postgres_url) as storage:
        assert storage.read_only_reason is None
        assert storage.get_item("b") is None


def test_psycopg_errors_become_storage_errors_naming_operation_and_server(
    postgres_url: str,
) -> None:
    with PostgresStorage(postgres_url) as storage:
        query(postgres_url, "DROP TABLE knowledge_chunks CASCADE")
        with pytest.raises(StorageError, match=r"get_chunk_by_id on .*/test_") as info:
            storage.get_chunk_by_id("x")
        assert isinstance(info.value.__cause__, psycopg.Error)
        assert "\n" not in str(info.value)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_stopped_server_is_one_clear_line(tmp_path: Path) -> None:
    url = f"postgresql://someone:s3cret-pw@127.0.0.1:{free_port()}/kb"
    with pytest.raises(StorageError) as info:
        PostgresStorage(url)
    message = str(info.value)
    assert message.startswith("open the storage on someone@127.0.0.1:")
    assert "refused" in message
    assert "\n" not in message and "s3cret-pw" not in message
    assert isinstance(info.value.__cause__, psycopg.OperationalError)


@pytest.fixture
def password_role(postgres_server: PostgresServer) -> Iterator[str]:
    """A role that must give its password over the socket (the test server trusts everyone
    else); the URL of the server's database with the wrong password for it."""
    admin = postgres_server.url()
    hba_file = Path(query(admin, "SHOW hba_file")[0][0])
    original = hba_file.read_text()
    query(admin, "CREATE ROLE ka_locked LOGIN PASSWORD 'right-pw'")
    hba_file.write_text("local all ka_locked scram-sha-256\n" + original)
    query(admin, "SELECT pg_reload_conf()")
    try:
        yield admin.replace("postgres:@", "ka_locked:wrong-pw@", 1)
    finally:
        hba_file.write_text(original)
        query(admin, "SELECT pg_reload_conf()")
        query(admin, "DROP ROLE ka_locked")


def test_a_wrong_password_is_one_clear_line_without_it(password_role: str) -> None:
    with pytest.raises(StorageError) as info:
        PostgresStorage(password_role)
    message = str(info.value)
    assert message.startswith("open the storage on ka_locked@socket ")
    assert "password authentication failed" in message
    assert "\n" not in message and "wrong-pw" not in message


def test_a_url_that_is_not_postgresql_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="postgresql://") as info:
        PostgresStorage("mysql://me:pw@host/db")
    assert "pw" not in str(info.value).replace("postgresql", "")


def test_missing_psycopg_is_a_config_error_naming_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)  # what `import psycopg` sees uninstalled
    with pytest.raises(ConfigError, match=r'pip install "knowledge-agent\[postgres\]"'):
        PostgresStorage("postgresql://localhost/kb")


def test_the_backend_package_imports_no_psycopg() -> None:
    code = "import sys, knowledge_agent.backends.postgres.storage; print('psycopg' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG_GUARD_S
    )
    assert result.stdout.strip() == "False", result.stderr
