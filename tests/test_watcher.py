"""Tests for knowledge_agent.ingest.watcher, run against both backends.

No fixed sleeps: every test waits on the callback (generous timeouts, short debounce), and a
"nothing else was reported" check writes a sentinel file and waits for it instead.
"""

from __future__ import annotations

import logging
import shutil
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from knowledge_agent.errors import ConfigError, IngestError
from knowledge_agent.ingest import watcher as watcher_module
from knowledge_agent.ingest.walker import WalkOptions
from knowledge_agent.ingest.watcher import ChangeSet, FolderWatcher

TIMEOUT = 60.0  # a hang guard: only reached when something is broken
DEBOUNCE = 0.15
POLL = 0.05
BACKENDS = ["polling", "watchdog"]


class Recorder:
    """Collects the ChangeSets delivered to the callback and lets a test wait for them."""

    def __init__(self) -> None:
        self.batches: list[ChangeSet] = []
        self.threads: set[str] = set()
        self._cond = threading.Condition()
        self.fail_next = 0

    def __call__(self, changes: ChangeSet) -> None:
        with self._cond:
            self.batches.append(changes)
            self.threads.add(threading.current_thread().name)
            self._cond.notify_all()
            if self.fail_next:
                self.fail_next -= 1
                raise RuntimeError("callback failure for the test")

    @property
    def changed(self) -> set[Path]:
        with self._cond:
            return {path for batch in self.batches for path in batch.changed}

    @property
    def deleted(self) -> set[Path]:
        with self._cond:
            return {path for batch in self.batches for path in batch.deleted}

    def wait_for(self, predicate: Callable[[Recorder], bool], timeout: float = TIMEOUT) -> None:
        with self._cond:
            ok = self._cond.wait_for(lambda: predicate(self), timeout)
        assert ok, f"timed out; batches so far: {self.batches}"

    def wait_changed(self, *paths: Path) -> None:
        self.wait_for(lambda rec: set(paths) <= rec.changed)

    def wait_deleted(self, *paths: Path) -> None:
        self.wait_for(lambda rec: set(paths) <= rec.deleted)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    if request.param == "watchdog":
        pytest.importorskip("watchdog")
    return request.param


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def watch(
    tmp_path: Path, backend: str, recorder: Recorder
) -> Iterator[Callable[..., FolderWatcher]]:
    """Start a watcher on tmp_path (or given paths) with fast timings; stopped afterwards."""
    started: list[FolderWatcher] = []

    def start(*paths: Path, options: WalkOptions | None = None) -> FolderWatcher:
        watcher = FolderWatcher(
            list(paths) or [tmp_path],
            recorder,
            options=options,
            debounce=DEBOUNCE,
            poll_interval=POLL,
            backend=backend,
        )
        watcher.start()
        started.append(watcher)
        return watcher

    yield start
    for watcher in started:
        watcher.stop()


def test_backend_name(tmp_path: Path, backend: str) -> None:
    watcher = FolderWatcher([tmp_path], lambda changes: None, backend=backend)
    assert watcher.backend_name == backend


def test_created_file_is_reported(
    tmp_path: Path, watch: Callable[..., FolderWatcher], recorder: Recorder
) -> None:
    watcher = watch()
    new = tmp_path / "docs" / "new.md"
    new.parent.mkdir()
    new.write_text("hello", encoding="utf-8")
    recorder.wait_changed(new)
    assert recorder.deleted == set()
    assert all(not path.is_dir() for path in recorder.changed)  # directories never
    # the callback runs on the watcher's own thread
    assert all(name.startswith("FolderWatcher(") for name in recorder.threads)
    assert watcher.backend_name in BACKENDS


def test_modified_file_is_reported(
    tmp_path: Path, watch: Callable[..., FolderWatcher], recorder: Recorder
) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text("one", encoding="utf-8")
    watch()
    doc.write_text("two, longer", encoding="utf-8")
    recorder.wait_changed(doc)


def test_deleted_file_is_reported(
    tmp_path: Path, watch: Callable[..., FolderWatcher], recorder: Recorder
) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text("x", encoding="utf-8")
    watch()
    doc.unlink()
    recorder.wait_deleted(doc)
    assert doc not in recorder.changed


