"""The storage's behaviour on every backend (the ``storage`` fixture: SQLite, then PostgreSQL):
round trips, atomicity, cascade, listing; and SQLiteStorageManager's own: the file, its
schema version, WAL, the journal."""

from __future__ import annotations

import logging
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from knowledge_agent.errors import NotFoundError, QueryError, StorageError
from knowledge_agent.models import KnowledgeChunk, KnowledgeItem
from knowledge_agent.protocols import Storage
from knowledge_agent.storage import SQLiteStorageManager
from knowledge_agent.storage.sqlite_storage import SCHEMA_VERSION

BASE_TIME = datetime(2024, 5, 1, 12, 0, tzinfo=timezone.utc)


def make_item(
    item_id: str, *, kb: str = "default", source_type: str = "text", minutes: int = 0
) -> KnowledgeItem:
    created = BASE_TIME + timedelta(minutes=minutes)
    return KnowledgeItem(
        id=item_id,
        title=f"Title {item_id}",
        content=f"content of {item_id}",
        source_type=source_type,
        kb=kb,
        created_at=created,
        updated_at=created,
    )


def make_chunks(prefix: str, count: int) -> list[KnowledgeChunk]:
    return [
        KnowledgeChunk(
            id=f"{prefix}-c{index}",
            chunk_index=index,
            content=f"{prefix} chunk {index}",
            heading=f"Heading {index}",
            start_position=index * 10,
            end_position=index * 10 + 9,
            metadata={"start_line": index + 1},
        )
        for index in range(count)
    ]


def journal_ops(storage: Storage) -> list[tuple[str, str]]:
    return [(item_id, op) for _, item_id, op in storage.journal_since(0)]


def journals(storage: Storage) -> bool:
    """Whether the backend keeps a journal for its indexes to replay (the local one does;
    PostgreSQL writes its indexes in the same transaction instead)."""
    return isinstance(storage, SQLiteStorageManager)


def is_integrity_error(exc: BaseException | None) -> bool:
    """sqlite3's or psycopg's IntegrityError (a constraint refused the row)."""
    return any(cls.__name__ == "IntegrityError" for cls in type(exc).__mro__)


@pytest.fixture
def storage(backend_storage: Storage) -> Storage:
    """An empty storage of each backend in turn."""
    return backend_storage


@pytest.fixture
def sqlite_storage() -> Iterator[SQLiteStorageManager]:
    """An empty in-memory SQLiteStorageManager, for what only SQLite has."""
    with SQLiteStorageManager() as manager:
        yield manager


@pytest.fixture
def db_file(tmp_path: Path) -> Path:
    return tmp_path / "kb.db"


# -- round trips ------------------------------------------------------------------------

json_scalars = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=12,
)
metadata_dicts = st.dictionaries(st.text(max_size=10), json_values, max_size=5)
timezones = (
    st.none()
    | st.just(timezone.utc)
    | st.integers(min_value=-(23 * 60 + 59), max_value=23 * 60 + 59).map(
        lambda minutes: timezone(timedelta(minutes=minutes))
    )
)
datetimes = st.datetimes(timezones=timezones)
texts = st.text(max_size=60)

items = st.builds(
    KnowledgeItem,
    id=st.text(min_size=1, max_size=40),
    title=texts,
    content=texts,
    source_type=texts,
    source_uri=st.none() | texts,
    content_type=texts,
    doc_type=texts,
    language=texts,
    tags=st.lists(texts, max_size=5),
    metadata=metadata_dicts,
    content_hash=texts,
    kb=texts,
    created_at=datetimes,
    updated_at=datetimes,
)
chunks = st.builds(
    KnowledgeChunk,
    id=st.text(min_size=1, max_size=40),
    chunk_index=st.integers(min_value=-(2**40), max_value=2**40),
    content=texts,
    heading=texts,
    start_position=st.integers(min_value=0, max_value=2**40),
    end_position=st.integers(min_value=0, max_value=2**40),
    metadata=metadata_dicts,
)


