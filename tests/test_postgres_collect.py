"""A collection into a PostgreSQL database whose write group finds a file's write failed
only when the group ends (``WriteGroupError``): the file is reported failed, the others are
stored, and the next run retries it."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import psycopg
import pytest
from files import write

from knowledge_agent.backends.postgres.storage import PostgresStorage
from knowledge_agent.chunking import ChunkConfig
from knowledge_agent.ingest import CollectProgress, FileIssue, WalkOptions
from knowledge_agent.ingest.collector import Collector
from knowledge_agent.models import KnowledgeChunk, KnowledgeItem
from knowledge_agent.storage.sources import SourceRoot


class Refusing:
    """An index writer that refuses items whose text holds ``poison``."""

    def replace(
        self,
        conn: psycopg.Connection,
        pairs: Sequence[tuple[KnowledgeItem, Sequence[KnowledgeChunk]]],
    ) -> None:
        if any("poison" in item.content for item, _ in pairs):
            raise RuntimeError("the index refused a poisoned text")

    def remove(self, conn: psycopg.Connection, item_ids: Sequence[str]) -> None:
        pass


@pytest.fixture
def storage(postgres_url: str) -> Iterator[PostgresStorage]:
    with PostgresStorage(postgres_url, index_writers=[Refusing()]) as opened:
        yield opened


def test_a_write_the_group_rolled_back_is_a_failed_file_and_is_retried(
    storage: PostgresStorage, tmp_path: Path
) -> None:
    root = tmp_path / "docs"
    for name in ("a", "b", "c"):
        write(root / f"{name}.md", f"# {name}\n\nThe {name} page about lighthouses.\n")
    storage.sources.ensure_kb("docs")
    storage.sources.save_root(SourceRoot("docs", str(root)))
    collector = Collector(storage, ChunkConfig(), workers=1)
    first = collector.collect("docs", str(root), WalkOptions())
    items = {item.source_uri: item.id for item in storage.list_items()}
    assert first.processed == 3

    write(root / "b.md", "# b\n\nA poison page now.\n")
    write(root / "d.md", "# d\n\nA new poison page.\n")
    write(root / "e.md", "# e\n\nA new page about ferries.\n")
    events: list[CollectProgress] = []
    report = collector.collect("docs", str(root), WalkOptions(), progress=events.append)
    bad = [str(root / "b.md"), str(root / "d.md")]
    assert report.failed == [FileIssue(path, "the index refused a poisoned text") for path in bad]
    assert (report.processed, report.unchanged, report.chunks_removed) == (1, 2, 0)
    assert report.chunks_added == storage.count_chunks(item_id=report.item_ids[0]) > 0
    assert report.bytes_processed == (root / "e.md").stat().st_size
    assert [storage.get_item(i).source_uri for i in report.item_ids] == [str(root / "e.md")]
    assert {event.path: event.status for event in events if event.path in bad} == {
        path: "failed" for path in bad
    }
    # b keeps what was indexed before; d has no item; both are recorded as failed.
    kept = storage.get_item(items[str(root / "b.md")])
    assert kept is not None and "lighthouses" in kept.content
    assert len(storage.list_items()) == 4
    rows = storage.sources.get_sources_by_path("docs", bad)
    assert {path: (row.status, row.item_id) for path, row in rows.items()} == {
        bad[0]: ("failed", items[bad[0]]),
        bad[1]: ("failed", None),
    }

    write(root / "b.md", "# b\n\nThe b page, cured.\n")
    write(root / "d.md", "# d\n\nThe d page, cured.\n")
    again = collector.collect("docs", str(root), WalkOptions())
    assert (again.processed, again.unchanged, again.failed) == (2, 3, [])
    assert "cured" in storage.get_item(items[bad[0]]).content  # type: ignore[union-attr]
