"""kill -9 in the middle of a write: the base reopens consistent, and a re-run completes it.

Fast versions of ``benchmarks/stress.py``'s kill scenarios: a real ``knowledge-agent``
process, killed with its whole process group at a few moments of its run.
"""

from __future__ import annotations

import os
import signal
import string
import subprocess
import sys
import time
from pathlib import Path

import pytest

from knowledge_agent import KnowledgeAgentCore

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX process groups")

FILES = 120


def token(n: int) -> str:
    """A unique word of letters only (digits would be split off by the analyzer)."""
    letters = string.ascii_lowercase
    return "tok" + "".join(letters[(n // 26**i) % 26] for i in range(3))


def write_corpus(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for n in range(FILES):
        body = "\n\n".join(f"Paragraph {p} of note {n} about crash safety." for p in range(12))
        (folder / f"note{n:03d}.md").write_text(
            f"# Note {n}\n\nThe word {token(n)} marks this note.\n\n{body}\n", encoding="utf-8"
        )


def cli(data_dir: Path, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "knowledge_agent.cli", "--data-dir", str(data_dir), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own process group: the kill reaches the workers too
    )


def run_and_kill(data_dir: Path, after: float, *args: str) -> None:
    process = cli(data_dir, *args)
    try:
        process.wait(timeout=after)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)


def assert_consistent_and_findable(data_dir: Path) -> int:
    """Reopen; every item in SQLite is found by its token in both engines."""
    with KnowledgeAgentCore(data_dir) as core:
        status = core.status()
        assert status.consistent, status.problems
        for item in core.storage.iter_items():
            word = item.content.split("The word ", 1)[1].split()[0]
            for mode in ("keyword", "semantic"):
                hits = core.search(word, limit=1, mode=mode)
                assert hits and hits[0].item.id == item.id, (word, mode)
        return status.items


def finish(data_dir: Path, *args: str) -> None:
    done = cli(data_dir, *args)
    _, err = done.communicate(timeout=120)
    assert done.returncode == 0, err.decode()


def test_kill_9_during_add_then_a_rerun_completes(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    write_corpus(docs)
    started = time.monotonic()
    finish(tmp_path / "timing", "add", str(docs))
    duration = time.monotonic() - started
    for trial, fraction in enumerate((0.55, 0.75, 0.9)):
        data_dir = tmp_path / f"kb{trial}"
        run_and_kill(data_dir, duration * fraction, "add", str(docs))
        assert_consistent_and_findable(data_dir)
        finish(data_dir, "add", str(docs))
        assert assert_consistent_and_findable(data_dir) == FILES


def test_kill_9_during_rebuild_and_remove(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    write_corpus(docs)
    data_dir = tmp_path / "kb"
    finish(data_dir, "add", str(docs))
    started = time.monotonic()
    finish(data_dir, "rebuild")
    run_and_kill(data_dir, (time.monotonic() - started) * 0.7, "rebuild")
    assert assert_consistent_and_findable(data_dir) == FILES
    run_and_kill(data_dir, 1.0, "remove", str(docs))
    assert_consistent_and_findable(data_dir)
    finish(data_dir, "add", str(docs))
    assert assert_consistent_and_findable(data_dir) == FILES