def test_deleted_folder_reports_its_files(
    tmp_path: Path, watch: Callable[..., FolderWatcher], recorder: Recorder
) -> None:
    folder = tmp_path / "sub"
    (folder / "deep").mkdir(parents=True)
    files = [folder / "a.md", folder / "deep" / "b.md"]
    for path in files:
        path.write_text("x", encoding="utf-8")
    watch()
    shutil.rmtree(folder)
    recorder.wait_deleted(*files)
    assert folder not in recorder.deleted


def test_moved_file_is_a_deletion_and_a_change(
    tmp_path: Path, watch: Callable[..., FolderWatcher], recorder: Recorder
) -> None:
    old = tmp_path / "old.md"
    old.write_text("x", encoding="utf-8")
    (tmp_path / "dest").mkdir()
    watch()
    new = tmp_path / "dest" / "new.md"
    old.rename(new)
    recorder.wait_for(lambda rec: old in rec.deleted and new in rec.changed)


def test_folder_moved_in_reports_its_files(
    tmp_path: Path, watch: Callable[..., FolderWatcher], recorder: Recorder
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    outside = tmp_path / "outside"
    (outside / "inner").mkdir(parents=True)
    (outside / "a.md").write_text("x", encoding="utf-8")
    (outside / "inner" / "b.md").write_text("x", encoding="utf-8")
    watch(root)
    (outside).rename(root / "moved")
    recorder.wait_changed(root / "moved" / "a.md", root / "moved" / "inner" / "b.md")


def test_burst_of_writes_gives_one_change_set(
    tmp_path: Path, watch: Callable[..., FolderWatcher], recorder: Recorder
) -> None:
    watch()
    doc = tmp_path / "busy.md"
    for i in range(20):
        doc.write_text(f"version {i}", encoding="utf-8")
    recorder.wait_changed(doc)
    sentinel = tmp_path / "sentinel.md"
    sentinel.write_text("x", encoding="utf-8")
    recorder.wait_changed(sentinel)
    assert sum(doc in batch.changed for batch in recorder.batches) == 1
    assert all(batch for batch in recorder.batches)  # empty batches are never delivered


def test_created_then_deleted_within_the_window_is_not_reported(
    tmp_path: Path, watch: Callable[..., FolderWatcher], recorder: Recorder
) -> None:
    watch()
    temp = tmp_path / "temp.md"
    temp.write_text("x", encoding="utf-8")
    temp.unlink()
    sentinel = tmp_path / "sentinel.md"
    sentinel.write_text("x", encoding="utf-8")
    recorder.wait_changed(sentinel)
    # polling may have seen it between two polls: then it was reported and then deleted
    if temp in recorder.changed:
        recorder.wait_deleted(temp)
    for batch in recorder.batches:
        assert not batch.changed & batch.deleted


def test_excluded_files_are_not_reported(
    tmp_path: Path, watch: Callable[..., FolderWatcher], recorder: Recorder
) -> None:
    (tmp_path / ".gitignore").write_text("*.log\nsecret/\n", encoding="utf-8")
    (tmp_path / "node_modules").mkdir()
    watch(options=WalkOptions(exclude=("drafts/",)))
    excluded = [
        tmp_path / "node_modules" / "pkg.js",
        tmp_path / "app.log",
        tmp_path / "secret" / "s.md",
        tmp_path / "drafts" / "d.md",
        tmp_path / ".hidden.md",
        tmp_path / "bundle.min.js",
    ]
    for path in excluded:
        path.parent.mkdir(exist_ok=True)
        path.write_text("x", encoding="utf-8")
    sentinel = tmp_path / "sentinel.md"
    sentinel.write_text("x", encoding="utf-8")
    recorder.wait_changed(sentinel)
    assert recorder.changed == {sentinel}


def test_busy_excluded_folder_does_not_hold_back_changes(
    tmp_path: Path, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No batch is forced out by its age here: it comes only after a quiet debounce, which
    # writes in an excluded folder every 20 ms would never allow if they counted.
    monkeypatch.setattr(watcher_module, "_MAX_DELAY_FACTOR", 10_000)
    recorder = Recorder()
    busy = tmp_path / "node_modules" / "cache.js"
    busy.parent.mkdir()
    stop_writing = threading.Event()
    writes = 0

    def keep_writing() -> None:
        nonlocal writes
        while not stop_writing.wait(0.02):
            busy.write_text(f"x{writes}", encoding="utf-8")
            writes += 1

    writer = threading.Thread(target=keep_writing)
    with FolderWatcher([tmp_path], recorder, debounce=0.3, poll_interval=0.1, backend=backend):
        writer.start()
        try:
            doc = tmp_path / "doc.md"
            doc.write_text("x", encoding="utf-8")
            recorder.wait_changed(doc)  # fails after the hang guard if it never came
            assert writer.is_alive() and writes > 0  # delivered while the writes went on
        finally:
            stop_writing.set()
            writer.join()
    assert recorder.changed == {doc}


def test_a_file_written_all_the_time_is_still_reported(
    tmp_path: Path, backend: str, recorder: Recorder
) -> None:
    busy = tmp_path / "growing.log.md"
    stop_writing = threading.Event()

    def keep_writing() -> None:
        i = 0
        while not stop_writing.wait(0.02):
            busy.write_text("x" * i, encoding="utf-8")
            i += 1

    writer = threading.Thread(target=keep_writing)
    # never quiet for 0.05 s: delivered at the latest ten debounces after the first write
    with FolderWatcher([tmp_path], recorder, debounce=0.05, poll_interval=0.03, backend=backend):
        writer.start()
        try:
            recorder.wait_changed(busy)
        finally:
            stop_writing.set()
            writer.join()


def test_include_patterns_filter_reports(
    tmp_path: Path, watch: Callable[..., FolderWatcher], recorder: Recorder
) -> None:
    watch(options=WalkOptions(include=("*.md",)))
    (tmp_path / "skip.txt").write_text("x", encoding="utf-8")
    doc = tmp_path / "doc.md"
    doc.write_text("x", encoding="utf-8")
    recorder.wait_changed(doc)
    assert recorder.changed == {doc}


def test_gitignore_edit_moves_files_out_of_and_into_the_rules(
    tmp_path: Path, watch: Callable[..., FolderWatcher], recorder: Recorder
) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("x", encoding="utf-8")
    ignored = tmp_path / "old.log"
    ignored.write_text("x", encoding="utf-8")
    gitignore = tmp_path / ".gitignore"
    gitignore.write_text("*.log\n", encoding="utf-8")
    watch()
    gitignore.write_text("*.txt\n", encoding="utf-8")
    recorder.wait_for(lambda rec: notes in rec.deleted and ignored in rec.changed)


def test_single_file_path(
    tmp_path: Path, watch: Callable[..., FolderWatcher], recorder: Recorder
) -> None:
    doc = tmp_path / "only.md"
    doc.write_text("x", encoding="utf-8")
    watch(doc)
    (tmp_path / "sibling.md").write_text("x", encoding="utf-8")
    doc.write_text("changed, longer", encoding="utf-8")
    recorder.wait_changed(doc)
    doc.unlink()
    recorder.wait_deleted(doc)
    assert recorder.changed == {doc}


def test_callback_error_is_logged_and_watching_goes_on(
    tmp_path: Path,
    watch: Callable[..., FolderWatcher],
    recorder: Recorder,
    caplog: pytest.LogCaptureFixture,
) -> None:
    recorder.fail_next = 1
    with caplog.at_level(logging.ERROR, logger="knowledge_agent.ingest.watcher"):
        watch()
        first = tmp_path / "first.md"
        first.write_text("x", encoding="utf-8")
        recorder.wait_changed(first)
        second = tmp_path / "second.md"
        second.write_text("x", encoding="utf-8")
        recorder.wait_changed(second)
    assert "callback failed" in caplog.text
    assert "RuntimeError" in caplog.text


def test_stop_joins_and_is_idempotent(tmp_path: Path, backend: str, recorder: Recorder) -> None:
    before = set(threading.enumerate())
    watcher = FolderWatcher(
        [tmp_path], recorder, debounce=DEBOUNCE, poll_interval=POLL, backend=backend
    )
    watcher.stop()  # before start: a no-op
    watcher.start()
    with pytest.raises(RuntimeError):
        watcher.start()
    watcher.stop()
    watcher.stop()
    assert set(threading.enumerate()) <= before


def test_context_manager(tmp_path: Path, backend: str, recorder: Recorder) -> None:
    with FolderWatcher(
        [tmp_path], recorder, debounce=DEBOUNCE, poll_interval=POLL, backend=backend
    ) as watcher:
        doc = tmp_path / "ctx.md"
        doc.write_text("x", encoding="utf-8")
        recorder.wait_changed(doc)
    assert watcher._thread is None


def test_run_blocks_until_the_event_is_set(tmp_path: Path, backend: str) -> None:
    stop_event = threading.Event()
    seen: list[ChangeSet] = []

    def on_changes(changes: ChangeSet) -> None:
        seen.append(changes)
        stop_event.set()  # stop from inside the callback: run() then returns

    watcher = FolderWatcher(
        [tmp_path], on_changes, debounce=DEBOUNCE, poll_interval=POLL, backend=backend
    )
    runner = threading.Thread(target=watcher.run, args=(stop_event,))
    runner.start()
    try:
        # run() takes its initial state before watching: write until it is noticed
        doc = tmp_path / "run.md"
        for i in range(int(TIMEOUT / 0.25)):
            doc.write_text(f"x{i}", encoding="utf-8")
            runner.join(0.25)
            if not runner.is_alive():
                break
        assert not runner.is_alive()
    finally:
        stop_event.set()
        runner.join(TIMEOUT)
    assert seen and doc in seen[0].changed


# -- configuration --------------------------------------------------------------------------


def test_watchdog_backend_without_watchdog_needs_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [m for m in sys.modules if m == "watchdog" or m.startswith("watchdog.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "watchdog", None)
    with pytest.raises(ConfigError, match=r"\[watch\]"):
        FolderWatcher([tmp_path], lambda changes: None, backend="watchdog")
    # auto falls back to polling
    assert FolderWatcher([tmp_path], lambda changes: None).backend_name == "polling"


def test_auto_falls_back_to_polling_when_the_observer_cannot_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, recorder: Recorder
) -> None:
    observers = pytest.importorskip("watchdog.observers")

    class BrokenObserver(observers.Observer):  # type: ignore[name-defined,misc]
        def start(self) -> None:
            raise OSError(28, "inotify watch limit reached")

    monkeypatch.setattr(observers, "Observer", BrokenObserver)
    with pytest.raises(IngestError, match="inotify watch limit"):
        FolderWatcher([tmp_path], recorder, backend="watchdog").start()
    watcher = FolderWatcher([tmp_path], recorder, debounce=DEBOUNCE, poll_interval=POLL)
    assert watcher.backend_name == "watchdog"
    with watcher:
        assert watcher.backend_name == "polling"
        doc = tmp_path / "doc.md"
        doc.write_text("x", encoding="utf-8")
        recorder.wait_changed(doc)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"backend": "inotify"}, "backend"),
        ({"debounce": 0}, "debounce"),
        ({"debounce": -1.0}, "debounce"),
        ({"poll_interval": 0}, "poll_interval"),
    ],
)
def test_bad_configuration(tmp_path: Path, kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        FolderWatcher([tmp_path], lambda changes: None, **kwargs)


def test_missing_path_and_no_paths(tmp_path: Path) -> None:
    with pytest.raises(IngestError):
        FolderWatcher([tmp_path / "missing"], lambda changes: None)
    with pytest.raises(ConfigError):
        FolderWatcher([], lambda changes: None)


def test_change_set_truthiness() -> None:
    assert not ChangeSet()
    assert ChangeSet(changed=frozenset({Path("/a")}))
    assert ChangeSet(deleted=frozenset({Path("/a")}))
