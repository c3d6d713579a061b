"""A write group of the PostgreSQL storage indexes its writes in batches (``batches.py``):
each index writer runs once per batch, a write costs one round trip, and the outcome is what
writing one item at a time gives — the same index rows in the same order, a failed index
write rolled back alone (reported when the group ends), removals and rewrites of pending
items, and an exception or an interruption leaving nothing half-indexed.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any

import numpy as np
import psycopg
import pytest
from test_dense_search import FakeEmbedder

from knowledge_agent.analysis import TextAnalyzer
from knowledge_agent.backends.postgres import batches
from knowledge_agent.backends.postgres.connection import connect
from knowledge_agent.backends.postgres.dense import PostgresDenseIndex
from knowledge_agent.backends.postgres.postings import PostingsWriter, install
from knowledge_agent.backends.postgres.schema import migrate
from knowledge_agent.backends.postgres.storage import PostgresStorage
from knowledge_agent.errors import EmbeddingError, StorageError, WriteGroupError
from knowledge_agent.models import KnowledgeChunk, KnowledgeItem

POSTINGS = [["CREATE TABLE postings (item_id TEXT NOT NULL, chunk_id TEXT NOT NULL)"]]


class Interrupted(BaseException):
    """Stands for Ctrl-C inside an index writer."""


class Recording:
    """An index writer keeping a row per chunk in ``postings``; it records each call and
    refuses (or is interrupted on) the items named."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[Any]]] = []
        self.refuse: set[str] = set()
        self.interrupt: set[str] = set()

    def replace(
        self,
        conn: psycopg.Connection,
        pairs: Sequence[tuple[KnowledgeItem, Sequence[KnowledgeChunk]]],
    ) -> None:
        ids = [item.id for item, _ in pairs]
        self.calls.append(("replace", [(item.id, item.title) for item, _ in pairs]))
        if self.interrupt & set(ids):
            raise Interrupted
        conn.execute("DELETE FROM postings WHERE item_id = ANY(%s)", (ids,))
        with conn.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO postings VALUES (%s, %s)",
                [(chunk.item_id, chunk.id) for _, chunks in pairs for chunk in chunks],
            )
        refused = sorted(self.refuse & set(ids))
        if refused:
            raise RuntimeError(f"index refused {refused[0]}")

    def remove(self, conn: psycopg.Connection, item_ids: Sequence[str]) -> None:
        self.calls.append(("remove", sorted(item_ids)))
        conn.execute("DELETE FROM postings WHERE item_id = ANY(%s)", (list(item_ids),))


def chunks_of(item_id: str, count: int, word: str = "part") -> list[KnowledgeChunk]:
    return [
        KnowledgeChunk(id=f"{item_id}-c{n}", chunk_index=n, content=f"{item_id} {word} {n}")
        for n in range(count)
    ]


