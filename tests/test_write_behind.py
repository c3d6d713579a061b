"""Writes indexed behind: SQLite and the journal at once, the indexes at the next search,
once enough is pending, at a batch end or at close — never a search that misses its own
process's writes."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from files import another_writer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from knowledge_agent import KnowledgeAgentCore
from knowledge_agent.backends.local import shared_indexes
from knowledge_agent.backends.local.folder_lock import FolderLock

# Operations on a base of at most five texts: ("add", slot), ("replace", slot), ("delete", slot).
_OPS = st.lists(
    st.tuples(st.sampled_from(["add", "replace", "delete"]), st.integers(0, 4)), max_size=12
)
_MODES = ("keyword", "semantic", "hybrid")


def _token(slot: int, version: int) -> str:
    # Letters only: the analyzer splits digits from letters.
    return "tok" + "abcde"[slot] + "x" * version


def _run_and_check(core: KnowledgeAgentCore, ops: list[tuple[str, int]]) -> None:
    """Apply ``ops``; after each one, every search sees exactly the live texts."""
    live: dict[int, tuple[str, int]] = {}  # slot -> (item id, version)
    gone: set[str] = set()  # tokens of deleted or replaced versions
    for op, slot in ops:
        if op == "delete" and slot in live:
            item_id, version = live.pop(slot)
            assert core.delete_knowledge_item(item_id)
            gone.add(_token(slot, version))
        elif op in ("add", "replace"):
            item_id, version = live.get(slot, (None, -1))
            if version >= 0:
                gone.add(_token(slot, version))
            text = f"a note about {_token(slot, version + 1)} and shared words"
            item = core.add_text(text, title=f"slot {slot}", item_id=item_id)
            live[slot] = (item.id, version + 1)
        for slot_live, (item_id, version) in live.items():
            for mode in _MODES:
                hits = core.search(_token(slot_live, version), limit=5, mode=mode)
                assert [hit.item.id for hit in hits][:1] == [item_id], (slot_live, mode)
        for token in gone - {_token(s, v) for s, (_, v) in live.items()}:
            assert core.search(token, mode="keyword") == []
    status = core.status()
    assert status.consistent and status.items == len(live), status.problems


@settings(max_examples=40, deadline=None)
@given(ops=_OPS)
def test_a_search_sees_every_write_before_it_in_memory(ops: list[tuple[str, int]]) -> None:
    with KnowledgeAgentCore() as core:
        _run_and_check(core, ops)


@settings(
    max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=_OPS)
def test_a_search_sees_every_write_before_it_on_disk(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, int]]
) -> None:
    with KnowledgeAgentCore(tmp_path_factory.mktemp("kb")) as core:
        _run_and_check(core, ops)


def test_adds_are_indexed_at_the_next_search_not_before(tmp_path: Path) -> None:
    with KnowledgeAgentCore(tmp_path / "kb") as core:
        for n in range(3):
            core.add_text(f"deferred note number {n}")
        assert core.storage.count_items() == 3
        assert core.keyword_index.item_count() == core.semantic_searcher.item_count() == 0
        assert len(core.search("deferred note", limit=10)) == 3
        assert core.keyword_index.item_count() == core.semantic_searcher.item_count() == 3


def test_enough_pending_writes_are_indexed_without_a_search(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(shared_indexes, "FLUSH_ITEMS", 4)
    with KnowledgeAgentCore() as core:
        for n in range(6):
            core.add_text(f"note {n}")
        assert core.keyword_index.item_count() == 4  # the fourth add indexed all four
        assert core.status().items == core.keyword_index.item_count() == 6


def test_close_indexes_the_deferred_writes(tmp_path: Path) -> None:
    data = tmp_path / "kb"
    with KnowledgeAgentCore(data) as core:
        item = core.add_text("written just before close tokclose")
    with KnowledgeAgentCore(data) as core:
        # Read straight from the indexes: nothing replayed them since.
        assert core.keyword_index.item_count() == core.semantic_searcher.item_count() == 1
        assert core.storage.journal_since(core.keyword_index.applied_seq) == []
        assert [hit.item.id for hit in core.search("tokclose")] == [item.id]


def test_another_process_sees_the_writes_at_its_next_search(tmp_path: Path) -> None:
    data = tmp_path / "kb"
    with KnowledgeAgentCore(data) as writer, KnowledgeAgentCore(data) as reader:
        item = writer.add_text("visible elsewhere tokelsewhere")
        # The reader finds the indexes behind the journal and, the lock free, replays it.
        assert [hit.item.id for hit in reader.search("tokelsewhere")] == [item.id]
        assert [hit.item.id for hit in writer.search("tokelsewhere")] == [item.id]


def test_a_search_waits_for_another_writer_only_for_its_own_writes(tmp_path: Path) -> None:
    data = tmp_path / "kb"
    with KnowledgeAgentCore(data) as core:
        core.add_text("indexed before tokbefore")
        core.search("tokbefore")
    holder = FolderLock(data)  # another process writing
    waited = threading.Event()
    with KnowledgeAgentCore(data, on_lock_wait=lambda _: waited.set()) as core:
        holder.acquire()
        try:
            assert len(core.search("tokbefore")) == 1  # nothing of its own: no wait
            assert not waited.is_set()
            holder.release()
            item = core.add_text("queued behind tokqueued")
            holder.acquire()
            found: list[list[str]] = []
            search = threading.Thread(
                target=lambda: found.append([h.item.id for h in core.search("tokqueued")])
            )
            search.start()
            assert waited.wait(60)
            assert search.is_alive()  # it needs the lock to index its own add
        finally:
            holder.release()
        search.join(60)
        assert found == [[item.id]]


def test_deferred_writes_survive_a_crash(tmp_path: Path) -> None:
    data = tmp_path / "kb"
    code = (
        "import os, sys\n"
        "from knowledge_agent import KnowledgeAgentCore\n"
        "core = KnowledgeAgentCore(sys.argv[1])\n"
        "core.add_text('survives a crash tokcrash')\n"
        "os._exit(0)\n"
    )
    subprocess.run([sys.executable, "-c", code, str(data)], check=True, timeout=120)
    with KnowledgeAgentCore(data) as core:
        assert len(core.search("tokcrash")) == 1
        assert core.status().consistent


def test_a_collect_indexes_along_the_way(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from knowledge_agent.core import knowledge_agent_core
    from knowledge_agent.ingest import collector

    monkeypatch.setattr(knowledge_agent_core, "_INDEX_ALONG_BYTES", 200)
    monkeypatch.setattr(collector, "_GROUP_FILES", 1)  # a commit per file
    docs = tmp_path / "docs"
    docs.mkdir()
    for n in range(6):
        (docs / f"page{n}.md").write_text(f"# Page {n}\n\n" + "words to index here " * 10)
    with KnowledgeAgentCore(tmp_path / "kb", workers=1) as core:
        seen: list[tuple[str, int]] = []  # (status, items in the keyword index then)
        core.collect_knowledge(
            docs, progress=lambda e: seen.append((e.status, core.keyword_index.item_count()))
        )
        # Each file's event comes before the indexing it triggers.
        indexed_at_each_file = [count for status, count in seen if status == "processed"]
        assert indexed_at_each_file[0] == 0 and 0 < indexed_at_each_file[-1] < 6
        assert core.keyword_index.item_count() == 6
        assert core.status().consistent


def test_a_collect_indexes_sooner_at_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The first updates come after the first size, then after as many bytes again as were
    # indexed before, up to the full interval: the items indexed at each file's event.
    from knowledge_agent.core import knowledge_agent_core
    from knowledge_agent.ingest import collector

    monkeypatch.setattr(knowledge_agent_core, "_INDEX_ALONG_FIRST", 100)
    monkeypatch.setattr(knowledge_agent_core, "_INDEX_ALONG_BYTES", 400)
    monkeypatch.setattr(collector, "_GROUP_FILES", 1)  # a commit per file
    docs = tmp_path / "docs"
    docs.mkdir()
    for n in range(12):
        (docs / f"page{n:02}.md").write_text(f"# Page {n:02}\n\n" + "x" * 89)  # 100 bytes
    with KnowledgeAgentCore(tmp_path / "kb", workers=1) as core:
        counts: list[int] = []
        core.collect_knowledge(
            docs,
            progress=lambda e: (
                e.status == "processed" and counts.append(core.keyword_index.item_count())
            ),
        )
        # Updates after files 1, 2, 4, 8 and 12 (100, 100, 200, 400, 400 bytes apart).
        assert counts == [0, 1, 2, 2, 4, 4, 4, 4, 8, 8, 8, 8]
        assert core.keyword_index.item_count() == 12


def test_a_close_while_another_process_writes_leaves_its_writes_to_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = tmp_path / "kb"
    core = KnowledgeAgentCore(data)
    item = core.add_text("left to the other writer tokleft")
    with another_writer(data), caplog.at_level(logging.INFO):
        core.close()  # the lock is busy: nothing indexed, said why
    assert "1 changes are left to the writing process" in [r.getMessage() for r in caplog.records]
    with KnowledgeAgentCore(data) as reopened:  # the journal still holds the add
        assert [hit.item.id for hit in reopened.search("tokleft")] == [item.id]