# One storage for every example (saving an item again replaces it).
@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(item=items)
def test_item_round_trip_is_exact(storage: Storage, item: KnowledgeItem) -> None:
    storage.save_item(item)
    loaded = storage.get_item(item.id)
    assert loaded == item
    assert loaded is not None
    # Equality of aware datetimes ignores the offset; the stored text must keep it.
    assert loaded.created_at.isoformat() == item.created_at.isoformat()
    assert loaded.updated_at.isoformat() == item.updated_at.isoformat()


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(chunk=chunks)
def test_chunk_round_trip_is_exact(storage: Storage, chunk: KnowledgeChunk) -> None:
    storage.save_item(make_item("parent"))
    storage.save_chunks("parent", [chunk])
    loaded = storage.get_chunk_by_id(chunk.id)
    assert loaded == chunk
    assert loaded is not None and loaded.item_id == "parent"


def test_unicode_and_nested_metadata_survive_a_reopen(
    open_storage: Callable[[], Storage],
) -> None:
    item = KnowledgeItem(
        id="ü-1",
        title="如何重置密码 — Ünïcødé 🚀",
        content="第一段。\n\nSecond paragraph.",
        source_uri="file:///tmp/文档.md",
        tags=["密码", "reset", ""],
        metadata={"nested": {"list": [1, 2.5, None, True, "é"], "deep": {"k": []}}},
        created_at=datetime(2023, 1, 2, 3, 4, 5, 678901, tzinfo=timezone(timedelta(hours=8))),
    )
    with open_storage() as manager:  # type: ignore[attr-defined]
        manager.save_item(item)
    with open_storage() as manager:  # type: ignore[attr-defined]
        loaded = manager.get_item(item.id)
    assert loaded == item
    assert loaded is not None and loaded.created_at.utcoffset() == timedelta(hours=8)


def test_get_item_of_unknown_id_is_none(storage: Storage) -> None:
    assert storage.get_item("missing") is None
    assert storage.get_chunk_by_id("missing") is None
    assert storage.get_chunks_for_item("missing") == []


def test_upsert_of_existing_item_updates_it_and_keeps_its_chunks(
    storage: Storage,
) -> None:
    item = make_item("a")
    storage.save_item(item)
    storage.save_chunks("a", make_chunks("a", 3))
    item.title = "changed"
    item.tags = ["new"]
    storage.save_item(item)
    loaded = storage.get_item("a")
    assert loaded is not None and loaded.title == "changed" and loaded.tags == ["new"]
    assert storage.count_items() == 1
    assert [c.id for c in storage.get_chunks_for_item("a")] == ["a-c0", "a-c1", "a-c2"]


# -- chunks -----------------------------------------------------------------------------


def test_save_chunks_replaces_old_chunks_and_sets_item_id(storage: Storage) -> None:
    storage.save_item(make_item("a"))
    storage.save_chunks("a", make_chunks("old", 3))
    new = make_chunks("new", 2)
    assert all(chunk.item_id == "" for chunk in new)
    storage.save_chunks("a", new)
    assert all(chunk.item_id == "a" for chunk in new)
    assert [c.id for c in storage.get_chunks_for_item("a")] == ["new-c0", "new-c1"]
    assert storage.get_chunk_by_id("old-c2") is None
    assert storage.count_chunks() == 2
    stored = storage.get_chunk_by_id("new-c1")
    assert stored == new[1]


def test_save_chunks_with_empty_list_removes_all_chunks(storage: Storage) -> None:
    storage.save_item(make_item("a"))
    storage.save_chunks("a", make_chunks("a", 3))
    storage.save_chunks("a", [])
    assert storage.get_chunks_for_item("a") == []
    assert storage.get_item("a") is not None


def test_save_chunks_accepts_a_generator(storage: Storage) -> None:
    storage.save_item(make_item("a"))
    storage.save_chunks("a", (chunk for chunk in make_chunks("a", 3)))
    assert storage.count_chunks() == 3


def test_get_chunks_for_item_orders_by_chunk_index(storage: Storage) -> None:
    storage.save_item(make_item("a"))
    shuffled = make_chunks("a", 8)
    random.Random(7).shuffle(shuffled)
    storage.save_chunks("a", shuffled)
    assert [c.chunk_index for c in storage.get_chunks_for_item("a")] == list(range(8))


@pytest.fixture
def two_items(storage: Storage) -> Storage:
    for item_id in ("a", "b"):
        storage.save_item(make_item(item_id))
        storage.save_chunks(item_id, make_chunks(item_id, 5))
    return storage


