"""kill -9 of a writer on a PostgreSQL server while its write group's transaction is open:
the server rolls it back, so no row of the group is in any table, and running the command
again completes it. The kill is the fault hook's (``KNOWLEDGE_AGENT_FAULT=before-commit``,
:mod:`knowledge_agent.faults`): the same point on every machine, no timing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from benchmarks.stress_postgres import rows_whole
from knowledge_agent import KnowledgeAgentCore
from knowledge_agent.faults import FAULT_ENV

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")

GUARD_S = 120.0  # hang guard for the child process
FILES = 12
# Every table a collect's write group writes; before it, the command made its knowledge base
# and recorded the folder (knowledge_bases, source_roots), in transactions of their own.
GROUP_TABLES = (
    "knowledge_items",
    "knowledge_chunks",
    "sources",
    "kw_documents",
    "kw_postings",
    "kw_stats",
)


def token(n: int) -> str:
    """A word of its own per note, letters only, that no stemming changes."""
    return f"tok{chr(97 + n)}q"


def add(url: str, folder: Path, fault: str | None = None) -> tuple[int, str]:
    """``knowledge-agent --backend URL add FOLDER`` in a child; (exit code, stderr)."""
    env = {k: v for k, v in os.environ.items() if k != FAULT_ENV}
    if fault is not None:
        env[FAULT_ENV] = fault
    command = [sys.executable, "-m", "knowledge_agent.cli", "--backend", url, "add", str(folder)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=GUARD_S)
    return done.returncode, done.stderr


def counts(url: str) -> dict[str, int]:
    with psycopg.connect(url) as conn:
        tables = [row[0] for row in conn.execute("SELECT tablename FROM pg_tables "
                                                 "WHERE schemaname = 'public'")]  # fmt: skip
        found: dict[str, int] = {}
        for table in tables:
            row: Any = conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()
            found[table] = int(row[0])
        return found


def test_a_writer_killed_with_its_transaction_open_leaves_no_row_and_a_rerun_completes(
    tmp_path: Path, postgres_url: str
) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    for n in range(FILES):
        (folder / f"note{n:02d}.md").write_text(
            f"# Note {n}\n\nThe word {token(n)} marks note {n}.\n", encoding="utf-8"
        )
    code, err = add(postgres_url, folder, fault="before-commit")
    assert code == -signal.SIGKILL, err
    assert "killing process" in err and "before-commit" in err
    after_kill = counts(postgres_url)
    assert {table: after_kill[table] for table in GROUP_TABLES} == dict.fromkeys(GROUP_TABLES, 0)
    assert after_kill["knowledge_bases"] == 1 and after_kill["source_roots"] == 1
    assert rows_whole(postgres_url) == []
    with KnowledgeAgentCore(backend=postgres_url, workers=1) as core:
        status = core.check()
        assert status.consistent and status.items == 0

    code, err = add(postgres_url, folder)
    assert code == 0, err
    assert counts(postgres_url)["knowledge_items"] == FILES
    assert rows_whole(postgres_url) == []
    with KnowledgeAgentCore(backend=postgres_url, workers=1) as core:
        status = core.check()
        assert status.consistent and status.items == FILES
        for n in range(FILES):
            hits = core.search(token(n))
            assert [hit.item.source_uri for hit in hits] == [str(folder / f"note{n:02d}.md")]
