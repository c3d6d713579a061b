"""kill -9 at each named step of a write: the data folder reopens consistent, nothing
committed is lost, every stored item is found, and running the command again completes it.

Each crash happens at the same point on every machine: the child process (the real
``knowledge-agent`` command, or a short script over the API) runs with
``KNOWLEDGE_AGENT_FAULT`` naming the step (:mod:`knowledge_agent.faults`) and kills itself
there. ``benchmarks/stress.py`` (``kill_*``) keeps killing at random moments.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import string
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from knowledge_agent import KnowledgeAgentCore
from knowledge_agent.backends.local.checksums import read_json_file
from knowledge_agent.errors import ConfigError
from knowledge_agent.faults import FAULT_ENV, Faults
from knowledge_agent.storage import DATABASE_FILE, SQLiteStorageManager

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL and process groups")

GUARD_S = 600.0  # hang guard for one child process: a few seconds here, minutes on a loaded machine
FILES = 40


def token(n: int) -> str:
    """A unique word of letters only (digits would be split off by the analyzer)."""
    letters = string.ascii_lowercase
    return "tok" + "".join(letters[(n // 26**i) % 26] for i in range(3))


def note(n: int) -> str:
    body = "\n\n".join(f"Paragraph {p} of note {n} about crash safety." for p in range(6))
    return f"# Note {n}\n\nThe word {token(n)} marks this note.\n\n{body}\n"


def write_corpus(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for n in range(FILES):
        (folder / f"note{n:03d}.md").write_text(note(n), encoding="utf-8")
    return folder


def run(args: list[str], fault: str | None = None) -> tuple[int, str]:
    """Run a child in its own process group; (exit code, stderr). Whatever it leaves
    running (a collect's worker processes) is killed with the group."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop(FAULT_ENV, None)
    if fault is not None:
        env[FAULT_ENV] = fault
    process = subprocess.Popen(
        args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, start_new_session=True
    )
    try:
        _, err = process.communicate(timeout=GUARD_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{args[1:4]} with {fault} did not end within {GUARD_S:g} s")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    return process.returncode, err.decode()


def cli(data_dir: Path, *args: str, fault: str | None = None) -> tuple[int, str]:
    return run(
        [sys.executable, "-m", "knowledge_agent.cli", "--data-dir", str(data_dir), *args], fault
    )


def script(data_dir: Path, body: str, fault: str | None = None) -> tuple[int, str]:
    """Run ``body`` in a child with ``core`` open on ``data_dir``; ``committed(item)`` notes
    an item whose write returned (in ``committed.txt`` beside the data folder)."""
    prelude = f"""
        import logging, sys
        from knowledge_agent import KnowledgeAgentCore
        logging.basicConfig(level=logging.ERROR)
        log = open({str(data_dir.parent / "committed.txt")!r}, "a", encoding="utf-8")

        def committed(item):
            log.write(item.id + "\\n")
            log.flush()  # the process is killed, not the machine: the kernel keeps it

        core = KnowledgeAgentCore({str(data_dir)!r})
    """
    code = textwrap.dedent(prelude) + textwrap.dedent(body)
    return run([sys.executable, "-c", code], fault)


def committed_ids(data_dir: Path) -> list[str]:
    path = data_dir.parent / "committed.txt"
    return path.read_text(encoding="utf-8").split() if path.exists() else []


def assert_killed_at(outcome: tuple[int, str], fault: str) -> None:
    """The child died of SIGKILL, sent by itself at the step named."""
    code, err = outcome
    assert code == -signal.SIGKILL, f"exit {code}, not killed at {fault}: {err}"
    assert f"{FAULT_ENV}: killing process" in err and f" at {fault}" in err, err


def stored(data_dir: Path) -> dict[str, str]:
    """{item id: its token} as SQLite holds them, read without opening the indexes."""
    with SQLiteStorageManager(data_dir / DATABASE_FILE) as storage:
        return {
            item.id: item.content.split("The word ", 1)[1].split()[0]
            for item in storage.iter_items()
        }


def assert_consistent_and_findable(data_dir: Path) -> int:
    """Reopen: the indexes agree with SQLite, and every stored item is the one hit for its
    token in both indexes (neither missing nor indexed twice); returns the item count."""
    items = stored(data_dir)
    with KnowledgeAgentCore(data_dir) as core:
        status = core.status()
        assert status.consistent, status.problems
        assert status.items == status.keyword_items == status.semantic_items == len(items)
        assert status.chunks == status.keyword_chunks == status.semantic_chunks
        for item_id, word in items.items():
            for mode in ("keyword", "semantic"):
                hits = core.search(word, limit=5, mode=mode, level="item")
                assert [hit.item.id for hit in hits] == [item_id], (word, mode)
    return len(items)


def assert_reopens_without_rebuilding(data_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Opening replays what the indexes miss; none was left unreadable by the crash (which
    would have it rebuilt from SQLite, with a warning)."""
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="knowledge_agent"):
        KnowledgeAgentCore(data_dir).close()
    assert [record.getMessage() for record in caplog.records] == []


def add_notes(data_dir: Path, numbers: range) -> None:
    with KnowledgeAgentCore(data_dir) as core:
        for n in numbers:
            core.add_text(note(n), title=f"Note {n}")


def test_kill_after_a_group_commit_of_add_then_a_rerun_completes(tmp_path: Path) -> None:
    docs = write_corpus(tmp_path / "docs")
    data_dir = tmp_path / "kb"
    add_notes(data_dir, range(100, 103))
    assert_killed_at(cli(data_dir, "add", str(docs), fault="group-commit:1"), "group-commit:1")
    # The first group is in SQLite and its journal, and in no index: opening replays it.
    assert len(stored(data_dir)) > 3
    assert assert_consistent_and_findable(data_dir) == len(stored(data_dir))
    code, err = cli(data_dir, "add", str(docs))
    assert code == 0, err
    assert assert_consistent_and_findable(data_dir) == 3 + FILES


def test_a_killed_collect_leaves_no_worker_process_behind(tmp_path: Path) -> None:
    # More files than one group: the first group commits while the extraction pool still
    # has outcomes to hand over, so its worker processes are alive when the parent dies.
    docs = tmp_path / "docs"
    docs.mkdir()
    for n in range(600):
        (docs / f"page{n:03d}.md").write_text(f"# Page {n}\n\nwords of page {n}\n")
    pools = tmp_path / "pools.txt"
    body = f"""
        from knowledge_agent.ingest import collector
        made = collector.ProcessPoolExecutor

        def noted(*args, **kwargs):
            open({str(pools)!r}, "a").write("pool\\n")
            return made(*args, **kwargs)

        collector.ProcessPoolExecutor = noted
        core.close()
        core = KnowledgeAgentCore({str(tmp_path / "kb")!r}, workers=2)
        core.collect_knowledge({str(docs)!r})
    """
    err_path = tmp_path / "stderr.txt"
    env = {**os.environ, FAULT_ENV: "group-commit:1"}
    code = textwrap.dedent(
        f"""
        import sys
        from knowledge_agent import KnowledgeAgentCore
        core = KnowledgeAgentCore({str(tmp_path / "first")!r})
        """
    ) + textwrap.dedent(body)
    # Output to a file, not a pipe: an orphaned worker holding a pipe would hang the test.
    with err_path.open("wb") as err:
        child = subprocess.Popen(
            [sys.executable, "-c", code],
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=env,
            start_new_session=True,
        )
    try:
        assert child.wait(timeout=GUARD_S) == -signal.SIGKILL, err_path.read_text()
        assert pools.read_text() == "pool\n"  # the extraction ran in worker processes
        # The workers notice that their parent is gone and end: no process is left in the
        # child's session (a hang guard, not a bound: they end within seconds).
        for _ in range(600):  # a minute
            try:
                os.killpg(child.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            pytest.fail("worker processes of the killed collect are still running")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)


def test_kill_before_the_indexes_see_a_remove(tmp_path: Path) -> None:
    docs = write_corpus(tmp_path / "docs")
    data_dir = tmp_path / "kb"
    code, err = cli(data_dir, "add", str(docs))
    assert code == 0, err
    assert_killed_at(cli(data_dir, "remove", str(docs), fault="before-index"), "before-index:1")
    assert stored(data_dir) == {}  # the delete is committed; the indexes on disk still hold all
    assert assert_consistent_and_findable(data_dir) == 0
    with KnowledgeAgentCore(data_dir) as core:
        assert core.search(token(3), mode="keyword") == []  # a deleted item is never a hit
    code, err = cli(data_dir, "add", str(docs))
    assert code == 0, err
    assert assert_consistent_and_findable(data_dir) == FILES


ADD_THEN_SEARCH = f"""
    notes = {[note(n) for n in range(6)]!r}
    for n, text in enumerate(notes):
        committed(core.add_text(text, title=f"Note {{n}}"))
    core.search("crash safety")  # indexes the adds: the fault is on this way
"""


@pytest.mark.parametrize(
    "fault",
    [
        "before-index",  # SQLite holds the adds, no index does
        "between-indexes",  # the keyword index holds them, the semantic one does not
        "before-applied",  # both hold them; the journal position is not recorded
    ],
)
def test_kill_while_indexing_adds_loses_nothing_committed(
    tmp_path: Path, fault: str, caplog: pytest.LogCaptureFixture
) -> None:
    data_dir = tmp_path / "kb"
    add_notes(data_dir, range(100, 103))
    assert_killed_at(script(data_dir, ADD_THEN_SEARCH, fault), f"{fault}:1")
    written = committed_ids(data_dir)
    assert len(written) == 6 and set(written) <= set(stored(data_dir))
    assert_reopens_without_rebuilding(data_dir, caplog)
    assert assert_consistent_and_findable(data_dir) == 9


def test_kill_mid_rebuild_rebuilds_on_open(tmp_path: Path) -> None:
    data_dir = tmp_path / "kb"
    add_notes(data_dir, range(20))
    body = """
        from knowledge_agent.backends.local.keyword.index import SearchIndexManager
        SearchIndexManager.rebuild_commit_every = 4  # the keyword index commits as it goes
        core.rebuild_index()
    """
    assert_killed_at(script(data_dir, body, "mid-rebuild:2"), "mid-rebuild:2")
    with SQLiteStorageManager(data_dir / DATABASE_FILE) as storage:
        assert storage.get_meta("index_fingerprint") == ""  # marked stale while it rebuilt
    assert assert_consistent_and_findable(data_dir) == 20


def tfidf_files(data_dir: Path) -> tuple[set[str], set[str]]:
    """(segment files in the TF-IDF folder, those its manifest names)."""
    folder = data_dir / "index" / "tfidf"
    manifest, _ = read_json_file(folder / "manifest.json")
    named = {entry["file"] for kind in manifest["segments"].values() for entry in kind}
    return {path.name for path in folder.glob("*.npz")}, named


def test_kill_mid_merge_of_tfidf_segments(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    data_dir = tmp_path / "kb"
    body = f"""
        from knowledge_agent.backends.local.tfidf.index import SemanticSearcher
        SemanticSearcher.max_segments = 1  # the second update merges the first one's away
        notes = {[note(n) for n in range(6)]!r}
        for batch in (notes[:3], notes[3:]):
            for text in batch:
                committed(core.add_text(text))
            core.search("crash safety")  # one index update, one TF-IDF generation
    """
    assert_killed_at(script(data_dir, body, "before-manifest:2"), "before-manifest:2")
    on_disk, named = tfidf_files(data_dir)
    assert on_disk - named, "no merged segment was written before the crash"
    written = committed_ids(data_dir)
    assert len(written) == 6 and set(written) <= set(stored(data_dir))
    # The last generation is whole: the half-done merge is replayed, not rebuilt around.
    assert_reopens_without_rebuilding(data_dir, caplog)
    assert assert_consistent_and_findable(data_dir) == 6
    on_disk, named = tfidf_files(data_dir)
    assert on_disk == named  # nothing of the half-done merge is left


def test_a_bad_fault_spec_is_refused_naming_the_variable() -> None:
    assert Faults.from_environment({}).step is None
    assert Faults.from_environment({FAULT_ENV: "mid-rebuild:3"}).count == 3
    for spec, message in (("mid-nothing", "unknown step 'mid-nothing'"), ("mid-rebuild:0", ">= 1")):
        with pytest.raises(ConfigError, match=f"^{FAULT_ENV}: .*{message}"):
            Faults(spec)


def test_the_tfidf_index_of_a_core_reaches_the_step_the_variable_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In process, the kill recorded instead of sent: the TF-IDF index gets the core's
    faults (the crash tests above kill at its step)."""
    kills: list[tuple[int, int]] = []
    monkeypatch.setattr(os, "kill", lambda pid, sig: kills.append((pid, sig)))
    monkeypatch.setenv(FAULT_ENV, "before-manifest")
    with KnowledgeAgentCore(tmp_path / "kb") as core:
        core.add_text(note(1))
        assert kills == []
        core.search("crash safety")  # the index update writes a TF-IDF segment
        assert kills == [(os.getpid(), signal.SIGKILL)]