@pytest.mark.parametrize(
    ("chunk_index", "window", "expected"),
    [
        (0, 1, [1]),
        (4, 1, [3]),
        (2, 1, [1, 3]),
        (2, 2, [0, 1, 3, 4]),
        (0, 2, [1, 2]),
        (4, 2, [2, 3]),
        (2, 10, [0, 1, 3, 4]),
        (2, 0, []),
    ],
)
def test_get_adjacent_chunks(
    two_items: Storage, chunk_index: int, window: int, expected: list[int]
) -> None:
    neighbours = two_items.get_adjacent_chunks("a", chunk_index, window)
    assert [c.chunk_index for c in neighbours] == expected
    assert all(c.item_id == "a" for c in neighbours)
    assert [c.id for c in neighbours] == [f"a-c{index}" for index in expected]


def test_get_adjacent_chunks_never_crosses_items(two_items: Storage) -> None:
    neighbours = two_items.get_adjacent_chunks("b", 2, window=100)
    assert {c.item_id for c in neighbours} == {"b"}
    assert len(neighbours) == 4


def test_get_chunks_at_reads_each_position_once_and_skips_missing(two_items: Storage) -> None:
    positions = [("a", 0), ("b", 4), ("a", 0), ("a", 5), ("missing", 1), ("b", -1)]
    found = two_items.get_chunks_at(positions)
    assert sorted(found) == [("a", 0), ("b", 4)]
    assert found[("a", 0)].id == "a-c0"
    assert found[("b", 4)].id == "b-c4"
    assert two_items.get_chunks_at([]) == {}


@given(st.lists(st.tuples(st.sampled_from("ab"), st.integers(-2, 7)), max_size=30))
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_get_chunks_at_agrees_with_adjacent_chunks(
    two_items: Storage, positions: list[tuple[str, int]]
) -> None:
    found = two_items.get_chunks_at(positions)
    expected = {}
    for item_id, index in positions:
        for chunk in two_items.get_adjacent_chunks(item_id, index, 1):
            if chunk.chunk_index == index + 1:
                expected[(item_id, index + 1)] = chunk.id
    shifted = two_items.get_chunks_at((item_id, index + 1) for item_id, index in positions)
    assert {position: chunk.id for position, chunk in shifted.items()} == expected
    assert all(found[p].item_id == p[0] and found[p].chunk_index == p[1] for p in found)


def test_get_chunks_at_searches_the_index_rather_than_scanning_every_chunk(
    sqlite_storage: SQLiteStorageManager,
) -> None:
    """Each position is one index search: a scan of every chunk per query cost 40 ms a
    search at 100K chunks."""
    for item_id in ("a", "b"):
        sqlite_storage.save_item(make_item(item_id))
        sqlite_storage.save_chunks(item_id, make_chunks(item_id, 5))
    conn = sqlite_storage._db.conn
    assert conn is not None
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    try:
        found = sqlite_storage.get_chunks_at([("a", 1), ("b", 3)])
    finally:
        conn.set_trace_callback(None)
    assert sorted(found) == [("a", 1), ("b", 3)]
    reads = [sql for sql in statements if "knowledge_chunks" in sql]
    assert reads
    for sql in reads:
        plan = " | ".join(row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}"))
        assert "USING INDEX" in plan and "SCAN knowledge_chunks" not in plan, plan
        assert "SCAN c" not in plan.split(" | "), plan


def test_get_adjacent_chunks_rejects_negative_window(two_items: Storage) -> None:
    with pytest.raises(QueryError):
        two_items.get_adjacent_chunks("a", 2, window=-1)


# -- cascade, foreign keys and atomicity ------------------------------------------------


def test_foreign_keys_are_enforced(sqlite_storage: SQLiteStorageManager) -> None:
    conn = sqlite_storage._conn
    assert conn is not None
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    with pytest.raises(sqlite3.IntegrityError):
        conn.execute(
            "INSERT INTO knowledge_chunks (id, item_id, chunk_index) VALUES ('x', 'nope', 0)"
        )


def test_delete_item_cascades_to_chunks(two_items: Storage) -> None:
    assert two_items.delete_item("a") is True
    assert two_items.get_item("a") is None
    assert two_items.get_chunk_by_id("a-c0") is None
    assert two_items.count_chunks() == 5
    assert two_items.delete_item("b") is True
    assert two_items.count_chunks() == 0
    assert two_items.delete_item("b") is False


