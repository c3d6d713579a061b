"""Read-your-writes, proved by the order of events rather than by timing.

Writes are indexed behind: a write commits to SQLite and its journal, and the indexes apply
the journal later. So a search must first index its own process's pending writes — waiting
for the data folder's write lock if another writer holds it — or it would answer without
them. A search that never waits would pass a test where the lock is free (the reader's own
catching up replays the journal then); these tests hold the lock with another core and
watch which comes first: the search saying it waits, or the search answering.
"""

from __future__ import annotations

import queue
import threading
from pathlib import Path

from knowledge_agent import KnowledgeAgentCore

HANG_GUARD_S = 60.0  # only ever reached when something hangs; no assertion is about time


def test_a_search_indexes_its_own_writes_even_while_another_core_writes(tmp_path: Path) -> None:
    data = tmp_path / "kb"
    events: queue.Queue[tuple[str, object]] = queue.Queue()

    def search() -> None:
        events.put(("answered", [hit.item.id for hit in core.search("tokqueued")]))

    with (
        KnowledgeAgentCore(
            data, on_lock_wait=lambda message: events.put(("waits", message))
        ) as core,
        KnowledgeAgentCore(data) as other,
    ):
        item = core.add_text("a note queued behind another writer: tokqueued")
        with other.batch():  # the other core holds the data folder's write lock
            searching = threading.Thread(target=search, daemon=True)
            searching.start()
            first = events.get(timeout=HANG_GUARD_S)
            assert first[0] == "waits", f"the search answered before its own write: {first}"
        # The other writer is done: the search takes the lock, indexes its write, answers.
        second = events.get(timeout=HANG_GUARD_S)
        searching.join(HANG_GUARD_S)
    assert second == ("answered", [item.id])
    assert events.empty()


def test_a_search_with_nothing_of_its_own_pending_answers_without_waiting(
    tmp_path: Path,
) -> None:
    """The other side of the rule: a search waits only for its own writes."""
    data = tmp_path / "kb"
    waits: list[str] = []
    with KnowledgeAgentCore(data, on_lock_wait=waits.append) as core:
        item = core.add_text("indexed before the other writer came: tokbefore")
        assert [hit.item.id for hit in core.search("tokbefore")] == [item.id]
        with KnowledgeAgentCore(data) as other, other.batch():
            assert [hit.item.id for hit in core.search("tokbefore")] == [item.id]
    assert waits == []


def test_another_core_sees_every_write_the_first_has_not_indexed(tmp_path: Path) -> None:
    """A core reading the same folder replays the journal itself when it is behind and the
    lock is free: it sees adds, replacements and deletes the writer has only committed to
    SQLite (the writer never searched, so its indexes never applied them)."""
    data = tmp_path / "kb"
    words = ["tokalpha", "tokbravo", "tokcharlie"]
    with KnowledgeAgentCore(data) as writer, KnowledgeAgentCore(data) as reader:
        ids = [writer.add_text(f"a note about {word}", title=word).id for word in words]
        for word, item_id in zip(words, ids, strict=True):
            assert [hit.item.id for hit in reader.search(word)] == [item_id]
        writer.add_text("a note about tokdelta", title="replaced", item_id=ids[1])
        assert writer.delete_knowledge_item(ids[0])
        assert reader.search("tokalpha") == []
        assert reader.search("tokbravo") == []
        assert [hit.item.id for hit in reader.search("tokdelta")] == [ids[1]]
        assert [hit.item.id for hit in reader.search("tokcharlie")] == [ids[2]]
