"""A full disk: one line naming it, a base that stays consistent and stays readable."""

from __future__ import annotations

import errno
import logging
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy
import pytest
from click.testing import CliRunner
from files import write

from knowledge_agent import KnowledgeAgentCore
from knowledge_agent.cli import cli
from knowledge_agent.errors import StorageError
from knowledge_agent.models import KnowledgeItem
from knowledge_agent.storage import SQLiteStorageManager

# Runs the command line with one write path failing as a full disk would.
INJECT = """
import errno, sys

def no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")

where = sys.argv[1]
if where == "sqlite":  # SQLite's own "database or disk is full", after a few files
    from knowledge_agent.ingest import collector
    from knowledge_agent.storage.sqlite_storage import SQLiteStorageManager
    collector._GROUP_FILES = 2  # files committed two at a time: the group that fails is lost
    migrate = SQLiteStorageManager._migrate
    def limited(self, conn):
        migrate(self, conn)
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {pages + 10}")
    SQLiteStorageManager._migrate = limited
elif where == "whoosh":
    from whoosh.filedb import structfile
    structfile.StructFile.write = no_space
elif where == "tfidf":
    import numpy
    numpy.savez = numpy.savez_compressed = no_space
from knowledge_agent.cli import main
main(sys.argv[2:])
"""

TEXT = "# Note {n}\n\n" + "The harbour lighthouse keeps its lamp lit through the storm. " * 40


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    for number in range(12):
        write(tmp_path / "notes" / f"note{number:02d}.md", TEXT.format(n=number))
    return tmp_path / "notes"


def stored_items(data: Path) -> int:
    with sqlite3.connect(data / "knowledge.sqlite3") as conn:
        return int(conn.execute("SELECT COUNT(*) FROM knowledge_items").fetchone()[0])


def assert_one_error_line(stderr: str, *fragments: str) -> None:
    assert "Traceback" not in stderr, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("Error: disk full"), stderr
    for fragment in fragments:
        assert fragment in lines[0], stderr


