"""Files extracted together are written together: one transaction per group, one statement
per table; when that write fails, each file is written alone, so every file that can be is
stored and the run ends as it did when files were written one by one."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from files import write

from knowledge_agent.chunking import ChunkConfig
from knowledge_agent.errors import StorageError
from knowledge_agent.ingest.collector import Collector
from knowledge_agent.ingest.walker import WalkOptions
from knowledge_agent.storage import SQLiteStorageManager
from knowledge_agent.storage.sources import SourceRoot, SourceStore


def _folder(root: Path, files: int) -> Path:
    for number in range(files):
        write(root / f"page{number:03d}.md", f"# Page {number}\n\nquokka number {number} here.\n")
    return root


def _collector(storage: SQLiteStorageManager, root: Path) -> Collector:
    storage.sources.ensure_kb("default")
    storage.sources.save_root(SourceRoot("default", str(root)))
    return Collector(storage, ChunkConfig(), workers=1)


def _rows(db: Path) -> dict[str, list[tuple[object, ...]]]:
    """What a collect wrote, without the ids and times that differ between runs."""
    with sqlite3.connect(db) as conn:
        return {
            "items": conn.execute(
                "SELECT title, content, source_uri, doc_type FROM knowledge_items ORDER BY title"
            ).fetchall(),
            "chunks": conn.execute(
                "SELECT i.title, c.chunk_index, c.content FROM knowledge_chunks c "
                "JOIN knowledge_items i ON i.id = c.item_id ORDER BY i.title, c.chunk_index"
            ).fetchall(),
            "journal": conn.execute(
                "SELECT i.title, j.op FROM index_journal j "
                "JOIN knowledge_items i ON i.id = j.item_id ORDER BY j.seq"
            ).fetchall(),
            "sources": conn.execute(
                "SELECT s.path, s.status, s.size, i.title FROM sources s "
                "LEFT JOIN knowledge_items i ON i.id = s.item_id ORDER BY s.path"
            ).fetchall(),
        }


def test_a_group_is_written_in_one_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _folder(tmp_path / "docs", 12)
    calls: list[int] = []
    one_by_one: list[str] = []
    group_write = SourceStore.save_source_items
    single_write = SourceStore.save_source_item

    def counted(self: SourceStore, entries: list) -> None:  # type: ignore[type-arg]
        calls.append(len(entries))
        group_write(self, entries)

    def single(self: SourceStore, record, item, chunks) -> None:  # type: ignore[no-untyped-def]
        one_by_one.append(record.path)
        single_write(self, record, item, chunks)

    monkeypatch.setattr(SourceStore, "save_source_items", counted)
    monkeypatch.setattr(SourceStore, "save_source_item", single)
    with SQLiteStorageManager(tmp_path / "kb.db") as storage:
        report = _collector(storage, root).collect("default", str(root), WalkOptions())
        assert report.processed == 12 == storage.count_items() == len(report.item_ids)
    assert sum(calls) == 12 and len(calls) < 12
    assert one_by_one == []


def test_a_failed_group_write_falls_back_to_one_file_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rows are those a group write gives, and the counts alike."""
    root = _folder(tmp_path / "docs", 12)
    with SQLiteStorageManager(tmp_path / "grouped.db") as storage:
        grouped = _collector(storage, root).collect("default", str(root), WalkOptions())

    def refuse(self: SourceStore, entries: list) -> None:  # type: ignore[type-arg]
        raise StorageError("save_source_items failed: simulated")

    monkeypatch.setattr(SourceStore, "save_source_items", refuse)
    with SQLiteStorageManager(tmp_path / "single.db") as storage:
        single = _collector(storage, root).collect("default", str(root), WalkOptions())
        assert single.processed == 12 == storage.count_items()
    assert (single.processed, single.chunks_added, single.bytes_processed) == (
        grouped.processed,
        grouped.chunks_added,
        grouped.bytes_processed,
    )
    assert _rows(tmp_path / "single.db") == _rows(tmp_path / "grouped.db")


def test_a_file_whose_own_write_fails_stops_the_run_after_the_files_before_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As when each file was written alone: the files before it are stored and counted."""
    root = _folder(tmp_path / "docs", 12)
    single_write = SourceStore.save_source_item

    def refuse(self: SourceStore, entries: list) -> None:  # type: ignore[type-arg]
        raise StorageError("save_source_items failed: simulated")

    def single(self: SourceStore, record, item, chunks) -> None:  # type: ignore[no-untyped-def]
        if record.path.endswith("page005.md"):
            raise StorageError("save_source_item failed: simulated")
        single_write(self, record, item, chunks)

    monkeypatch.setattr(SourceStore, "save_source_items", refuse)
    monkeypatch.setattr(SourceStore, "save_source_item", single)
    with SQLiteStorageManager(tmp_path / "kb.db") as storage:
        events = []
        collector = _collector(storage, root)
        with pytest.raises(StorageError, match="simulated"):
            collector.collect("default", str(root), WalkOptions(), progress=events.append)
        titles = {item.title for item in storage.list_items(limit=100)}
    # Walk order: page000 … page004 were written before page005, and reported done.
    assert titles == {f"Page {n}" for n in range(5)}
    assert [Path(e.path).name for e in events] == [f"page{n:03d}.md" for n in range(5)]