def test_duplicate_chunk_index_rolls_back_and_keeps_old_chunks(
    storage: Storage,
) -> None:
    storage.save_item(make_item("a"))
    storage.save_chunks("a", make_chunks("old", 3))
    seq_before = storage.last_journal_seq()
    bad = make_chunks("new", 2)
    bad[1].chunk_index = 0
    with pytest.raises(StorageError, match="save_chunks") as info:
        storage.save_chunks("a", bad)
    assert is_integrity_error(info.value.__cause__)
    assert [c.id for c in storage.get_chunks_for_item("a")] == ["old-c0", "old-c1", "old-c2"]
    assert all(chunk.item_id == "" for chunk in bad)
    assert storage.last_journal_seq() == seq_before


def test_a_write_group_rolls_back_a_failed_write_alone_and_commits_the_rest(
    open_storage: Callable[[], Storage],
) -> None:
    with open_storage() as storage:  # type: ignore[attr-defined]
        storage.save_item(make_item("a"))
        storage.save_chunks("a", make_chunks("old", 2))
        bad = make_chunks("bad", 2)
        bad[1].chunk_index = 0
        with pytest.raises(RuntimeError, match="stop"), storage.write_group("test"):
            storage.save_item_with_chunks(make_item("b"), make_chunks("b", 2))
            with pytest.raises(StorageError):
                storage.save_chunks("a", bad)
            storage.save_item_with_chunks(make_item("c"), make_chunks("c", 1))
            raise RuntimeError("stop")
    with open_storage() as storage:  # type: ignore[attr-defined]  # what was committed
        assert {item.id for item in storage.list_items()} == {"a", "b", "c"}
        assert [c.id for c in storage.get_chunks_for_item("a")] == ["old-c0", "old-c1"]
        assert [c.id for c in storage.get_chunks_for_item("c")] == ["c-c0"]
        if not journals(storage):
            return
        assert ("a", "upsert") in journal_ops(storage)
        assert [op for op in journal_ops(storage) if op[0] in "bc"] == [
            ("b", "upsert"),
            ("c", "upsert"),
        ]


def test_a_write_group_holds_other_threads_until_it_commits(
    open_storage: Callable[[], Storage],
) -> None:
    with open_storage() as storage:  # type: ignore[attr-defined]
        seen: list[int] = []
        inside = threading.Event()

        def other() -> None:
            inside.wait(10)
            seen.append(storage.count_items())  # waits for the group, sees it whole

        thread = threading.Thread(target=other)
        thread.start()
        with storage.write_group("test"):
            storage.save_item(make_item("a"))
            inside.set()
            time.sleep(0.05)
            storage.save_item(make_item("b"))
        thread.join(10)
        assert seen == [2]


def test_duplicate_chunk_id_rolls_back(storage: Storage) -> None:
    storage.save_item(make_item("a"))
    storage.save_chunks("a", make_chunks("old", 2))
    bad = make_chunks("new", 2)
    bad[1].id = bad[0].id
    with pytest.raises(StorageError):
        storage.save_chunks("a", bad)
    assert [c.id for c in storage.get_chunks_for_item("a")] == ["old-c0", "old-c1"]


def test_failed_save_item_with_chunks_keeps_old_item_and_chunks(
    storage: Storage,
) -> None:
    original = make_item("a")
    storage.save_item_with_chunks(original, make_chunks("old", 3))
    seq_before = storage.last_journal_seq()
    changed = make_item("a")
    changed.title = "changed"
    bad = make_chunks("new", 2)
    bad[0].chunk_index = 1
    with pytest.raises(StorageError, match="save_item_with_chunks"):
        storage.save_item_with_chunks(changed, bad)
    assert storage.get_item("a") == original
    assert [c.id for c in storage.get_chunks_for_item("a")] == ["old-c0", "old-c1", "old-c2"]
    assert storage.last_journal_seq() == seq_before


def test_failed_save_item_with_chunks_does_not_create_the_item(
    storage: Storage,
) -> None:
    bad = make_chunks("new", 2)
    bad[1].chunk_index = 0
    with pytest.raises(StorageError):
        storage.save_item_with_chunks(make_item("fresh"), bad)
    assert storage.get_item("fresh") is None
    assert storage.count_items() == 0