def query(url: str, sql: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(sql).fetchall()


def postings(url: str) -> list[tuple[Any, ...]]:
    return query(url, "SELECT item_id, chunk_id FROM postings ORDER BY 1, 2")


@pytest.fixture
def writer() -> Recording:
    return Recording()


@pytest.fixture
def storage(postgres_url: str, writer: Recording) -> Iterator[PostgresStorage]:
    with connect(postgres_url) as conn:
        migrate(conn, "postings", POSTINGS)
    with PostgresStorage(postgres_url, index_writers=[writer]) as opened:
        yield opened


@contextmanager
def traced(storage: PostgresStorage) -> Iterator[list[int]]:
    """The round trips of the storage's connection inside the block (libpq's trace of the
    messages it sends: its syncs and its simple queries), in the list yielded."""
    counted: list[int] = []
    raw = storage._db.conn.raw  # type: ignore[union-attr]
    with tempfile.TemporaryFile() as trace:
        raw.pgconn.trace(trace.fileno())
        try:
            yield counted
        finally:
            raw.pgconn.untrace()
        trace.seek(0)
        sent = trace.read().decode("utf-8", "replace")
    counted.append(len(re.findall(r"\tF\t\d+\t(?:Sync|Query)\b", sent)))


def test_a_group_runs_each_writer_once_per_batch_and_item_writes_wait_for_nothing(
    storage: PostgresStorage, writer: Recording, postgres_url: str
) -> None:
    items = [KnowledgeItem(id=f"i{n:03d}", title=f"t{n}") for n in range(120)]
    with traced(storage) as round_trips, storage.write_group("test"):
        for item in items:
            storage.save_item_with_chunks(item, chunks_of(item.id, 2))
    assert writer.calls == [("replace", [(item.id, item.title) for item in items])]
    # The batch's few: its writer's statements and the commit, none per write.
    assert round_trips[0] <= 10
    assert len(postings(postgres_url)) == 2 * len(items)


def test_a_write_that_reads_waits_for_its_answers_once(
    storage: PostgresStorage, writer: Recording
) -> None:
    for n in range(50):
        storage.save_item_with_chunks(KnowledgeItem(id=f"i{n:02d}"), chunks_of(f"i{n:02d}", 1))
    writer.calls.clear()
    with traced(storage) as round_trips, storage.write_group("test"):
        for n in range(50):
            storage.save_chunks(f"i{n:02d}", chunks_of(f"i{n:02d}", 2, "new"))
    assert [len(pairs) for _, pairs in writer.calls] == [50]
    # Its read of the item, then the rest of the write: two each.
    assert round_trips[0] <= 2 * 50 + 10


def test_a_full_batch_is_indexed_before_the_group_ends(
    storage: PostgresStorage, writer: Recording, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(batches, "BATCH_ITEMS", 4)
    with storage.write_group("test"):
        for n in range(10):
            storage.save_item_with_chunks(KnowledgeItem(id=f"i{n}"), chunks_of(f"i{n}", 1))
    assert [len(pairs) for _, pairs in writer.calls] == [4, 4, 2]


def test_a_failed_index_write_rolls_back_that_write_alone_when_the_group_ends(
    storage: PostgresStorage, writer: Recording, postgres_url: str
) -> None:
    storage.save_item_with_chunks(KnowledgeItem(id="a", title="old"), chunks_of("a", 1))
    storage.save_item_with_chunks(KnowledgeItem(id="x", title="doomed"), chunks_of("x", 2))
    writer.refuse = {"a"}
    with (
        pytest.raises(
            WriteGroupError, match=r"1 write failed and rolled back: item 'a': index refused a"
        ) as info,
        storage.write_group("test"),
    ):
        storage.save_item_with_chunks(KnowledgeItem(id="b"), chunks_of("b", 1))
        storage.save_item_with_chunks(KnowledgeItem(id="a", title="new"), chunks_of("a", 3))
        assert storage.delete_item("x")
        storage.save_item_with_chunks(KnowledgeItem(id="c"), chunks_of("c", 2))
    assert [(ids, str(error)) for ids, error in info.value.failures] == [(["a"], "index refused a")]
    old = storage.get_item("a")  # as it was before the group, rows and index alike
    assert old is not None and old.title == "old"
    assert [chunk.id for chunk in storage.get_chunks_for_item("a")] == ["a-c0"]
    assert storage.get_item("x") is None
    assert {item.id for item in storage.list_items()} == {"a", "b", "c"}
    assert postings(postgres_url) == [("a", "a-c0"), ("b", "b-c0"), ("c", "c-c0"), ("c", "c-c1")]


def test_a_failed_statement_of_an_item_write_rolls_back_that_write_alone(
    storage: PostgresStorage, writer: Recording, postgres_url: str
) -> None:
    storage.save_item_with_chunks(KnowledgeItem(id="a", title="old"), chunks_of("a", 1))
    storage.save_item_with_chunks(KnowledgeItem(id="other"), chunks_of("other", 1))
    taken = KnowledgeChunk(id="other-c0", chunk_index=1, content="a chunk id already taken")
    with (
        pytest.raises(WriteGroupError, match=r"'a'.*knowledge_chunks_pkey") as info,
        storage.write_group("test"),
    ):
        storage.save_item_with_chunks(KnowledgeItem(id="b"), chunks_of("b", 1))
        storage.save_item_with_chunks(
            KnowledgeItem(id="a", title="new"), [*chunks_of("a", 1), taken]
        )
        storage.save_item_with_chunks(KnowledgeItem(id="c"), chunks_of("c", 1))
        # A read sees the group's writes, the failed one rolled back already.
        assert {item.id for item in storage.list_items()} == {"a", "b", "c", "other"}
        assert storage.get_item("a").title == "old"  # type: ignore[union-attr]
        storage.save_item_with_chunks(KnowledgeItem(id="d"), chunks_of("d", 1))
    assert [ids for ids, _ in info.value.failures] == [["a"]]
    assert isinstance(info.value.failures[0][1], StorageError)
    assert [chunk.id for chunk in storage.get_chunks_for_item("a")] == ["a-c0"]
    assert {item.id for item in storage.list_items()} == {"a", "b", "c", "d", "other"}
    assert postings(postgres_url) == [
        ("a", "a-c0"), ("b", "b-c0"), ("c", "c-c0"), ("d", "d-c0"), ("other", "other-c0")
    ]  # fmt: skip


def test_an_item_write_that_raises_midway_leaves_none_of_its_rows(
    storage: PostgresStorage, writer: Recording, postgres_url: str
) -> None:
    storage.save_item_with_chunks(KnowledgeItem(id="b", title="old"), chunks_of("b", 1))
    unwritable = KnowledgeChunk(id="b-c0", chunk_index=0, content="x", metadata={"x": object()})
    with storage.write_group("test"):
        storage.save_item_with_chunks(KnowledgeItem(id="a"), chunks_of("a", 1))
        with pytest.raises(TypeError):  # after the item's row went out
            storage.save_item_with_chunks(KnowledgeItem(id="b", title="new"), [unwritable])
        storage.save_item_with_chunks(KnowledgeItem(id="c"), chunks_of("c", 1))
    assert storage.get_item("b").title == "old"  # type: ignore[union-attr]
    assert [chunk.id for chunk in storage.get_chunks_for_item("b")] == ["b-c0"]
    assert postings(postgres_url) == [("a", "a-c0"), ("b", "b-c0"), ("c", "c-c0")]


def test_removing_an_item_pending_in_the_batch_drops_its_index_write(
    storage: PostgresStorage, writer: Recording, postgres_url: str
) -> None:
    with storage.write_group("test"):
        storage.save_item_with_chunks(KnowledgeItem(id="a"), chunks_of("a", 2))
        storage.save_item_with_chunks(KnowledgeItem(id="b"), chunks_of("b", 1))
        assert storage.delete_item("a")
    assert writer.calls == [("remove", ["a"]), ("replace", [("b", "")])]
    assert storage.get_item("a") is None
    assert postings(postgres_url) == [("b", "b-c0")]


def test_an_item_written_twice_is_indexed_once_as_its_last_version_in_its_last_place(
    storage: PostgresStorage, writer: Recording, postgres_url: str
) -> None:
    with storage.write_group("test"):
        storage.save_item_with_chunks(KnowledgeItem(id="a", title="first"), chunks_of("a", 3))
        storage.save_item_with_chunks(KnowledgeItem(id="b", title="b"), chunks_of("b", 1))
        storage.save_item_with_chunks(KnowledgeItem(id="a", title="last"), chunks_of("a", 1))
    assert writer.calls == [("replace", [("b", "b"), ("a", "last")])]
    assert postings(postgres_url) == [("a", "a-c0"), ("b", "b-c0")]


def test_a_failing_statement_still_raises_at_its_write_and_keeps_the_batch(
    storage: PostgresStorage, writer: Recording, postgres_url: str
) -> None:
    bad = chunks_of("a", 2)
    bad[1].chunk_index = 0
    with storage.write_group("test"):
        storage.save_item_with_chunks(KnowledgeItem(id="a"), chunks_of("a", 1))
        with pytest.raises(StorageError, match="save_chunks"):
            storage.save_chunks("a", bad)
        storage.save_item_with_chunks(KnowledgeItem(id="b"), chunks_of("b", 1))
    assert writer.calls == [("replace", [("a", ""), ("b", "")])]
    assert postings(postgres_url) == [("a", "a-c0"), ("b", "b-c0")]


def test_an_exception_leaving_the_group_commits_the_writes_before_it_indexed(
    storage: PostgresStorage, postgres_url: str
) -> None:
    with pytest.raises(RuntimeError, match="the caller's"), storage.write_group("test"):
        storage.save_item_with_chunks(KnowledgeItem(id="a"), chunks_of("a", 1))
        storage.save_item_with_chunks(KnowledgeItem(id="b"), chunks_of("b", 2))
        raise RuntimeError("the caller's own failure")
    assert {item.id for item in storage.list_items()} == {"a", "b"}
    assert postings(postgres_url) == [("a", "a-c0"), ("b", "b-c0"), ("b", "b-c1")]


def test_an_interrupted_batch_is_rolled_back_and_the_batches_before_it_commit(
    storage: PostgresStorage,
    writer: Recording,
    postgres_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(batches, "BATCH_ITEMS", 2)
    writer.interrupt = {"c"}
    with pytest.raises(Interrupted), storage.write_group("test"):
        for item_id in "abcd":
            storage.save_item_with_chunks(KnowledgeItem(id=item_id), chunks_of(item_id, 1))
    assert {item.id for item in storage.list_items()} == {"a", "b"}
    assert postings(postgres_url) == [("a", "a-c0"), ("b", "b-c0")]
    storage.save_item_with_chunks(KnowledgeItem(id="e"), chunks_of("e", 1))  # usable again
    assert storage.get_item("e") is not None


# -- the real writers ------------------------------------------------------------------------

TEXTS = [
    "the harbour ferry leaves from pier two every hour",
    "a cat sat on the mat watching birds in the garden",
    "reset a forgotten password from the settings page",
    "the tide turns twice a day at the harbour",
]


def corpus() -> list[tuple[KnowledgeItem, list[KnowledgeChunk]]]:
    pairs = []
    for n in range(12):
        item = KnowledgeItem(id=f"doc{n:02d}", title=TEXTS[n % 4].split()[1], kb=("a", "b")[n % 2])
        chunks = [
            KnowledgeChunk(
                id=f"doc{n:02d}-c{i}",
                chunk_index=i,
                content=f"{TEXTS[(n + i) % 4]} {TEXTS[(n * i) % 4]}",
                heading=f"part {i}",
            )
            for i in range(1 + n % 3)
        ]
        pairs.append((item, chunks))
    return pairs


def index_state(url: str) -> dict[str, list[tuple[Any, ...]]]:
    """The keyword tables, document numbers replaced by their rank (numbering differs)."""
    ranked = (
        "WITH d AS (SELECT kb, doc, level, key, "
        "rank() OVER (PARTITION BY level ORDER BY doc) AS r FROM kw_documents) "
    )
    return {
        "documents": query(
            url,
            ranked + "SELECT d.level, d.r, d.key, k.item_id, k.len, k.len_head, k.terms "
            "FROM d JOIN kw_documents k USING (kb, doc) ORDER BY 1, 2",
        ),
        "postings": query(
            url,
            ranked + "SELECT p.level, p.term, p.kb, d.r, p.tf, p.tf_head, p.w_vec, p.norm_len, "
            "p.norm_len_head FROM kw_posting_rows p JOIN d USING (kb, doc) ORDER BY 1, 2, 3, 4",
        ),
        "terms": query(url, "SELECT * FROM kw_terms ORDER BY level, term, kb"),
        "stats": query(url, "SELECT kb, level, docs, len, len_head FROM kw_stats ORDER BY 1, 2"),
    }


def test_a_group_indexes_exactly_as_writes_one_at_a_time(postgres_server: Any) -> None:
    pairs = corpus()
    states = []
    for grouped in (False, True):
        url = postgres_server.new_database()
        with connect(url) as conn:
            install(conn)
        with (
            PostgresStorage(url, index_writers=[PostingsWriter(TextAnalyzer())]) as storage,
            storage.write_group("test") if grouped else nullcontext(),
        ):
            for item, chunks in pairs:
                storage.save_item_with_chunks(item, chunks)
            rewritten = KnowledgeChunk(id="doc03-new", chunk_index=0, content=TEXTS[2])
            storage.save_item_with_chunks(pairs[3][0], [rewritten])
            storage.delete_item(pairs[7][0].id)
            storage.save_item(KnowledgeItem(id="doc00", title="renamed", kb="a"))
        states.append(index_state(url))
    assert states[1] == states[0]


class Poisoned(FakeEmbedder):
    """Fails on any text holding the word "poison"."""

    def embed(self, texts: Sequence[str], *, kind: str = "document") -> np.ndarray:
        if any("poison" in text for text in texts):
            raise EmbeddingError("fake://", "refused a text")
        return super().embed(texts, kind=kind)


def test_an_embedder_failure_on_one_text_rolls_back_only_its_write(postgres_url: str) -> None:
    with connect(postgres_url) as conn:
        install(conn)
    dense = PostgresDenseIndex(postgres_url, Poisoned())
    keyword = PostingsWriter(TextAnalyzer())
    try:
        with PostgresStorage(postgres_url, index_writers=[dense.writer, keyword]) as storage:
            with (
                pytest.raises(WriteGroupError, match=r"'bad'.*refused a text") as info,
                storage.write_group("test"),
            ):
                for item_id, text in [("ok1", "cat"), ("bad", "poison"), ("ok2", "mat")]:
                    chunk = KnowledgeChunk(id=f"{item_id}-c0", chunk_index=0, content=text)
                    storage.save_item_with_chunks(KnowledgeItem(id=item_id), [chunk])
            assert isinstance(info.value.failures[0][1], EmbeddingError)
            assert {item.id for item in storage.list_items()} == {"ok1", "ok2"}
        assert dense.indexed_item_ids() == {"ok1", "ok2"}
        assert query(postgres_url, "SELECT DISTINCT item_id FROM kw_documents ORDER BY 1") == [
            ("ok1",),
            ("ok2",),
        ]
    finally:
        dense.close()
