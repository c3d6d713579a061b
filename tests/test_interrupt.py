"""Ctrl-C during add, sync and watch: a prompt stop, exit code 130, one line, a sound base."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from files import write

from knowledge_agent import KnowledgeAgentCore
from knowledge_agent import cli as cli_module
from knowledge_agent.chunking import ChunkConfig
from knowledge_agent.ingest import collector as collector_module
from knowledge_agent.ingest import interrupts as interrupts_module
from knowledge_agent.ingest.collector import Collector, graceful_interrupts
from knowledge_agent.ingest.report import CollectInterrupted, CollectProgress
from knowledge_agent.ingest.walker import WalkOptions
from knowledge_agent.ingest.watcher import ChangeSet, FolderWatcher
from knowledge_agent.storage import SQLiteStorageManager
from knowledge_agent.storage.sources import SourceRoot

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

GUARD_S = 60.0  # hang guard: a command that stops at its next file ends long before it
COMMITTED = re.compile(r"^interrupted: (\d+) files? committed; run the same command again")
WORDS = ["retry", "backoff", "cache", "deploy", "rollback", "timeout", "checkout", "index"]


@pytest.fixture(autouse=True)
def _python_handles_ctrl_c() -> Iterator[None]:
    """Ctrl-C handled by Python's default handler, as in a terminal, whatever the process
    running the tests installed (a test runner may catch SIGINT itself); restored after."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def collector_for(storage: SQLiteStorageManager, root: Path, workers: int) -> Collector:
    """A collector for ``root`` in knowledge base "default", set up as the core does it."""
    storage.sources.ensure_kb("default")
    storage.sources.save_root(SourceRoot("default", str(root)))
    return Collector(storage, ChunkConfig(), workers=workers)


def make_folder(root: Path, files: int, paragraphs: int = 12, start: int = 0) -> Path:
    for number in range(start, start + files):
        body = "\n\n".join(
            " ".join(WORDS[(number + p + w) % len(WORDS)] for w in range(60))
            for p in range(paragraphs)
        )
        write(root / f"doc{number:04d}.md", f"# Document {number}\n\n{body}\n")
    return root


def stored_items(db: Path) -> int:
    """Items committed so far, read beside the writer (0 before the schema exists)."""
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
            return int(conn.execute("SELECT COUNT(*) FROM knowledge_items").fetchone()[0])
    except sqlite3.Error:
        return 0


def assert_group_gone(pgid: int) -> None:
    """The command's worker processes are gone with it (none left running on)."""
    deadline = time.monotonic() + GUARD_S
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    pytest.fail("worker processes outlived the interrupted command")