def test_save_item_with_chunks_writes_both(storage: Storage) -> None:
    item = make_item("a")
    new = make_chunks("a", 3)
    storage.save_item_with_chunks(item, new)
    assert storage.get_item("a") == item
    assert storage.get_chunks_for_item("a") == new
    assert all(chunk.item_id == "a" for chunk in new)
    if journals(storage):
        assert journal_ops(storage) == [("a", "upsert")]


def test_save_chunks_for_missing_item_raises_not_found(storage: Storage) -> None:
    with pytest.raises(NotFoundError, match="ghost"):
        storage.save_chunks("ghost", make_chunks("g", 1))
    assert storage.count_chunks() == 0
    assert storage.last_journal_seq() == 0


def test_sqlite_errors_are_mapped_to_storage_error(sqlite_storage: SQLiteStorageManager) -> None:
    assert sqlite_storage._conn is not None
    sqlite_storage._conn.execute("DROP TABLE knowledge_chunks")
    with pytest.raises(StorageError, match="get_chunk_by_id") as info:
        sqlite_storage.get_chunk_by_id("x")
    assert isinstance(info.value.__cause__, sqlite3.Error)


def test_corrupt_json_raises_storage_error(sqlite_storage: SQLiteStorageManager) -> None:
    sqlite_storage.save_item(make_item("a"))
    assert sqlite_storage._conn is not None
    sqlite_storage._conn.execute("UPDATE knowledge_items SET metadata = '{broken' WHERE id = 'a'")
    with pytest.raises(StorageError, match="corrupt"):
        sqlite_storage.get_item("a")


# -- files, schema version, WAL and concurrency -----------------------------------------


def test_reopened_file_keeps_data_and_schema_version(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "dirs" / "kb.db"
    with SQLiteStorageManager(path) as manager:
        assert manager.db_path == str(path)
        manager.save_item_with_chunks(make_item("a"), make_chunks("a", 3))
        manager.set_meta("index_seq", "7")
    assert path.exists()
    with SQLiteStorageManager(path) as manager:
        assert manager.get_item("a") == make_item("a")
        assert [c.id for c in manager.get_chunks_for_item("a")] == ["a-c0", "a-c1", "a-c2"]
        assert manager.get_meta("index_seq") == "7"
        assert manager.last_journal_seq() == 1
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    finally:
        conn.close()


def test_newer_schema_version_is_refused(db_file: Path) -> None:
    conn = sqlite3.connect(db_file)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(StorageError, match="newer version of knowledge_agent"):
        SQLiteStorageManager(db_file)


def test_an_older_schema_version_is_refused_read_only_and_left_as_it_is(db_file: Path) -> None:
    conn = sqlite3.connect(db_file)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION - 1}")
    conn.close()
    with pytest.raises(StorageError) as refused:
        SQLiteStorageManager(db_file, read_only=True)
    assert str(refused.value) == (
        f"{str(db_file)!r} has schema version {SCHEMA_VERSION - 1}, not {SCHEMA_VERSION}: "
        "it needs writing to be migrated"
    )
    conn = sqlite3.connect(db_file)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION - 1
    finally:
        conn.close()


def test_file_database_uses_wal(db_file: Path) -> None:
    with SQLiteStorageManager(db_file) as manager:
        assert manager._conn is not None
        assert manager._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert manager._conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        assert manager._conn.execute("PRAGMA busy_timeout").fetchone()[0] >= 1000


def _uri_filenames() -> bool:
    conn = sqlite3.connect(":memory:")
    try:
        return ("USE_URI",) in conn.execute("PRAGMA compile_options").fetchall()
    finally:
        conn.close()


@pytest.mark.skipif(not _uri_filenames(), reason="this SQLite reads file names literally")
def test_a_database_that_cannot_use_wal_works_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # SQLite built with USE_URI reads a "file:" name as a URI; the unix-none VFS has no
    # shared memory, so SQLite keeps the rollback journal instead of WAL: a user's only sign
    # that readers and the writer will block each other is this warning.
    monkeypatch.chdir(tmp_path)
    name = "file:kb.db?vfs=unix-none"
    caplog.set_level(logging.WARNING, logger="knowledge_agent.storage.sqlite_storage")
    with SQLiteStorageManager(name) as manager:
        manager.save_item(make_item("a"))
        assert manager.get_item("a") == make_item("a")
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        f"{name}: journal_mode is delete, not wal"
    ]
    assert (tmp_path / "kb.db").is_file()