@pytest.mark.parametrize(
    ("where", "names"),
    [
        ("sqlite", "knowledge.sqlite3: database or disk is full"),
        ("whoosh", "No space left on device"),
        ("tfidf", "No space left on device"),
    ],
)
def test_a_full_disk_while_adding_is_one_line_and_the_base_stays_sound(
    tmp_path: Path, data_dir: Path, folder: Path, where: str, names: str
) -> None:
    script = tmp_path / "inject.py"
    script.write_text(INJECT)
    env = {k: v for k, v in os.environ.items() if k != "KNOWLEDGE_AGENT_HOME"}
    result = subprocess.run(
        [sys.executable, str(script), where, "--data-dir", str(data_dir), "add", str(folder)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert result.returncode == 1
    assert_one_error_line(result.stderr, names)
    committed = stored_items(data_dir)
    if where == "sqlite":
        assert 0 < committed < 12 and committed % 2 == 0  # some groups fitted, the rest not
    with KnowledgeAgentCore(data_dir) as core:  # space again: opening catches the indexes up
        status = core.check()
        assert status.consistent, status.problems
        assert status.items == committed


# -- the storage layer ------------------------------------------------------------------------


def item(number: int) -> KnowledgeItem:
    return KnowledgeItem(title=f"Item {number}", content="lighthouse " * 200)


def test_sqlite_full_is_a_disk_full_storage_error(tmp_path: Path) -> None:
    with SQLiteStorageManager(tmp_path / "k.sqlite3") as storage:
        storage.save_item(item(0))
        assert storage._conn is not None
        pages = storage._conn.execute("PRAGMA page_count").fetchone()[0]
        storage._conn.execute(f"PRAGMA max_page_count = {pages}")
        with pytest.raises(StorageError, match=r"^disk full while writing .*k\.sqlite3: "):
            for number in range(1, 200):
                storage.save_item(item(number))
        written = storage.count_items()
        assert written >= 1
        assert storage.get_item(storage.list_items(limit=1)[0].id) is not None
    with SQLiteStorageManager(tmp_path / "k.sqlite3") as storage:
        assert storage.count_items() == written  # nothing half-written


def failing_open(self: SQLiteStorageManager) -> sqlite3.Connection:
    """Opening for writing fails the way SQLite does on a full disk (sizing the -shm file)."""
    try:
        raise sqlite3.OperationalError("disk I/O error")
    except sqlite3.Error as exc:
        raise StorageError(f"configure {self.db_path!r} failed: {exc}") from exc


def make_base(data: Path, folder: Path) -> int:
    with KnowledgeAgentCore(data) as core:
        return core.collect_knowledge(folder).processed


def test_storage_that_cannot_write_opens_read_only(
    data_dir: Path, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    count = make_base(data_dir, folder)
    monkeypatch.setattr(SQLiteStorageManager, "_open_read_write", failing_open)
    with SQLiteStorageManager(data_dir / "knowledge.sqlite3") as storage:
        assert storage.read_only
        assert "disk I/O error" in (storage.read_only_reason or "")
        assert storage.count_items() == count
        with pytest.raises(StorageError, match=r"cannot write .*save_item.*read-only"):
            storage.save_item(item(1))
        assert storage.count_items() == count


def test_a_database_that_cannot_be_written_is_still_searched(
    data_dir: Path, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_base(data_dir, folder)
    monkeypatch.setattr(SQLiteStorageManager, "_open_read_write", failing_open)
    monkeypatch.delenv("KNOWLEDGE_AGENT_HOME", raising=False)
    runner = CliRunner()
    found = runner.invoke(cli, ["--data-dir", str(data_dir), "search", "lighthouse", "--json"])
    assert found.exit_code == 0, found.output
    assert '"title": "Note' in found.stdout
    refused = runner.invoke(cli, ["--data-dir", str(data_dir), "add", str(folder), "--full"])
    assert refused.exit_code == 1
    assert "Traceback" not in refused.stderr
    assert refused.stderr.startswith("Error: ") and "read-only" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr


def test_an_explicit_read_only_open_takes_any_file_name(tmp_path: Path) -> None:
    path = tmp_path / "odd ?#% name" / "k.sqlite3"
    with SQLiteStorageManager(path) as storage:
        storage.save_item(item(0))
    with SQLiteStorageManager(path, read_only=True) as storage:
        assert storage.read_only and storage.count_items() == 1
        with pytest.raises(StorageError, match="opened read-only"):
            storage.save_item(item(1))


def test_a_missing_database_is_not_opened_read_only(tmp_path: Path) -> None:
    with pytest.raises(StorageError):
        SQLiteStorageManager(tmp_path / "absent" / "k.sqlite3", read_only=True)


# -- a real full disk (a small tmpfs; only where mounting is allowed) -------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    if sys.platform != "linux" or os.geteuid() != 0:
        pytest.skip("needs root on Linux to mount a tmpfs")
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True
    )
    if made.returncode != 0:
        pytest.skip("mounting a tmpfs is not permitted here")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk: Path) -> None:
    """Write until the disk has no space left."""
    # Unbuffered: a write cut short leaves nothing behind for close() to fail on.
    with open(disk / "filler", "wb", buffering=0) as handle:
        try:
            while True:
                handle.write(b"\0" * (1 << 16))
        except OSError as exc:
            assert exc.errno == errno.ENOSPC


def test_a_full_disk_still_opens_for_reading(small_disk: Path, folder: Path) -> None:
    data = small_disk / "data"
    count = make_base(data, folder)
    assert not (data / "knowledge.sqlite3-shm").exists()  # a clean close removes it
    fill(small_disk)
    with SQLiteStorageManager(data / "knowledge.sqlite3") as storage:
        assert storage.read_only and "disk is full" in (storage.read_only_reason or "")
        assert storage.count_items() == count
    runner = CliRunner()
    found = runner.invoke(cli, ["--data-dir", str(data), "search", "lighthouse", "--json"])
    assert found.exit_code == 0, found.output
    assert '"title": "Note' in found.stdout
    refused = runner.invoke(cli, ["--data-dir", str(data), "add", str(folder), "--full"])
    assert refused.exit_code == 1
    assert "Traceback" not in refused.stderr and "disk is full" in refused.stderr
    (small_disk / "filler").unlink()
    with KnowledgeAgentCore(data) as core:  # space again: a normal, writable open
        assert not core.storage.read_only
        assert core.check().consistent and core.status().items == count


def test_a_full_disk_when_closing_is_a_warning_and_the_next_open_catches_up(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def no_space(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    core = KnowledgeAgentCore(data_dir)
    item = core.add_text("indexed only later toklater")  # deferred to the close
    monkeypatch.setattr(numpy, "savez", no_space)  # the TF-IDF index cannot write
    with caplog.at_level(logging.WARNING):
        core.close()  # logs why, raises nothing: SQLite holds the write
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    prefix = "cannot bring the search indexes up to date now: cannot write TF-IDF index "
    assert any(m.startswith(prefix) and "No space left on device" in m for m in warned), warned
    monkeypatch.undo()
    with KnowledgeAgentCore(data_dir) as core:  # space again: the journal is replayed
        assert [hit.item.id for hit in core.search("toklater", mode="semantic")] == [item.id]
        assert core.check().consistent
