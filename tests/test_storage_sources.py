"""Knowledge bases, collected roots and tracked sources, on every backend (SQLite: schema
version 2)."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from knowledge_agent.models import KnowledgeChunk, KnowledgeItem
from knowledge_agent.protocols import Storage
from knowledge_agent.storage import SQLiteStorageManager
from knowledge_agent.storage.sources import SourceRecord, SourceRoot
from knowledge_agent.storage.sqlite_storage import _MIGRATIONS, SCHEMA_VERSION


def record(path: str, item_id: str | None, *, kb: str = "docs", root: str = "/r") -> SourceRecord:
    return SourceRecord(kb, path, root, size=10, mtime_ns=5, status="indexed", item_id=item_id)


def add_file(storage: Storage, path: str, *, kb: str = "docs") -> KnowledgeItem:
    item = KnowledgeItem(title=path, content=f"text of {path}", kb=kb)
    chunk = KnowledgeChunk(content=item.content, end_position=len(item.content))
    storage.sources.save_source_item(record(path, item.id, kb=kb), item, [chunk])
    return item


@pytest.fixture
def storage(backend_storage: Storage) -> Storage:
    """An empty storage of each backend in turn."""
    return backend_storage


@pytest.fixture
def tracked(storage: Storage) -> Storage:
    storage.sources.ensure_kb("docs", "Team docs")
    storage.sources.save_root(SourceRoot("docs", "/r", options={"include": ["*.md"]}))
    return storage


def test_version_1_database_is_migrated_and_its_kbs_backfilled(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    conn = sqlite3.connect(path)
    for statement in _MIGRATIONS[0]:
        conn.execute(statement)
    conn.execute(
        "INSERT INTO knowledge_items (id, kb, created_at, updated_at) "
        "VALUES ('a', 'legacy', '2024-01-01T00:00:00+00:00', '2024-01-01T00:00:00+00:00')"
    )
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()
    with SQLiteStorageManager(path) as storage:
        assert storage.doc_sources.get_doc_sources() == []  # the tables of later versions exist
        assert storage.sources.kb_names() == ["legacy"]
        info = storage.sources.kb_info("legacy")
        assert info is not None and info.items == 1 and info.sources == 0
        assert str(info.created_at.date()) == "2024-01-01"
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
    conn.close()


def test_saving_an_item_creates_its_kb(storage: Storage) -> None:
    storage.save_item(KnowledgeItem(kb="notes"))
    storage.save_item_with_chunks(KnowledgeItem(kb="more"), [])
    assert storage.sources.kb_names() == ["more", "notes"]


def test_ensure_kb_creates_once_and_updates_the_description(storage) -> None:
    assert storage.sources.ensure_kb("docs") is True
    assert storage.sources.ensure_kb("docs", "About docs") is False
    assert storage.sources.ensure_kb("docs") is False  # no description given: kept
    assert storage.sources.kb_info("docs").description == "About docs"
    assert storage.sources.kb_info("absent") is None


def test_source_item_written_together_and_counted(tracked: Storage) -> None:
    item = add_file(tracked, "/r/a.md")
    found = tracked.sources.get_source("docs", "/r/a.md")
    expected = record("/r/a.md", item.id)
    assert found is not None and replace(found, indexed_at=expected.indexed_at) == expected
    info = tracked.sources.kb_info("docs")
    assert (info.items, info.chunks, info.sources, info.roots) == (1, 1, 1, ["/r"])
    assert info.description == "Team docs"
    assert info.last_indexed_at is not None
    assert tracked.sources.get_roots("docs")[0].options == {"include": ["*.md"]}
    if isinstance(tracked, SQLiteStorageManager):  # the one backend with a journal
        assert [op for _, _, op in tracked.journal_since(0)] == ["upsert"]


def test_deleting_an_item_forgets_its_source(tracked: Storage) -> None:
    item = add_file(tracked, "/r/a.md")
    tracked.delete_item(item.id)
    assert tracked.sources.get_sources("docs") == {}


def test_delete_source_deletes_the_item_and_journals_it(tracked: Storage) -> None:
    item = add_file(tracked, "/r/a.md")
    assert tracked.sources.delete_source("docs", "/r/a.md") == item.id
    assert tracked.get_item(item.id) is None
    assert tracked.count_chunks() == 0
    if isinstance(tracked, SQLiteStorageManager):
        assert tracked.journal_since(0)[-1][1:] == (item.id, "delete")
    assert tracked.sources.delete_source("docs", "/r/a.md") is None


def test_skipped_source_has_no_item(tracked: Storage) -> None:
    tracked.sources.save_source(
        SourceRecord("docs", "/r/b.bin", "/r", 3, 1, "skipped", error="binary file")
    )
    found = tracked.sources.get_source("docs", "/r/b.bin")
    assert found is not None and (found.item_id, found.error) == (None, "binary file")
    with pytest.raises(Exception, match=r"(?i)check"):
        tracked.sources.save_source(SourceRecord("docs", "/r/c", "/r", 1, 1, "bogus"))


def test_delete_root_removes_its_sources_and_items(tracked: Storage) -> None:
    tracked.sources.save_root(SourceRoot("docs", "/other"))
    keep = add_file(tracked, "/other/x.md")
    tracked.sources.save_source(
        SourceRecord("docs", "/other/x.md", "/other", 1, 1, "indexed", keep.id)
    )
    gone = add_file(tracked, "/r/a.md")
    assert tracked.sources.delete_root("docs", "/r") == [gone.id]
    assert tracked.get_item(gone.id) is None and tracked.get_item(keep.id) is not None
    assert list(tracked.sources.get_sources("docs")) == ["/other/x.md"]
    assert [root.root for root in tracked.sources.get_roots()] == ["/other"]


def test_delete_kb_removes_everything_of_that_kb_only(tracked: Storage) -> None:
    first = add_file(tracked, "/r/a.md")
    tracked.sources.ensure_kb("other")
    tracked.sources.save_root(SourceRoot("other", "/r"))
    other = add_file(tracked, "/r/a.md", kb="other")
    assert tracked.sources.delete_kb("docs") == [first.id]
    assert tracked.sources.kb_names() == ["other"]
    assert tracked.get_item(other.id) is not None
    assert tracked.sources.get_sources("docs") == {} and tracked.sources.get_roots("docs") == []
    assert list(tracked.sources.get_sources("other")) == ["/r/a.md"]
    if isinstance(tracked, SQLiteStorageManager):
        assert (first.id, "delete") in [(i, op) for _, i, op in tracked.journal_since(0)]


def test_count_chunks_of_one_item(tracked: Storage) -> None:
    item = add_file(tracked, "/r/a.md")
    assert tracked.count_chunks(item_id=item.id) == 1
    assert tracked.count_chunks(item_id="absent") == 0


def test_sources_by_path_finds_the_tracked_ones_of_one_kb_under_any_root(
    tracked: Storage,
) -> None:
    tracked.sources.save_root(SourceRoot("docs", "/other"))
    tracked.sources.ensure_kb("else")
    tracked.sources.save_root(SourceRoot("else", "/r"))
    # More paths than one query binds, a path under another root, one of another kb, a
    # repeated path and a file name that is not UTF-8.
    odd = "/r/bad\udcff.md"
    for index in range(1200):
        tracked.sources.save_source(record(f"/r/{index}.md", None))
    tracked.sources.save_source(record(odd, None))
    tracked.sources.save_source(record("/other/x.md", None, root="/other"))
    tracked.sources.save_source(record("/r/elsewhere.md", None, kb="else"))
    asked = [*(f"/r/{index}.md" for index in range(0, 1300, 2)), "/r/0.md", odd]
    found = tracked.sources.get_sources_by_path(
        "docs", iter([*asked, "/other/x.md", "/r/elsewhere.md"])
    )
    expected = {*(f"/r/{index}.md" for index in range(0, 1200, 2)), odd, "/other/x.md"}
    assert set(found) == expected
    assert all(found[path].path == path and found[path].kb == "docs" for path in found)
    assert found["/other/x.md"].root == "/other"
    assert tracked.sources.get_sources_by_path("docs", []) == {}


def _file_entry(path: str, chunks: int) -> tuple[SourceRecord, KnowledgeItem, list[KnowledgeChunk]]:
    item = KnowledgeItem(title=path, content=f"text of {path}", kb="docs")
    parts = [KnowledgeChunk(content=f"part {n} of {path}", chunk_index=n) for n in range(chunks)]
    return record(path, item.id), item, parts


def test_several_files_saved_at_once_as_one_by_one(tracked: Storage) -> None:
    entries = [_file_entry(f"/r/many{n}.md", n) for n in range(4)]  # one without chunks
    seq = tracked.last_journal_seq()
    tracked.sources.save_source_items(entries)
    for source, item, chunks in entries:
        assert tracked.sources.get_source("docs", source.path) == source
        assert tracked.get_item(item.id) is not None
        stored = tracked.get_chunks_for_item(item.id)
        assert [c.content for c in stored] == [c.content for c in chunks]
        assert all(c.item_id == item.id for c in chunks)
    journal = [(item_id, op) for _, item_id, op in tracked.journal_since(seq)]
    if isinstance(tracked, SQLiteStorageManager):  # PostgreSQL indexes in the transaction
        assert journal == [(item.id, "upsert") for _, item, _ in entries]


def test_chunks_of_several_items_read_at_once_as_one_by_one(tracked: Storage) -> None:
    entries = [_file_entry(f"/r/read{n}.md", n) for n in range(4)]
    tracked.sources.save_source_items(entries)
    ids = [item.id for _, item, _ in entries] + ["absent"]
    together = tracked.get_chunks_for_items(ids)
    one_by_one = {i: tracked.get_chunks_for_item(i) for i in ids}
    assert together == {i: chunks for i, chunks in one_by_one.items() if chunks}