def test_reader_sees_old_data_without_blocking_until_writer_commits(db_file: Path) -> None:
    with SQLiteStorageManager(db_file) as writer, SQLiteStorageManager(db_file) as reader:
        writer.save_item(make_item("a"))
        conn = writer._conn
        assert conn is not None
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("UPDATE knowledge_items SET title = 'new' WHERE id = 'a'")
        before = reader.get_item("a")  # a blocked read would fail after busy_timeout
        assert conn.in_transaction  # the read returned while the write was still open
        assert before is not None and before.title == "Title a"
        conn.execute("COMMIT")
        after = reader.get_item("a")
        assert after is not None and after.title == "new"


def test_second_writer_waits_for_the_first(db_file: Path) -> None:
    with SQLiteStorageManager(db_file) as first, SQLiteStorageManager(db_file) as second:
        conn = first._conn
        assert conn is not None
        conn.execute("BEGIN IMMEDIATE")
        errors: list[BaseException] = []

        def write() -> None:
            try:
                second.save_item(make_item("b"))
            except BaseException as exc:
                errors.append(exc)

        thread = threading.Thread(target=write)
        thread.start()
        time.sleep(0.3)
        assert thread.is_alive()  # blocked on the write lock, not failed
        conn.execute("COMMIT")
        thread.join(timeout=10)
        assert not errors
        assert first.get_item("b") is not None


