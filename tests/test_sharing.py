"""Several processes on one data folder: the write lock, readers that never write, repairs."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from files import bump_mtime

from knowledge_agent import KnowledgeAgentCore, KnowledgeChunk, KnowledgeItem
from knowledge_agent.backends.local.checksums import read_sealed_json
from knowledge_agent.backends.local.folder_lock import FolderLock
from knowledge_agent.backends.local.shared_indexes import SharedIndexes
from knowledge_agent.errors import DamagedIndexError, LockTimeoutError

# A child process: runs ``body`` with ``core`` open on DATA and prints one JSON line.
_CHILD = """
import json, sys, time
from knowledge_agent import KnowledgeAgentCore
DATA = sys.argv[1]
ARG = sys.argv[2] if len(sys.argv) > 2 else ""
{body}
"""


def child(body: str, data_dir: Path, arg: str = "") -> subprocess.Popen[str]:
    code = _CHILD.format(body=textwrap.dedent(body))
    return subprocess.Popen(
        [sys.executable, "-c", code, str(data_dir), arg],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def result(process: subprocess.Popen[str], timeout: float = 120) -> dict:
    out, err = process.communicate(timeout=timeout)
    assert process.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


def files_under(folder: Path) -> dict[str, tuple[int, int]]:
    return {
        str(path.relative_to(folder)): (path.stat().st_size, path.stat().st_mtime_ns)
        for path in folder.rglob("*")
        if path.is_file()
    }


def top(core: KnowledgeAgentCore, token: str, mode: str) -> str | None:
    """The title of the best hit for ``token`` (``tok12`` is analysed as tok + 12)."""
    results = core.search(token, limit=1, mode=mode)
    return results[0].item.title if results else None


@pytest.fixture
def base(tmp_path: Path) -> Path:
    data_dir = tmp_path / "kb"
    with KnowledgeAgentCore(data_dir) as core:
        for n in range(5):
            core.add_text(f"note tok{n} about shared folders", title=f"note {n}")
    return data_dir


def test_lock_is_exclusive_reentrant_and_waits(tmp_path: Path) -> None:
    first, second = FolderLock(tmp_path), FolderLock(tmp_path)
    assert first.try_acquire() and first.try_acquire()  # reentrant in one object
    assert not second.try_acquire()  # another open file: excluded, as another process is
    waits: list[str] = []
    with pytest.raises(LockTimeoutError, match=r"write\.lock"):
        second.acquire(timeout=0.2, on_wait=waits.append)
    assert len(waits) == 1 and f"process {os.getpid()}" in waits[0]
    first.release()
    assert not second.try_acquire()  # still held once
    first.release()
    threading.Timer(0.2, lambda: None).start()
    second.acquire(timeout=1)
    assert second.held
    second.release()
    with pytest.raises(RuntimeError):
        second.release()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX")
def test_a_forked_child_does_not_keep_its_parents_lock(tmp_path: Path) -> None:
    import multiprocessing

    lock = FolderLock(tmp_path)
    lock.acquire()
    child = multiprocessing.get_context("fork").Process(target=time.sleep, args=(30,))
    child.start()  # a collect's worker process, forked while the lock is held
    try:
        assert lock._fd is not None
        os.close(lock._fd)  # the parent dies without unlocking: its descriptor goes
        lock._fd, lock._depth = None, 0
        other = FolderLock(tmp_path)
        # The child holds no copy that keeps it locked (it closes its copy as it starts).
        deadline = time.monotonic() + 60  # a hang guard
        while not other.try_acquire():
            assert time.monotonic() < deadline, "the forked child keeps the lock"
            time.sleep(0.05)
        other.release()
    finally:
        child.terminate()
        child.join(10)


def test_a_second_writer_waits_for_the_first(base: Path) -> None:
    holder = FolderLock(base)
    holder.acquire()
    waits: list[str] = []
    events: list[str] = []

    def release() -> None:
        events.append("released")
        holder.release()

    released = threading.Timer(0.5, release)
    with KnowledgeAgentCore(base, on_lock_wait=waits.append) as core:
        released.start()
        core.add_text("written after waiting tokwait", title="waited")
        events.append("written")
        assert events == ["released", "written"]  # the write waited for the holder
        assert waits == [f"waiting for process {os.getpid()}, which is writing to {base}"]
        assert top(core, "tokwait", "hybrid") == "waited"
    released.join()


def test_lock_timeout_raises_and_loses_nothing(base: Path) -> None:
    holder = FolderLock(base)
    holder.acquire()
    try:
        with KnowledgeAgentCore(base, lock_timeout=0.2) as core:
            with pytest.raises(LockTimeoutError):
                core.add_text("never written", title="late")
            assert core.storage.count_items() == 5
            assert top(core, "tok3", "keyword") == "note 3"  # reading still works
    finally:
        holder.release()


def test_readers_never_write_while_a_writer_holds_the_lock(base: Path) -> None:
    holder = FolderLock(base)
    holder.acquire()
    try:
        before = files_under(base / "index")
        with KnowledgeAgentCore(base) as reader:
            # Pending journal entries make the reader want to catch up; the lock is busy.
            reader.storage.save_item(reader.storage.get_item(reader.list_items()[0].id))
            assert top(reader, "tok1", "hybrid") == "note 1"
            assert reader.status().pending_changes == 1
        assert files_under(base / "index") == before
    finally:
        holder.release()


def test_a_reader_replays_the_journal_when_the_lock_is_free(base: Path) -> None:
    with KnowledgeAgentCore(base) as core:
        item = core.list_items()[0]
        # Committed to SQLite and the journal, as a writer killed before its index commit.
        item.content = "rewritten text tokreplayed"
        core.storage.save_item_with_chunks(item, core.chunker.chunk(item.content))
    with KnowledgeAgentCore(base) as reader:
        assert reader.status().pending_changes == 0
        for mode in ("keyword", "semantic"):
            assert top(reader, "tokreplayed", mode) == item.title


def test_a_long_lived_reader_sees_other_processes_commits(base: Path) -> None:
    with KnowledgeAgentCore(base) as reader:
        assert top(reader, "toklater", "hybrid") != "later"
        writer = child(
            """
            with KnowledgeAgentCore(DATA) as core:
                item = core.add_text("added by another process toklater", title="later")
                core.delete_knowledge_item(core.list_items()[0].id)
            print(json.dumps({"id": item.id}))
            """,
            base,
        )
        result(writer)
        for mode in ("keyword", "semantic"):
            assert top(reader, "toklater", mode) == "later"
        titles = {r.item.title for r in reader.search("tok0 shared", limit=10)}
        assert titles == {"note 1", "note 2", "note 3", "note 4"}  # deleted there, gone here
        status = reader.status()
        assert status.consistent and status.items == status.keyword_items == 5


def test_two_writing_processes_lose_nothing(tmp_path: Path) -> None:
    data_dir = tmp_path / "kb"
    KnowledgeAgentCore(data_dir).close()
    body = """
        titles = []
        with KnowledgeAgentCore(DATA) as core:
            for n in range(25):
                title = f"{ARG}-{n}"
                core.add_text(f"text tok{ARG}x{n} from a writer", title=title)
                titles.append(title)
        print(json.dumps({"titles": titles}))
    """
    writers = [child(body, data_dir, name) for name in ("a", "b")]
    titles = [t for w in writers for t in result(w)["titles"]]
    with KnowledgeAgentCore(data_dir) as core:
        status = core.status()
        assert status.consistent, status.problems
        assert status.items == status.keyword_items == status.semantic_items == 50
        for title in titles[::7]:
            name, n = title.split("-")
            for mode in ("keyword", "semantic"):
                assert top(core, f"tok{name}x{n}", mode) == title


def test_readers_during_a_write_never_fail(base: Path) -> None:
    # Readers search from before the writer starts until after it ends (files say when);
    # the writer logs each delete once its batch is committed, indexes included, so an
    # item a reader saw in that log before a search began must not be one of its hits.
    reader_body = """
        import random
        from pathlib import Path
        work = Path(DATA).parent
        done, deleted = work / "writer-done", work / "deleted.txt"
        failures, stale, missing, reads, finished = [], [], [], 0, False
        keep = KnowledgeAgentCore(DATA) if ARG == "keep" else None
        guard = time.monotonic() + 120  # a hang guard
        while not finished and time.monotonic() < guard:
            finished = done.exists()  # so one round of reads follows the writer's end
            try:
                core = keep or KnowledgeAgentCore(DATA)
                gone = set(deleted.read_text().split()) if deleted.exists() else set()
                for result in core.search(f"tok{random.randrange(40)} shared", limit=3):
                    stale.extend([result.item.id] if result.item.id in gone else [])
                    if core.get_item(result.item.id) is None:
                        missing.append(result.item.id)
                if keep is None:
                    core.close()
                reads += 1
            except Exception as exc:
                failures.append(repr(exc))
            (work / f"reading-{ARG}").touch()
        print(json.dumps({"reads": reads, "failures": failures, "stale": stale,
                          "missing": missing, "finished": finished}))
    """
    writer_body = """
        from pathlib import Path
        work = Path(DATA).parent
        deleted = []
        with KnowledgeAgentCore(DATA) as core, open(work / "deleted.txt", "a") as log:
            for n in range(5, 40):
                doomed = None
                with core.batch():
                    core.add_text(f"note tok{n} about shared folders", title=f"note {n}")
                    if n % 5 == 0:
                        doomed = core.list_items()[0].id
                        core.delete_knowledge_item(doomed)
                if doomed:
                    log.write(doomed + "\\n")  # committed, indexes included, by now
                    log.flush()
                    deleted.append(doomed)
        (work / "writer-done").touch()
        print(json.dumps({"deleted": deleted}))
    """
    modes = ("keep", "reopen")
    readers = [child(reader_body, base, mode) for mode in modes]
    guard = time.monotonic() + 60  # a hang guard
    while not all((base.parent / f"reading-{mode}").exists() for mode in modes):
        assert all(r.poll() is None for r in readers), [r.communicate() for r in readers]
        assert time.monotonic() < guard, "the readers never read"
        time.sleep(0.05)
    deleted = set(result(child(writer_body, base))["deleted"])
    assert len(deleted) == 7
    for reader in readers:
        outcome = result(reader)
        assert outcome["finished"], "the reader stopped before the writer did"
        assert outcome["failures"] == [] and outcome["reads"] > 0
        assert outcome["stale"] == []
        # A hit deleted while its search ran is a race of the check, not a stale hit.
        assert set(outcome["missing"]) <= deleted
    with KnowledgeAgentCore(base) as core:
        assert core.status().consistent


def test_opening_replays_an_item_an_index_lost(base: Path) -> None:
    with KnowledgeAgentCore(base) as core:
        lost = core.list_items()[2]
        core.semantic_searcher.update(deletes=[lost.id])  # as a writer overwritten by another
        assert core.semantic_searcher.item_count() == 4
    with KnowledgeAgentCore(base) as core:
        assert core.status().consistent
        assert top(core, "tok2", "semantic") == lost.title


def test_opening_replays_only_the_index_that_lost_an_item(
    base: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with KnowledgeAgentCore(base) as core:
        lost = core.list_items()[1]
        core.keyword_index.update([], [lost.id])  # the first index checked loses one item
    with caplog.at_level("WARNING"), KnowledgeAgentCore(base) as core:
        assert core.status().consistent
        assert top(core, "tok1", "keyword") == lost.title
    disagreeing = [r.getMessage() for r in caplog.records if "disagrees" in r.getMessage()]
    assert disagreeing == [
        "the keyword index disagrees with the database: 1 items to index, 0 to remove"
    ]


def test_an_unreadable_index_is_left_alone_by_readers_and_rebuilt_by_a_writer(
    base: Path,
) -> None:
    manifest = base / "index" / "tfidf" / "manifest.json"
    manifest.write_text("{ not json")
    holder = FolderLock(base)
    holder.acquire()
    try:
        with KnowledgeAgentCore(base) as reader:
            assert manifest.read_text() == "{ not json"  # a reader deletes nothing
            assert top(reader, "tok4", "keyword") == "note 4"  # needs only the keyword index
            for mode in ("hybrid", "semantic"):  # never answered without the TF-IDF index
                with pytest.raises(DamagedIndexError, match="check --repair") as failed:
                    reader.search("tok4", mode=mode)
                assert "semantic index" in str(failed.value) and "\n" not in str(failed.value)
            assert manifest.read_text() == "{ not json"
    finally:
        holder.release()
    with KnowledgeAgentCore(base) as core:  # the lock is free: rebuilt on open
        assert read_sealed_json(manifest)["format"]
        assert top(core, "tok4", "semantic") == "note 4"
        assert core.status().consistent


def test_a_reader_rebuilds_an_index_it_finds_unreadable_once_the_lock_is_free(
    base: Path, caplog: pytest.LogCaptureFixture
) -> None:
    manifest = base / "index" / "tfidf" / "manifest.json"
    manifest.write_text("{ not json")
    holder = FolderLock(base)
    holder.acquire()
    try:
        reader = KnowledgeAgentCore(base)  # opened while another process writes
    finally:
        holder.release()
    with reader, caplog.at_level(logging.WARNING):
        assert top(reader, "tok3", "semantic") == "note 3"  # rebuilt first, then answered
        assert any("rebuilding the tfidf index" in r.getMessage() for r in caplog.records)
        assert reader.check().consistent


def test_searches_answer_while_a_write_in_the_same_process_waits(base: Path) -> None:
    holder = FolderLock(base)  # another process writing
    holder.acquire()
    waiting = threading.Event()
    with KnowledgeAgentCore(base, on_lock_wait=lambda _: waiting.set()) as core:
        writer = threading.Thread(target=core.add_text, args=("queued tokqueued",))
        writer.start()
        try:
            assert waiting.wait(10)
            assert top(core, "tok2", "hybrid") == "note 2"  # not blocked by the waiting add
            assert writer.is_alive()
        finally:
            holder.release()
            writer.join(10)
        assert not writer.is_alive()
        assert top(core, "tokqueued", "keyword") is not None


def test_the_cli_says_once_that_it_waits_then_finishes(base: Path, tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n\nwaited for the lock tokcli\n", encoding="utf-8")
    holder = FolderLock(base)
    holder.acquire()
    try:
        add = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "knowledge_agent.cli",
                "--data-dir",
                str(base),
                "add",
                str(docs),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert add.stderr is not None
        said = add.stderr.readline()  # blocks until the command says it waits (hang guard: 60 s)
        assert "waiting for process" in said and "which is writing to" in said
        assert add.poll() is None  # still waiting, not aborted
    finally:
        holder.release()
    _, err = add.communicate(timeout=60)
    assert add.returncode == 0, err
    assert "waiting for process" not in err  # said once
    with KnowledgeAgentCore(base) as core:
        assert top(core, "tokcli", "keyword") == "A"


def test_opening_a_sound_base_writes_nothing(base: Path) -> None:
    (base / "write.lock").unlink()
    before = files_under(base / "index")
    with KnowledgeAgentCore(base) as core:
        assert top(core, "tok1", "hybrid") == "note 1"
        assert core.status().consistent
    assert files_under(base / "index") == before
    assert not (base / "write.lock").exists()  # the lock was never even wanted


def test_a_rebuild_cut_short_is_done_again_on_open(base: Path) -> None:
    with KnowledgeAgentCore(base) as core:
        core.keyword_index.rebuild_commit_every = 2  # commits part-way, as a big rebuild does
        pairs = core.engine._stored_pairs

        def dying() -> Iterator[tuple[KnowledgeItem, list[KnowledgeChunk]]]:
            for n, pair in enumerate(pairs()):
                if n == 3:
                    raise KeyboardInterrupt  # the process dies here
                yield pair

        core.engine._stored_pairs = dying  # type: ignore[method-assign]
        with pytest.raises(KeyboardInterrupt):
            core.rebuild_index()
        assert core.keyword_index.chunk_count() < 5  # left half rebuilt
    with KnowledgeAgentCore(base) as core:
        assert core.status().consistent
        assert top(core, "tok4", "keyword") == "note 4"


def test_opening_replays_chunks_one_index_lost(base: Path) -> None:
    with KnowledgeAgentCore(base) as core:
        lost = core.list_items()[3]
        writer = core.keyword_index._writer(core.keyword_index._chunks)
        writer.delete_by_term("item_id", lost.id)  # its chunks only, not its item document
        writer.commit()
        assert core.keyword_index.chunk_count() == 4 and core.keyword_index.item_count() == 5
    with KnowledgeAgentCore(base) as core:
        assert core.status().consistent
        assert top(core, "tok3", "keyword") == lost.title


def test_a_reader_rebuilds_a_generation_it_cannot_load_saying_why(
    base: Path, caplog: pytest.LogCaptureFixture
) -> None:
    manifest = base / "index" / "tfidf" / "manifest.json"
    with KnowledgeAgentCore(base) as reader:
        assert top(reader, "tok1", "semantic") == "note 1"
        manifest.write_text("{ not json")  # as a new generation another process spoiled
        bump_mtime(manifest)
        with caplog.at_level(logging.WARNING):
            # Needs only the keyword index, yet the lock is free: the reader rebuilds.
            assert top(reader, "tok2", "keyword") == "note 2"
        said = [r.getMessage() for r in caplog.records]
        rebuilt = [m for m in said if m.startswith("rebuilding the tfidf index")]
        assert len(rebuilt) == 1 and str(manifest) in rebuilt[0], rebuilt  # names the reason
        assert read_sealed_json(manifest)["format"]
        assert top(reader, "tok3", "semantic") == "note 3"
        assert reader.check().consistent


def test_the_keyword_index_analyses_as_configured_across_opens(tmp_path: Path) -> None:
    data_dir = tmp_path / "kb"
    unstemmed = {"stem": False}
    for opening in range(2):
        with KnowledgeAgentCore(data_dir, analyzer_config=unstemmed) as core:
            if opening == 0:
                core.add_text("a note on running shoes", title="shoes")
            assert top(core, "running", "keyword") == "shoes"
            assert top(core, "run", "keyword") is None  # stemmed, "running" would be "run"


def test_repairing_indexes_in_memory_replays_only_what_an_index_lost(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Opening records what the indexes were analysed with, so a later catching up
    (``repair``, naming nothing) finds them current and rebuilds nothing."""
    with KnowledgeAgentCore() as core:
        for n in range(3):
            core.add_text(f"note tok{n} kept in memory", title=f"note {n}")
        assert top(core, "tok1", "semantic") == "note 1"
        lost = core.list_items()[1]
        core.semantic_searcher.update(deletes=[lost.id])
        backend = core._backend
        assert isinstance(backend, SharedIndexes)
        with caplog.at_level(logging.INFO):
            backend.repair(())
        said = [r.getMessage() for r in caplog.records]
        assert "building the search indexes from the database" not in said
        disagreeing = "the semantic index disagrees with the database"
        assert f"{disagreeing}: 1 items to index, 0 to remove" in said
        assert core.status().consistent
        assert top(core, "tok1", "semantic") == lost.title