def interrupt(args: list[str], data: Path, *, after_items: int) -> tuple[int, str]:
    """Run knowledge-agent, press Ctrl-C (SIGINT to its process group, as a terminal does)
    once ``after_items`` items are committed; returns (exit code, stderr). A command still
    running a minute after Ctrl-C fails the test."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("KNOWLEDGE_AGENT_HOME", None)
    command = [sys.executable, "-m", "knowledge_agent.cli", "--data-dir", str(data), *args]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True, env=env
    )
    try:
        deadline = time.monotonic() + GUARD_S
        while stored_items(data / "knowledge.sqlite3") < after_items:
            assert process.poll() is None, process.communicate()[1].decode()
            assert time.monotonic() < deadline, "the command committed nothing"
            time.sleep(0.02)
        os.killpg(process.pid, signal.SIGINT)
        try:
            _, err = process.communicate(timeout=GUARD_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{args[0]} kept running {GUARD_S:g} s after Ctrl-C")
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert_group_gone(process.pid)
    return process.returncode, err.decode()


def assert_interrupted_cleanly(code: int, stderr: str, data: Path, before: int = 0) -> int:
    assert code == 130, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    match = COMMITTED.match(lines[0])
    assert match, stderr
    committed = int(match.group(1))
    # SQLite holds exactly what was reported; opening replays the journal into the indexes.
    with KnowledgeAgentCore(data) as core:
        status = core.check()
        assert status.consistent, status.problems
        assert status.items == before + committed
    return committed


def test_ctrl_c_during_add_stops_at_once(tmp_path: Path, data_dir: Path) -> None:
    folder = make_folder(tmp_path / "docs", 150, paragraphs=8)
    code, stderr = interrupt(["add", str(folder)], data_dir, after_items=20)
    committed = assert_interrupted_cleanly(code, stderr, data_dir)
    assert 20 <= committed <= 150
    rerun = subprocess.run(
        [
            sys.executable,
            "-m",
            "knowledge_agent.cli",
            "--data-dir",
            str(data_dir),
            "add",
            str(folder),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert rerun.returncode == 0, rerun.stderr
    with KnowledgeAgentCore(data_dir) as core:
        assert core.check().consistent and core.status().items == 150


def test_ctrl_c_during_sync_stops_at_once(tmp_path: Path, data_dir: Path) -> None:
    folder = make_folder(tmp_path / "docs", 5, paragraphs=1)
    with KnowledgeAgentCore(data_dir) as core:
        core.collect_knowledge(folder)
    make_folder(folder, 250, start=5)  # new files for sync to collect
    code, stderr = interrupt(["sync"], data_dir, after_items=5 + 20)
    assert_interrupted_cleanly(code, stderr, data_dir, before=5)


# -- the collector ----------------------------------------------------------------------------


@pytest.mark.parametrize("workers", [1, 2])
def test_collector_interrupt_carries_the_committed_count(
    tmp_path: Path, storage: SQLiteStorageManager, workers: int
) -> None:
    folder = make_folder(tmp_path / "docs", 40, paragraphs=2)  # over the parallel threshold
    collector = collector_for(storage, folder, workers)
    events: list[CollectProgress] = []

    def progress(event: CollectProgress) -> None:
        events.append(event)
        if len(events) == 5:
            raise KeyboardInterrupt

    with pytest.raises(CollectInterrupted) as caught:
        collector.collect("default", str(folder), WalkOptions(), progress=progress)
    report = caught.value.report
    # Files are committed in groups; the report counts exactly what was committed.
    committed = storage.count_items()
    assert 5 <= report.processed == committed == len(report.item_ids)
    # The next run finishes the rest and redoes nothing.
    again = collector.collect("default", str(folder), WalkOptions())
    assert (again.processed, again.unchanged) == (40 - committed, committed)


def test_a_signal_during_a_commit_waits_for_its_end(
    tmp_path: Path, storage: SQLiteStorageManager
) -> None:
    folder = make_folder(tmp_path / "docs", 6, paragraphs=1)
    collector = collector_for(storage, folder, 1)
    store = collector._pending  # each extracted file's step inside the group's commit
    calls = 0

    def store_with_ctrl_c(*args: object, **kwargs: object) -> object:
        nonlocal calls
        calls += 1
        if calls == 3:
            signal.raise_signal(signal.SIGINT)  # mid-commit: must not split it from its count
        return store(*args, **kwargs)  # type: ignore[arg-type]

    collector._pending = store_with_ctrl_c  # type: ignore[method-assign]
    with graceful_interrupts(), pytest.raises(CollectInterrupted) as caught:
        collector.collect("default", str(folder), WalkOptions())
    assert caught.value.report.processed == 3 == storage.count_items()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_ctrl_c_stops_a_collection_on_another_thread(
    tmp_path: Path, storage: SQLiteStorageManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(collector_module, "_GROUP_FILES", 1)  # a commit per file
    folder = make_folder(tmp_path / "docs", 8, paragraphs=1)
    collector = collector_for(storage, folder, 1)
    outcome: list[BaseException] = []
    started = threading.Event()

    def run() -> None:
        def progress(event: CollectProgress) -> None:
            started.set()
            if event.done == 2:
                # What the Ctrl-C handler does for threads other than the main one.
                interrupts_module.interrupt_requested_event.set()

        try:
            collector.collect("default", str(folder), WalkOptions(), progress=progress)
        except BaseException as exc:
            outcome.append(exc)

    with graceful_interrupts():
        thread = threading.Thread(target=run)
        thread.start()
        thread.join(30)
    assert not interrupts_module.interrupt_requested_event.is_set()  # cleared on the way out
    assert len(outcome) == 1 and isinstance(outcome[0], CollectInterrupted)
    assert outcome[0].report.processed == 2 == storage.count_items()


def test_watcher_stops_when_its_callback_is_interrupted(tmp_path: Path) -> None:
    folder = tmp_path / "notes"
    write(folder / "a.md", "# A\n\nalpha\n")
    calls: list[ChangeSet] = []

    def on_changes(changes: ChangeSet) -> None:
        calls.append(changes)
        raise KeyboardInterrupt

    watcher = FolderWatcher(
        [folder], on_changes, debounce=0.05, poll_interval=0.05, backend="polling"
    )
    watcher.start()
    try:
        write(folder / "b.md", "# B\n\nbeta\n")
        deadline = time.monotonic() + 10
        while watcher._thread is not None and watcher._thread.is_alive():
            assert time.monotonic() < deadline, "the watcher kept running"
            time.sleep(0.02)
    finally:
        watcher.stop()
    assert len(calls) == 1 and isinstance(watcher.interrupted, KeyboardInterrupt)


# -- the command line -------------------------------------------------------------------------


@pytest.fixture
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("KNOWLEDGE_AGENT_HOME", raising=False)


@pytest.mark.usefixtures("_isolated")
def test_interrupted_sync_prints_one_line_and_exits_130(
    tmp_path: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = make_folder(tmp_path / "docs", 3, paragraphs=1)
    with KnowledgeAgentCore(data_dir) as core:
        core.collect_knowledge(folder)
    for path in folder.iterdir():
        path.write_text(path.read_text() + "\nchanged\n")

    def sync(self: KnowledgeAgentCore, **kwargs: object) -> None:
        progress = kwargs["progress"]
        for done, path in enumerate(sorted(folder.iterdir())[:2], 1):
            progress(CollectProgress(str(path), "processed", done, 3, 0, 0))  # type: ignore[operator]
        raise KeyboardInterrupt

    monkeypatch.setattr(KnowledgeAgentCore, "sync", sync)
    result = CliRunner().invoke(cli_module.cli, ["--data-dir", str(data_dir), "sync"])
    assert result.exit_code == 130
    assert result.stderr == (
        "interrupted: 2 files committed; run the same command again to finish\n"
    )


@pytest.mark.usefixtures("_isolated")
def test_ctrl_c_that_cuts_a_watch_update_short_exits_130(
    tmp_path: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = make_folder(tmp_path / "notes", 1, paragraphs=1)
    stores = 0
    cut = threading.Event()
    real_store = Collector._pending  # each extracted file's step inside the group's commit

    def store(self: Collector, *args: object) -> object:
        nonlocal stores
        status = real_store(self, *args)  # type: ignore[arg-type]
        stores += 1
        if stores == 1 + 3:  # the first pass, then three files of the update
            interrupts_module.interrupt_requested_event.set()  # Ctrl-C, as the handler sets it
            cut.set()
        return status

    def wait_for_interrupt() -> None:
        make_folder(folder, 9, paragraphs=1, start=1)
        assert cut.wait(20), "the update did not start"
        raise KeyboardInterrupt

    monkeypatch.setattr(Collector, "_pending", store)
    monkeypatch.setattr(cli_module, "_wait_for_interrupt", wait_for_interrupt)
    args = ["--data-dir", str(data_dir), "watch", str(folder), "--debounce", "0.05", "--json"]
    result = CliRunner().invoke(cli_module.cli, args)
    assert result.exit_code == 130, result.output
    assert result.stderr == (
        "interrupted: 4 files committed; run the same command again to finish\n"
    )
    with KnowledgeAgentCore(data_dir) as core:
        status = core.check()
        assert status.consistent and status.items == 4


class _InterruptingImport:
    """A meta-path finder that raises KeyboardInterrupt on importing one module, as a Ctrl-C
    arriving while the command line is still loading does."""

    def __init__(self, name: str) -> None:
        self.name = name

    def find_spec(self, fullname: str, path: object, target: object = None) -> None:
        if fullname == self.name:
            raise KeyboardInterrupt


def test_ctrl_c_while_the_command_loads_exits_130_without_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from knowledge_agent import __main__ as entry

    monkeypatch.delitem(sys.modules, "knowledge_agent.cli")
    monkeypatch.setattr(
        sys, "meta_path", [_InterruptingImport("knowledge_agent.cli"), *sys.meta_path]
    )
    with pytest.raises(SystemExit) as exited:
        entry.main()
    assert exited.value.code == 130
    assert capsys.readouterr().err == "interrupted\n"


def test_the_console_script_is_the_entry_that_handles_an_early_ctrl_c() -> None:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib

    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    assert project["project"]["scripts"]["knowledge-agent"] == "knowledge_agent.__main__:main"