def test_threads_share_one_manager(open_storage: Callable[[], Storage]) -> None:
    with open_storage() as manager:  # type: ignore[attr-defined]

        def work(worker: int) -> None:
            for n in range(20):
                item_id = f"w{worker}-{n}"
                manager.save_item_with_chunks(make_item(item_id), make_chunks(item_id, 2))
                assert manager.get_item(item_id) is not None

        threads = [threading.Thread(target=work, args=(w,)) for w in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert manager.count_items() == 80
        assert manager.count_chunks() == 160
        assert manager.last_journal_seq() == (80 if journals(manager) else 0)


# -- listing, streaming, batches and counts ---------------------------------------------


@pytest.fixture
def seven_items(storage: Storage) -> Storage:
    # Saved out of order; created_at decides the listing order.
    for n in (3, 0, 6, 1, 5, 2, 4):
        kb = "even" if n % 2 == 0 else "odd"
        source_type = "file" if n < 4 else "url"
        storage.save_item(make_item(f"i{n}", kb=kb, source_type=source_type, minutes=n))
    return storage


def test_list_items_pages_in_created_order(seven_items: Storage) -> None:
    pages = [[i.id for i in seven_items.list_items(limit=3, offset=o)] for o in (0, 3, 6, 9)]
    assert pages == [["i0", "i1", "i2"], ["i3", "i4", "i5"], ["i6"], []]


def test_list_items_filters(seven_items: Storage) -> None:
    assert [i.id for i in seven_items.list_items(kb="odd")] == ["i1", "i3", "i5"]
    assert [i.id for i in seven_items.list_items(source_type="url")] == ["i4", "i5", "i6"]
    assert [i.id for i in seven_items.list_items(kb="even", source_type="file")] == ["i0", "i2"]
    assert seven_items.list_items(kb="nope") == []


def test_list_items_breaks_created_at_ties_by_id(storage: Storage) -> None:
    for item_id in ("c", "a", "b"):
        storage.save_item(make_item(item_id))
    assert [i.id for i in storage.list_items()] == ["a", "b", "c"]


@pytest.mark.parametrize(("limit", "offset"), [(-1, 0), (10, -1)])
def test_list_items_rejects_negative_paging(storage: Storage, limit: int, offset: int) -> None:
    with pytest.raises(QueryError):
        storage.list_items(limit=limit, offset=offset)


def test_iter_items_streams_everything_in_order(seven_items: Storage) -> None:
    assert [i.id for i in seven_items.iter_items(batch_size=2)] == [f"i{n}" for n in range(7)]
    assert [i.id for i in seven_items.iter_items(kb="even", batch_size=1)] == [
        "i0",
        "i2",
        "i4",
        "i6",
    ]
    assert list(seven_items.iter_items(batch_size=7)) == seven_items.list_items()


def test_iter_items_tolerates_writes_between_batches(seven_items: Storage) -> None:
    seen = []
    for item in seven_items.iter_items(batch_size=2):
        seen.append(item.id)
        if item.id == "i0":
            seven_items.save_item(make_item("late", minutes=100))
            seven_items.delete_item("i5")
    assert seen == ["i0", "i1", "i2", "i3", "i4", "i6", "late"]


def test_iter_chunks_streams_in_item_then_index_order(storage: Storage) -> None:
    for item_id in ("b", "a", "c"):
        storage.save_item(make_item(item_id))
        shuffled = make_chunks(item_id, 4)
        random.Random(item_id).shuffle(shuffled)
        storage.save_chunks(item_id, shuffled)
    keys = [(c.item_id, c.chunk_index) for c in storage.iter_chunks(batch_size=3)]
    assert keys == [(item_id, n) for item_id in ("a", "b", "c") for n in range(4)]


def test_iter_chunks_tolerates_writes_between_batches(storage: Storage) -> None:
    for n in range(5):
        storage.save_item_with_chunks(make_item(f"item-{n}"), make_chunks(f"item-{n}", 3))
    seen = []
    for chunk in storage.iter_chunks(batch_size=4):
        seen.append(chunk.id)
        if len(seen) == 1:
            storage.save_item_with_chunks(make_item("zzz"), make_chunks("zzz", 2))
            storage.delete_item("item-3")
    expected = [f"item-{n}-c{i}" for n in (0, 1, 2, 4) for i in range(3)]
    assert seen == [*expected, "zzz-c0", "zzz-c1"]


@pytest.mark.parametrize("batch_size", [0, -5])
def test_iterators_reject_empty_batches(storage: Storage, batch_size: int) -> None:
    with pytest.raises(QueryError):
        list(storage.iter_chunks(batch_size=batch_size))
    with pytest.raises(QueryError):
        list(storage.iter_items(batch_size=batch_size))


def test_get_items_and_get_chunks_with_more_ids_than_one_batch(
    storage: Storage,
) -> None:
    for n in range(1200):
        storage.save_item(make_item(f"i{n:04d}"))
    storage.save_chunks("i0000", make_chunks("x", 1100))
    wanted = [f"i{n:04d}" for n in range(0, 1200, 2)] + ["missing", "i0000"]
    found = storage.get_items(wanted)
    assert set(found) == {f"i{n:04d}" for n in range(0, 1200, 2)}
    assert found["i0998"] == make_item("i0998")
    chunk_ids = [f"x-c{n}" for n in range(1100)] + ["nope"]
    chunk_map = storage.get_chunks(chunk_ids)
    assert len(chunk_map) == 1100
    assert chunk_map["x-c1099"].chunk_index == 1099
    assert storage.get_items([]) == {}
    assert storage.get_chunks(iter([])) == {}


def test_counts_with_kb_filter(storage: Storage) -> None:
    storage.save_item_with_chunks(make_item("a", kb="one"), make_chunks("a", 3))
    storage.save_item_with_chunks(make_item("b", kb="one"), make_chunks("b", 2))
    storage.save_item_with_chunks(make_item("c", kb="two"), make_chunks("c", 4))
    assert storage.count_items() == 3
    assert storage.count_items(kb="one") == 2
    assert storage.count_items(kb="none") == 0
    assert storage.count_chunks() == 9
    assert storage.count_chunks(kb="one") == 5
    assert storage.count_chunks(kb="two") == 4
    assert storage.count_chunks(kb="none") == 0


# -- journal and settings ---------------------------------------------------------------


def test_every_mutation_appends_to_the_journal(sqlite_storage: SQLiteStorageManager) -> None:
    storage = sqlite_storage
    assert storage.last_journal_seq() == 0
    storage.save_item(make_item("a"))
    storage.save_chunks("a", make_chunks("a", 2))
    storage.save_item_with_chunks(make_item("b"), make_chunks("b", 1))
    storage.delete_item("a")
    storage.delete_item("a")  # nothing deleted, nothing journalled
    storage.set_meta("k", "v")  # settings are not indexed
    entries = storage.journal_since(0)
    assert [(item_id, op) for _, item_id, op in entries] == [
        ("a", "upsert"),
        ("a", "upsert"),
        ("b", "upsert"),
        ("a", "delete"),
    ]
    seqs = [seq for seq, _, _ in entries]
    assert seqs == sorted(seqs) and len(set(seqs)) == 4
    assert storage.last_journal_seq() == seqs[-1]
    assert storage.journal_since(seqs[1]) == entries[2:]


def test_trim_journal_keeps_later_entries_and_the_sequence(
    sqlite_storage: SQLiteStorageManager,
) -> None:
    storage = sqlite_storage
    for item_id in ("a", "b", "c"):
        storage.save_item(make_item(item_id))
    seqs = [seq for seq, _, _ in storage.journal_since(0)]
    storage.trim_journal(seqs[1])
    assert [item_id for _, item_id, _ in storage.journal_since(0)] == ["c"]
    storage.trim_journal(seqs[2])
    assert storage.journal_since(0) == []
    # An index that recorded the last seq must not look ahead of the store after a trim.
    assert storage.last_journal_seq() == seqs[2]
    storage.save_item(make_item("d"))
    assert storage.journal_since(seqs[2]) == [(seqs[2] + 1, "d", "upsert")]


def test_meta_get_set(storage: Storage) -> None:
    assert storage.get_meta("missing") is None
    assert storage.get_meta("missing", "fallback") == "fallback"
    storage.set_meta("tfidf_seq", "12")
    storage.set_meta("tfidf_seq", "13")
    storage.set_meta("名前", "値")
    assert storage.get_meta("tfidf_seq") == "13"
    assert storage.get_meta("名前") == "値"


# -- lifecycle --------------------------------------------------------------------------


def test_closed_manager_raises_storage_error(open_storage: Callable[[], Storage]) -> None:
    manager = open_storage()
    manager.save_item(make_item("a"))
    manager.close()
    manager.close()
    with pytest.raises(StorageError, match="closed"):
        manager.get_item("a")
    with pytest.raises(StorageError, match="closed"):
        manager.save_item(make_item("b"))
    with pytest.raises(StorageError, match="closed"):
        next(manager.iter_chunks())


@pytest.mark.parametrize(
    ("operation", "call"),
    [
        ("get_meta", lambda storage: storage.get_meta("k")),
        ("trim_journal", lambda storage: storage.trim_journal(1)),
        ("count_items", lambda storage: storage.count_items()),
    ],
)
def test_a_call_on_a_closed_manager_names_its_operation(
    operation: str, call: Callable[[SQLiteStorageManager], object]
) -> None:
    manager = SQLiteStorageManager()
    manager.close()
    with pytest.raises(StorageError) as refused:
        call(manager)
    assert str(refused.value) == f"{operation}: the storage manager is closed"


def test_context_manager_closes(db_file: Path) -> None:
    with SQLiteStorageManager(db_file) as manager:
        manager.save_item(make_item("a"))
    with pytest.raises(StorageError, match="closed"):
        manager.count_items()
    assert manager._conn is None


def _schema(conn: sqlite3.Connection) -> list[tuple[str, str, str]]:
    rows = conn.execute("SELECT type, name, sql FROM sqlite_master ORDER BY type, name")
    return [tuple(row) for row in rows]


def test_a_memory_database_has_the_schema_a_new_file_is_migrated_to(tmp_path: Path) -> None:
    with SQLiteStorageManager(tmp_path / "kb.db") as on_disk:
        migrated = _schema(on_disk._conn)
    for _ in range(2):  # the first builds the copied schema, the second copies it again
        with SQLiteStorageManager() as memory:
            conn = memory._conn
            assert _schema(conn) == migrated
            assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
            assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
            assert memory.count_items() == 0
            assert memory.last_journal_seq() == 0
            memory.save_item_with_chunks(make_item("a"), make_chunks("a", 2))


def test_memory_databases_are_independent() -> None:
    with SQLiteStorageManager() as one, SQLiteStorageManager(":memory:") as two:
        one.save_item(make_item("a"))
        assert two.get_item("a") is None
        assert one.db_path == ":memory:"
